import { mkdir } from 'node:fs/promises';
import { PGlite } from '@electric-sql/pglite';
import { PrismaPg } from '@prisma/adapter-pg';
import pg from 'pg';
import { PrismaPGlite } from 'pglite-prisma-adapter';
import { PrismaClient } from '../generated/prisma/client.js';
import { lockDataDir } from './data-dir-lock.js';
import { migrate } from './migrate.js';
import { observeAdapter, type QueryObserver } from './query-observer.js';
import type { SqlConnection, SqlDriver, TransactionAnswer } from './sql.js';

export type DatabaseKind = 'pglite' | 'postgresql';

export interface Database {
  kind: DatabaseKind;
  /** Where the data lives, without credentials: printed at start. */
  location: string;
  prisma: PrismaClient;
  sql: SqlDriver;
  ping(): Promise<boolean>;
  /**
   * Takes the session-level advisory lock (classId, objectId) and holds it while the process
   * lives, on a connection of its own (PostgreSQL), so other processes find it free exactly when
   * this one is gone: a crash closes the connection and the server drops the lock. False when
   * another session holds it. On PGlite, one process owns the database, so the lock is taken on
   * its only connection.
   */
  holdProcessLock(classId: number, objectId: number): Promise<boolean>;
  close(): Promise<void>;
}

export interface DatabaseOptions {
  databaseUrl?: string;
  /** PGlite data directory; `memory://` keeps it in memory (tests). */
  dataDir?: string;
  /** Apply pending migrations before returning (default true). */
  migrate?: boolean;
  poolSize?: number;
  /** Sees every statement Prisma sends (tests count them). */
  onQuery?: QueryObserver;
}

function pgliteDriver(db: PGlite): SqlDriver {
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
    // PGlite is a single connection: every statement already runs on it.
    withConnection: (work) => work(driver),
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

function postgresDriver(pool: pg.Pool): SqlDriver {
  const on = (client: pg.Pool | pg.PoolClient): SqlConnection => ({
    async exec(script) {
      await client.query(script);
    },
    async query<Row>(text: string, params: unknown[] = [], prepared?: string) {
      return (await client.query(prepared ? { name: prepared, text, values: params } : { text, values: params })).rows as Row[];
    },
  });
  return {
    ...on(pool),
    async withConnection(work) {
      const client = await pool.connect();
      try {
        return await work(on(client));
      } finally {
        client.release();
      }
    },
    transaction: (work) => transactionIf(async (tx) => ({ commit: true, value: await work(tx) })),
    transactionIf,
  };
  async function transactionIf<T>(work: (tx: SqlConnection) => Promise<TransactionAnswer<T>>): Promise<T> {
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      const answer = await work(on(client));
      await client.query(answer.commit ? 'COMMIT' : 'ROLLBACK');
      return answer.value;
    } catch (error) {
      await client.query('ROLLBACK').catch(() => undefined);
      throw error;
    } finally {
      client.release();
    }
  }
}

function redact(url: string): string {
  const parsed = new URL(url);
  if (parsed.password) parsed.password = '***';
  return parsed.toString();
}

export async function openDatabase(options: DatabaseOptions): Promise<Database> {
  const shouldMigrate = options.migrate ?? true;
  if (options.databaseUrl) {
    const pool = new pg.Pool({ connectionString: options.databaseUrl, max: options.poolSize ?? 10 });
    // An idle client's error (server restart) must not crash the process; the pool replaces it.
    pool.on('error', () => undefined);
    const sql = postgresDriver(pool);
    try {
      if (shouldMigrate) await migrate(sql);
    } catch (error) {
      await pool.end();
      throw error;
    }
    const adapter = new PrismaPg(pool);
    const prisma = new PrismaClient({ adapter: options.onQuery ? observeAdapter(adapter, options.onQuery) : adapter });
    const processLocks = new ProcessLocks(options.databaseUrl);
    return {
      kind: 'postgresql',
      location: redact(options.databaseUrl),
      prisma,
      sql,
      ping: () => ping(sql),
      holdProcessLock: (classId, objectId) => processLocks.hold(classId, objectId),
      async close() {
        await processLocks.close();
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
  let pglite: PGlite;
  try {
    pglite = await PGlite.create(dataDir);
  } catch (error) {
    await lock?.release();
    throw error;
  }
  const sql = pgliteDriver(pglite);
  try {
    if (shouldMigrate) await migrate(sql);
  } catch (error) {
    await pglite.close();
    await lock?.release();
    throw error;
  }
  const adapter = new PrismaPGlite(pglite);
  const prisma = new PrismaClient({ adapter: options.onQuery ? observeAdapter(adapter, options.onQuery) : adapter });
  return {
    kind: 'pglite',
    location: dataDir,
    prisma,
    sql,
    ping: () => ping(sql),
    async holdProcessLock(classId, objectId) {
      const [row] = await sql.query<{ locked: boolean }>('SELECT pg_try_advisory_lock($1, $2) AS locked', [classId, objectId]);
      return row.locked;
    },
    async close() {
      await prisma.$disconnect();
      // $disconnect does not close PGlite; without this the process never exits.
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
 * Advisory locks held for the life of the process on one dedicated PostgreSQL connection (not a
 * pool client: the pool may close idle clients, and a lock must not move between sessions). If
 * the connection is lost, it is reopened and the locks taken again.
 */
class ProcessLocks {
  private client: pg.Client | undefined;
  private readonly held: [number, number][] = [];
  private closed = false;
  private reconnect: NodeJS.Timeout | undefined;

  constructor(private readonly connectionString: string) {}

  async hold(classId: number, objectId: number): Promise<boolean> {
    const client = await this.connection();
    const { rows } = await client.query<{ locked: boolean }>('SELECT pg_try_advisory_lock($1, $2) AS locked', [classId, objectId]);
    if (rows[0].locked) this.held.push([classId, objectId]);
    return rows[0].locked;
  }

  private async connection(): Promise<pg.Client> {
    if (this.client) return this.client;
    const client = new pg.Client({ connectionString: this.connectionString });
    client.on('error', () => this.lost(client));
    client.on('end', () => this.lost(client));
    await client.connect();
    this.client = client;
    return client;
  }

  private lost(client: pg.Client): void {
    if (this.client !== client || this.closed) return;
    this.client = undefined;
    this.scheduleReconnect();
  }

  private scheduleReconnect(): void {
    if (this.closed || this.reconnect) return;
    this.reconnect = setTimeout(() => {
      this.reconnect = undefined;
      void this.retake().catch(() => this.scheduleReconnect());
    }, 1000);
    this.reconnect.unref();
  }

  private async retake(): Promise<void> {
    const client = await this.connection();
    for (const [classId, objectId] of this.held) await client.query('SELECT pg_advisory_lock($1, $2)', [classId, objectId]);
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.reconnect);
    const client = this.client;
    this.client = undefined;
    await client?.end().catch(() => undefined);
  }
}
