import {
  type PGlite,
  parse,
  protocol,
  type QueryOptions,
  type Results,
  TransactionAbortedError,
} from '@electric-sql/pglite';

/**
 * PGlite with prepared statements. PGlite's own `query` parses and plans every statement again and
 * crosses into its WebAssembly backend six times for it (parse, describe, bind, describe, execute,
 * sync), all on the event loop. Here a statement is parsed once and named, and each run is one
 * message (bind, describe, execute, sync): a primary-key read costs about a third as much
 * (measured in decision 0055). It answers like PGlite's `query`, `exec` and `transaction`, which
 * is all our SQL driver and Prisma's PGlite adapter use, and it holds PGlite's own locks, so
 * statements sent to PGlite directly (migrations, dumps) still never interleave with a transaction.
 */
export interface PreparedPGlite {
  query<T>(text: string, params?: unknown[], options?: QueryOptions): Promise<Results<T>>;
  exec(script: string, options?: QueryOptions): Promise<Results[]>;
  transaction<T>(work: (tx: PreparedTransaction) => Promise<T>): Promise<T>;
  /** Statements prepared now (tests). */
  readonly preparedCount: number;
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

/** PGlite's locks and readiness check: protected in its types, the ones its own query and transaction take. */
interface PGliteLocks {
  /** Throws "PGlite is closed" once it is: what a request sees when the database closes under it. */
  _checkReady(): Promise<void>;
  _runExclusiveQuery<T>(fn: () => Promise<T>): Promise<T>;
  _runExclusiveTransaction<T>(fn: () => Promise<T>): Promise<T>;
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

export function preparedPGlite(pglite: PGlite): PreparedPGlite {
  const locks = pglite as unknown as PGliteLocks;
  /** Text → statement, oldest use first (a Map keeps insertion order; a use moves it to the end). */
  const statements = new Map<string, Prepared>();
  let nextName = 0;

  const send = async (parts: Uint8Array[], inTransaction: boolean) =>
    (await pglite.execProtocol(concat(parts), { syncToFs: !inTransaction })).messages;

  async function prepare(text: string, options: QueryOptions | undefined, inTransaction: boolean): Promise<Prepared> {
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
      [
        serialize.parse({ name, text, types: options?.paramTypes }),
        serialize.describe({ type: 'S', name }),
        serialize.sync(),
      ],
      inTransaction,
    );
    const prepared = { name, paramTypes: parse.parseDescribeStatementResults(messages) };
    statements.set(text, prepared);
    return prepared;
  }

  /** Writes each value as PGlite's query would: by the type PostgreSQL gave its parameter. */
  function values(params: unknown[], prepared: Prepared, options: QueryOptions | undefined) {
    return params.map((param, i) => {
      if (param === null || param === undefined) return null;
      const oid = prepared.paramTypes[i];
      const write = options?.serializers?.[oid] ?? pglite.serializers[oid];
      return write ? write(param) : String(param);
    });
  }

  async function run<T>(
    text: string,
    params: unknown[],
    options: QueryOptions | undefined,
    inTransaction: boolean,
  ): Promise<Results<T>> {
    const prepared = await prepare(text, options, inTransaction);
    try {
      const messages = await send(
        [
          serialize.bind({ statement: prepared.name, values: values(params, prepared, options) }),
          serialize.describe({ type: 'P' }),
          serialize.execute({}),
          serialize.sync(),
        ],
        inTransaction,
      );
      return parse.parseResults(messages, pglite.parsers, options)[0] as Results<T>;
    } catch (error) {
      if ((error as { code?: string }).code !== FEATURE_NOT_SUPPORTED || !statements.has(text)) throw error;
      // The statement's tables changed shape: it is prepared again. Outside a transaction the run
      // had no effect and is sent again; inside, the transaction is already lost.
      statements.delete(text);
      await send([serialize.close({ type: 'S', name: prepared.name }), serialize.sync()], inTransaction);
      if (inTransaction) throw error;
      return run(text, params, options, inTransaction);
    }
  }

  /** PGlite's own `query` takes what this path does not write (a COPY's blob). */
  const plain = (options: QueryOptions | undefined) => options?.blob !== undefined;

  async function simple(script: string, options: QueryOptions | undefined, inTransaction: boolean) {
    const messages = await send([serialize.query(script), serialize.sync()], inTransaction);
    return parse.parseResults(messages, pglite.parsers, options);
  }

  return {
    get preparedCount() {
      return statements.size;
    },
    async query<T>(text: string, params: unknown[] = [], options?: QueryOptions) {
      if (plain(options)) return pglite.query<T>(text, params, options);
      await locks._checkReady();
      return locks._runExclusiveTransaction(() => locks._runExclusiveQuery(() => run<T>(text, params, options, false)));
    },
    async exec(script: string, options?: QueryOptions) {
      await locks._checkReady();
      return locks._runExclusiveTransaction(() => locks._runExclusiveQuery(() => simple(script, options, false)));
    },
    async transaction<T>(work: (tx: PreparedTransaction) => Promise<T>) {
      await locks._checkReady();
      return locks._runExclusiveTransaction(async () => {
        const inQueryLock = <R>(fn: () => Promise<R>) => locks._runExclusiveQuery(fn);
        await inQueryLock(() => simple('BEGIN', undefined, true));
        let closed = false;
        const open = () => {
          if (closed) throw new Error('Transaction is closed');
        };
        const tx: PreparedTransaction = {
          async query<R>(text: string, params: unknown[] = [], options?: QueryOptions) {
            open();
            return inQueryLock(() => run<R>(text, params, options, true));
          },
          async exec(script: string, options?: QueryOptions) {
            open();
            return inQueryLock(() => simple(script, options, true));
          },
          async rollback() {
            open();
            await inQueryLock(() => simple('ROLLBACK', undefined, true));
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
            const [ended] = await inQueryLock(() => simple('COMMIT', undefined, false));
            // COMMIT of a transaction a statement failed in rolls it back, as PGlite's transaction reports.
            if (ended.command === 'ROLLBACK') throw new TransactionAbortedError();
          }
          return result;
        } catch (error) {
          if (!closed) {
            closed = true;
            await inQueryLock(() => simple('ROLLBACK', undefined, false));
          }
          throw error;
        }
      });
    },
  };
}
