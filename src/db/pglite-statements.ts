import {
  type messages,
  type PGlite,
  parse,
  protocol,
  type QueryOptions,
  type Results,
  TransactionAbortedError,
  types,
} from '@electric-sql/pglite';

/**
 * PGlite with prepared statements. PGlite's own `query` parses and plans every statement again and
 * crosses into its WebAssembly backend six times for it (parse, describe, bind, describe, execute,
 * sync). Here a statement is parsed once and named, and each run is one message (bind, describe,
 * execute, sync): a primary-key read costs about a third as much (decision 0055). This is what
 * the embedded database offers the service (pglite-worker.ts, which runs it on its own thread):
 * PGlite's `query`, `exec` and `transaction`, answering as PGlite does, which is all our SQL driver
 * and Prisma's PGlite adapter use.
 */
export interface PreparedPGlite {
  query<T>(text: string, params?: unknown[], options?: QueryOptions): Promise<Results<T>>;
  exec(script: string, options?: QueryOptions): Promise<Results[]>;
  transaction<T>(work: (tx: PreparedTransaction) => Promise<T>): Promise<T>;
}

export interface PreparedTransaction {
  query<T>(text: string, params?: unknown[], options?: QueryOptions): Promise<Results<T>>;
  exec(script: string, options?: QueryOptions): Promise<Results[]>;
  rollback(): Promise<void>;
  readonly closed: boolean;
}

interface Prepared {
  name: string;
  /** The parameters' types as PostgreSQL inferred them: how each value is written. */
  paramTypes: number[];
}

/** Bounds the statements kept per database: a statement built per list length would otherwise grow it forever. */
const MAX_PREPARED = 500;
/** SQLSTATE 0A000 "cached plan must not change result type": a table under a prepared statement changed. */
const FEATURE_NOT_SUPPORTED = '0A000';

const { serialize } = protocol;

function concat(parts: Uint8Array[]): Uint8Array {
  if (parts.length === 1) return parts[0];
  const out = new Uint8Array(parts.reduce((length, part) => length + part.length, 0));
  let offset = 0;
  for (const part of parts) {
    out.set(part, offset);
    offset += part.length;
  }
  return out;
}

/**
 * A statement's answer with its values as PostgreSQL wrote them (text, or null). Values are parsed
 * where they are used: a Date or a Uint8Array made on another thread is of another realm, which
 * `instanceof` checks (Prisma's, a test's) would not recognize.
 */
export interface RawResult {
  fields: { name: string; dataTypeID: number }[];
  rows: (string | null)[][];
  command?: string;
  /** As PGlite counts it: the rows changed so far by the script's statements. */
  affectedRows: number;
  rowCount?: number;
}

/** PGlite's parseResults without the parsing: one answer per completed command. */
function rawResults(backendMessages: messages.BackendMessage[]): RawResult[] {
  const results: RawResult[] = [];
  let current: Pick<RawResult, 'fields' | 'rows'> = { fields: [], rows: [] };
  let affectedRows = 0;
  for (const message of backendMessages) {
    if (message.name === 'rowDescription') {
      current.fields = (message as messages.RowDescriptionMessage).fields.map((field) => ({
        name: field.name,
        dataTypeID: field.dataTypeID,
      }));
    } else if (message.name === 'dataRow') {
      current.rows.push((message as messages.DataRowMessage).fields);
    } else if (message.name === 'commandComplete') {
      // A tag that carries a row count ends in it ("SELECT 2", "INSERT 0 5"); others end in a word.
      const parts = (message as messages.CommandCompleteMessage).text.split(' ');
      const command = parts[0];
      const rowCount = Number.parseInt(parts[parts.length - 1], 10);
      if (['INSERT', 'UPDATE', 'DELETE', 'COPY', 'MERGE'].includes(command)) affectedRows += rowCount;
      results.push({ ...current, command, affectedRows, ...(Number.isNaN(rowCount) ? {} : { rowCount }) });
      current = { fields: [], rows: [] };
    }
  }
  return results.length ? results : [{ fields: [], rows: [], affectedRows: 0 }];
}

/** An array type and its element's type, for parsing arrays as PGlite does. */
export interface ArrayType {
  oid: number;
  typarray: number;
}

/** The array types of the database, as PGlite reads them when it starts. */
export async function arrayTypes(runner: StatementRunner): Promise<ArrayType[]> {
  const [result] = await runner.script(
    `SELECT b.oid, b.typarray FROM pg_catalog.pg_type a LEFT JOIN pg_catalog.pg_type b ON b.oid = a.typelem
     WHERE a.typcategory = 'A' GROUP BY b.oid, b.typarray ORDER BY b.oid`,
    false,
  );
  return result.rows.map(([oid, typarray]) => ({ oid: Number(oid), typarray: Number(typarray) }));
}

type Parsers = Record<number, (value: string) => unknown>;

/** PGlite's parsers by type, its array types' included. */
export function parsersFor(arrays: readonly ArrayType[]): Parsers {
  const parsers: Parsers = { ...(types.parsers as Parsers) };
  for (const { oid, typarray } of arrays) {
    parsers[typarray] = (value) => types.arrayParser(value, parsers[oid] as types.Parser, typarray);
  }
  return parsers;
}

/** A raw answer parsed as PGlite's query would have parsed it, in this realm. */
export function parseRaw<T>(raw: RawResult, parsers: Parsers, options: QueryOptions | undefined): Results<T> {
  const using = (options?.parsers ? { ...parsers, ...options.parsers } : parsers) as QueryOptions['parsers'];
  const { fields } = raw;
  const rows = raw.rows.map((values) => {
    if (options?.rowMode === 'array') {
      return values.map((value, i) => types.parseType(value, fields[i].dataTypeID, using));
    }
    const row: Record<string, unknown> = {};
    values.forEach((value, i) => {
      row[fields[i].name] = types.parseType(value, fields[i].dataTypeID, using);
    });
    return row;
  });
  return { ...raw, rows } as Results<T>;
}

/**
 * The statements of one PGlite session, without locks: whoever calls it runs one statement at a
 * time and knows whether a transaction is open (statements in one are not synced to disk alone).
 */
export interface StatementRunner {
  statement(text: string, params: unknown[], inTransaction: boolean): Promise<RawResult>;
  script(text: string, inTransaction: boolean): Promise<RawResult[]>;
}

export function statementRunner(pglite: PGlite): StatementRunner {
  /** Text → statement, oldest use first (a Map keeps insertion order; a use moves it to the end). */
  const statements = new Map<string, Prepared>();
  let nextName = 0;

  const send = async (parts: Uint8Array[], inTransaction: boolean) =>
    (await pglite.execProtocol(concat(parts), { syncToFs: !inTransaction })).messages;

  async function prepare(text: string, inTransaction: boolean): Promise<Prepared> {
    const known = statements.get(text);
    if (known) {
      statements.delete(text);
      statements.set(text, known);
      return known;
    }
    if (statements.size >= MAX_PREPARED) {
      const [oldestText, oldest] = statements.entries().next().value as [string, Prepared];
      statements.delete(oldestText);
      await send([serialize.close({ type: 'S', name: oldest.name }), serialize.sync()], inTransaction);
    }
    const name = `agw_${nextName++}`;
    // A failed Parse creates nothing: the statement is kept only once PostgreSQL has it.
    const messages = await send(
      [serialize.parse({ name, text }), serialize.describe({ type: 'S', name }), serialize.sync()],
      inTransaction,
    );
    const prepared = { name, paramTypes: parse.parseDescribeStatementResults(messages) };
    statements.set(text, prepared);
    return prepared;
  }

  /** Writes each value as PGlite's query would: by the type PostgreSQL gave its parameter. */
  function values(params: unknown[], prepared: Prepared) {
    return params.map((param, i) => {
      if (param === null || param === undefined) return null;
      const write = pglite.serializers[prepared.paramTypes[i]];
      return write ? write(param) : String(param);
    });
  }

  async function statement(text: string, params: unknown[], inTransaction: boolean): Promise<RawResult> {
    const prepared = await prepare(text, inTransaction);
    try {
      const messages = await send(
        [
          serialize.bind({ statement: prepared.name, values: values(params, prepared) }),
          serialize.describe({ type: 'P' }),
          serialize.execute({}),
          serialize.sync(),
        ],
        inTransaction,
      );
      return rawResults(messages)[0];
    } catch (error) {
      if ((error as { code?: string }).code !== FEATURE_NOT_SUPPORTED || !statements.has(text)) throw error;
      // The statement's tables changed shape: it is prepared again. Outside a transaction the run
      // had no effect and is sent again; inside, the transaction is already lost.
      statements.delete(text);
      await send([serialize.close({ type: 'S', name: prepared.name }), serialize.sync()], inTransaction);
      if (inTransaction) throw error;
      return statement(text, params, inTransaction);
    }
  }

  async function script(text: string, inTransaction: boolean) {
    return rawResults(await send([serialize.query(text), serialize.sync()], inTransaction));
  }

  return { statement, script };
}

/** What a transaction runs its statements through: parsed answers, as PGlite's own give. */
export interface ParsedStatements {
  statement<T>(
    text: string,
    params: unknown[],
    options: QueryOptions | undefined,
    inTransaction: boolean,
  ): Promise<Results<T>>;
  script(text: string, options: QueryOptions | undefined, inTransaction: boolean): Promise<Results[]>;
}

/**
 * Runs `work` in a transaction through `runner`, as PGlite's own `transaction` does: committed
 * when it resolves, rolled back when it throws or asks to. The caller holds whatever lock keeps
 * other statements out until it ends.
 */
export async function runTransaction<T>(
  runner: ParsedStatements,
  work: (tx: PreparedTransaction) => Promise<T>,
): Promise<T> {
  await runner.script('BEGIN', undefined, true);
  let closed = false;
  const open = () => {
    if (closed) throw new Error('Transaction is closed');
  };
  const tx: PreparedTransaction = {
    async query<R>(text: string, params: unknown[] = [], options?: QueryOptions) {
      open();
      return runner.statement<R>(text, params, options, true);
    },
    async exec(script: string, options?: QueryOptions) {
      open();
      return runner.script(script, options, true);
    },
    async rollback() {
      open();
      await runner.script('ROLLBACK', undefined, true);
      closed = true;
    },
    get closed() {
      return closed;
    },
  };
  try {
    const result = await work(tx);
    if (!closed) {
      closed = true;
      const [ended] = await runner.script('COMMIT', undefined, false);
      // COMMIT of a transaction a statement failed in rolls it back, as PGlite's transaction reports.
      if (ended.command === 'ROLLBACK') throw new TransactionAbortedError();
    }
    return result;
  } catch (error) {
    if (!closed) {
      closed = true;
      await runner.script('ROLLBACK', undefined, false);
    }
    throw error;
  }
}
