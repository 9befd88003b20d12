import { mkdir } from 'node:fs/promises';
import type { PGlite } from '@electric-sql/pglite';
import type { PrismaPg } from '@prisma/adapter-pg';
import pg from 'pg';
import { clientWithStatementDeadline } from './statement-deadline.js';
import { PrismaPGlite } from 'pglite-prisma-adapter';
import { PrismaClient } from '../generated/prisma/client.js';
import { lockDataDir } from './data-dir-lock.js';
import { migrate } from './migrate.js';
import type { PreparedPGlite } from './pglite-statements.js';
import { type PGliteOnThread, startPGliteThread } from './pglite-worker.js';
import { observeAdapter, type QueryObserver } from './query-observer.js';
import {
  DEFAULT_DATABASE_TIMEOUT_MS,
  type PoolMode,
  type SqlConnection,
  type SqlDriver,
  type TransactionAnswer,
} from './sql.js';
import { isDatabaseUnavailable, isLostPreparedStatement } from './unavailable.js';
import { namedStatementLost, type StatementNaming } from './statement-naming.js';
import { preparedPrisma } from './prisma-statements.js';

export type DatabaseKind = 'pglite' | 'postgresql';

export interface Database {
  kind: DatabaseKind;
  /** Where the data lives, without credentials: printed at start. */
  location: string;
  prisma: PrismaClient;
  sql: SqlDriver;
  ping(): Promise<boolean>;
  close(): Promise<void>;
  /** PGlite only: the data directory as a tarball (what `loadDataDir` takes back). */
  dumpDataDir?(): Promise<Blob>;
}

export interface DatabaseOptions {
  databaseUrl?: string;
  /** PGlite data directory; `memory://` keeps it in memory (tests). */
  dataDir?: string;
  /**
   * PGlite: starts from this dump of a data directory (`dumpDataDir`) instead of an empty one;
   * tests load a migrated template rather than creating and migrating a database per file.
   */
  loadDataDir?: Blob;
  /** Apply pending migrations before returning (default true). */
  migrate?: boolean;
  poolSize?: number;
  /**
   * PostgreSQL: how long a statement, or the wait for a connection, may take before it fails as
   * unavailable (default 5000); migrations are not bound by it.
   */
  timeoutMs?: number;
  poolMode?: PoolMode;
  /** Told once when the server loses named prepared statements in `session` mode (a pooler in transaction mode). */
  warn?: (message: string) => void;
  /** Sees every statement Prisma sends (tests count them). */
  onQuery?: QueryObserver;
}

function pgliteDriver(db: PreparedPGlite): SqlDriver {
  const driver: SqlConnection = {
    async exec(script) {
      await db.exec(script);
    },
    async query<Row>(text: string, params: unknown[] = []) {
      return (await db.query(text, params)).rows as Row[];
    },
  };
  return {
    ...driver,
    // PGlite's own transaction keeps other queries out until it ends.
    transaction: (work) => transactionIf(async (tx) => ({ commit: true, value: await work(tx) })),
    transactionIf,
  };
  function transactionIf<T>(work: (tx: SqlConnection) => Promise<TransactionAnswer<T>>): Promise<T> {
    return db.transaction(async (tx) => {
      const answer = await work({
        async exec(script) {
          await tx.exec(script);
        },
        async query<Row>(text: string, params: unknown[] = []) {
          return (await tx.query(text, params)).rows as Row[];
        },
      });
      if (!answer.commit) await tx.rollback();
      return answer.value;
    });
  }
}

/**
 * The Prisma client over a driver adapter. `errorFormat: 'minimal'`: with any other format every
 * call captures a stack trace (`new Error()`) to point at its caller in an error's message, a
 * few percent of an operator read's CPU; our errors are mapped by code, and logs need no code frame.
 */
function prismaClient(adapter: PrismaPg | PrismaPGlite, onQuery: DatabaseOptions['onQuery']): PrismaClient {
  return new PrismaClient({ adapter: onQuery ? observeAdapter(adapter, onQuery) : adapter, errorFormat: 'minimal' });
}

/**
 * Runs `work` on a client of its own. The pool listens for errors only on idle clients: without a
 * listener of ours, a connection lost while held (a terminated backend, a restarted or failed-over
 * server, a proxy's idle timeout) is an unhandled 'error' event, and that ends the process. A
 * client whose connection was lost or stopped answering is closed instead of going back to the pool.
 */
async function withPoolClient<T>(pool: pg.Pool, work: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  let lost: Error | undefined;
  const onError = (error: Error) => {
    lost ??= error;
  };
  client.on('error', onError);
  try {
    return await work(client);
  } catch (error) {
    if (isDatabaseUnavailable(error)) lost ??= error as Error;
    throw error;
  } finally {
    // A closed client may still report its socket's end: the listener stays with it.
    if (!lost) client.off('error', onError);
    client.release(lost);
  }
}

/** node-postgres refused a statement without sending it: the client's connection was already lost. */
const notSent = (error: unknown) => /not queryable/i.test((error as Error | null)?.message ?? '');

/** BEGIN failed on a lost connection: nothing ran, so the transaction may be tried on another one. */
class TransactionNotStarted extends Error {
  constructor(cause: unknown) {
    super('The transaction could not begin: its connection was lost', { cause });
  }
}

/**
 * The driver over node-postgres: statements on `target` (the pool, or the one client of a
 * migration run), transactions on a client `acquire` lends. A statement the pool's client could not
 * even send (its connection had been terminated while idle) is sent once more, on another client.
 */
function postgresDriver(
  target: pg.Pool | pg.Client,
  acquire: <T>(work: (client: pg.ClientBase) => Promise<T>) => Promise<T>,
  naming: StatementNaming,
): SqlDriver {
  /** A statement sent named failed because the server session did not have it (or had one of its name). */
  const lostNamedStatement = (error: unknown, sentNamed: boolean) => {
    if (!sentNamed || !isLostPreparedStatement(error)) return false;
    namedStatementLost(naming);
    return true;
  };
  const on = (client: pg.Pool | pg.ClientBase, inTransaction: boolean): SqlConnection => ({
    async exec(script) {
      await client.query(script);
    },
    async query<Row>(text: string, params: unknown[] = [], prepared?: string) {
      const named = naming.named && prepared !== undefined;
      try {
        return (await client.query(named ? { name: prepared, text, values: params } : { text, values: params }))
          .rows as Row[];
      } catch (error) {
        // Outside a transaction nothing ran: the statement is sent again, unnamed. Inside one, the
        // transaction is lost and transactionIf runs it again.
        if (lostNamedStatement(error, named) && !inTransaction) {
          return (await client.query({ text, values: params })).rows as Row[];
        }
        if (notSent(error) && !inTransaction) {
          return (await client.query(named ? { name: prepared, text, values: params } : { text, values: params }))
            .rows as Row[];
        }
        throw error;
      }
    },
  });
  async function attempt<T>(work: (tx: SqlConnection) => Promise<TransactionAnswer<T>>): Promise<T> {
    return acquire(async (client) => {
      await client.query('BEGIN').catch((error: unknown) => {
        throw isDatabaseUnavailable(error) ? new TransactionNotStarted(error) : error;
      });
      try {
        const answer = await work(on(client, true));
        await client.query(answer.commit ? 'COMMIT' : 'ROLLBACK');
        return answer.value;
      } catch (error) {
        // A lost connection has no transaction left to roll back: the server ended it.
        if (!isDatabaseUnavailable(error)) await client.query('ROLLBACK').catch(() => undefined);
        throw error;
      }
    });
  }
  async function transactionIf<T>(work: (tx: SqlConnection) => Promise<TransactionAnswer<T>>): Promise<T> {
    try {
      return await attempt(work);
    } catch (error) {
      // Nothing of it was committed: once named statements are off, the whole transaction is run
      // again; one that could not begin is tried once on another connection.
      if (isLostPreparedStatement(error) && !naming.named) return attempt(work);
      if (error instanceof TransactionNotStarted) {
        return attempt(work).catch((again: unknown) => {
          throw again instanceof TransactionNotStarted ? again.cause : again;
        });
      }
      throw error;
    }
  }
  return {
    ...on(target, false),
    transaction: (work) => transactionIf(async (tx) => ({ commit: true, value: await work(tx) })),
    transactionIf,
  };
}

function redact(url: string): string {
  const parsed = new URL(url);
  if (parsed.password) parsed.password = '***';
  return parsed.toString();
}

export async function openDatabase(options: DatabaseOptions): Promise<Database> {
  const shouldMigrate = options.migrate ?? true;
  if (options.databaseUrl) {
    const timeoutMs = options.timeoutMs ?? DEFAULT_DATABASE_TIMEOUT_MS;
    const naming: StatementNaming = {
      named: options.poolMode !== 'transaction',
      warn: options.warn ?? (() => undefined),
    };
    if (shouldMigrate) await migratePostgres(options.databaseUrl, timeoutMs, naming);
    const pool = new pg.Pool({
      connectionString: options.databaseUrl,
      max: options.poolSize ?? 10,
      // Bounds the wait for a free client and for a new connection: an unreachable server fails
      // requests fast instead of queueing them.
      connectionTimeoutMillis: timeoutMs,
      // A statement the server never answers (a network partition) fails; its client is closed.
      Client: clientWithStatementDeadline(timeoutMs),
      keepAlive: true,
    });
    // An idle client's error (server restart) must not crash the process; the pool replaces it.
    pool.on('error', () => undefined);
    // Every client listens for errors for its whole life. pg-pool takes its own listener off a
    // client it hands to a waiting caller, and the caller (awaiting a promise) adds one only a
    // microtask later; when a terminated backend's notice arrives in the same read as the end of
    // the client's previous query, 'error' is emitted in between, with nobody listening, and an
    // unhandled 'error' event ends the process. Failures still reach the query or the holder.
    pool.on('connect', (client) => client.on('error', () => undefined));
    const sql = postgresDriver(pool, (work) => withPoolClient(pool, work), naming);
    const adapter = preparedPrisma(pool, naming);
    const prisma = prismaClient(adapter, options.onQuery);
    return {
      kind: 'postgresql',
      location: redact(options.databaseUrl),
      prisma,
      sql,
      ping: () => ping(sql),
      async close() {
        await prisma.$disconnect();
        await pool.end();
      },
    };
  }

  const dataDir = options.dataDir ?? './data';
  const inMemory = dataDir.startsWith('memory://');
  // PGlite creates its files world-writable; a private directory keeps other users out.
  if (!inMemory) await mkdir(dataDir, { recursive: true, mode: 0o700 });
  // Before PGlite touches the files: a second process on them would corrupt the database.
  const lock = inMemory ? undefined : await lockDataDir(dataDir);
  let pglite: PGliteOnThread;
  try {
    pglite = await startPGliteThread({ dataDir, loadDataDir: await options.loadDataDir?.arrayBuffer() });
  } catch (error) {
    await lock?.release();
    throw error;
  }
  try {
    if (shouldMigrate) {
      const applied = await migrate(pgliteDriver(pglite));
      // A fresh database gets its enums now, after the thread started: `"RecordStatus"[]` and the
      // like would otherwise be sent as text and fail (a record batch on a first `npm start`).
      await pglite.refreshArrayTypes();
      // Creating a data directory (initdb runs in a second PGlite, dropped but not yet collected)
      // and migrating it grew the thread's WebAssembly memory, which never shrinks: 450 MB held
      // after a first start against 140 after any other. A new thread starts from what is on disk.
      if (applied.length > 0 && !inMemory) {
        await pglite.close();
        pglite = await startPGliteThread({ dataDir });
      }
    }
  } catch (error) {
    // Closing a thread that is closed already does nothing.
    await pglite.close();
    await lock?.release();
    throw error;
  }
  const sql = pgliteDriver(pglite);
  // The adapter uses only query, exec and transaction, which the prepared facade answers as PGlite does.
  const adapter = new PrismaPGlite(pglite as unknown as PGlite);
  const prisma = prismaClient(adapter, options.onQuery);
  return {
    kind: 'pglite',
    location: dataDir,
    prisma,
    sql,
    ping: () => ping(sql),
    dumpDataDir: () => pglite.dumpDataDir(),
    async close() {
      await prisma.$disconnect();
      // $disconnect does not close PGlite: this closes it on its thread (a clean shutdown of the data
      // directory) and ends the thread, before the directory's lock is given up.
      if (!pglite.closed) await pglite.close();
      await lock?.release();
    },
  };
}

async function ping(sql: SqlDriver): Promise<boolean> {
  try {
    const timeout = new Promise<never>((_, reject) => setTimeout(() => reject(new Error('timeout')), 2000).unref());
    await Promise.race([sql.query('SELECT 1'), timeout]);
    return true;
  } catch {
    return false;
  }
}

/**
 * Migrations run on a connection of their own, before the pool opens: a migration may take longer
 * than any request may wait, so the statement timeout does not apply to it.
 */
async function migratePostgres(databaseUrl: string, timeoutMs: number, naming: StatementNaming): Promise<void> {
  const client = new pg.Client({ connectionString: databaseUrl, connectionTimeoutMillis: timeoutMs, keepAlive: true });
  client.on('error', () => undefined);
  await client.connect();
  try {
    await migrate(postgresDriver(client, (work) => work(client), naming));
  } finally {
    await client.end().catch(() => undefined);
  }
}
