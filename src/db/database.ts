import { mkdir } from 'node:fs/promises';
import { PGlite } from '@electric-sql/pglite';
import { PrismaPg } from '@prisma/adapter-pg';
import pg from 'pg';
import { PrismaPGlite } from 'pglite-prisma-adapter';
import { PrismaClient } from '../generated/prisma/client.js';
import { lockDataDir } from './data-dir-lock.js';
import { migrate } from './migrate.js';
import { observeAdapter, type QueryObserver } from './query-observer.js';
import type { SqlConnection, SqlDriver } from './sql.js';

export type DatabaseKind = 'pglite' | 'postgresql';

export interface Database {
  kind: DatabaseKind;
  /** Where the data lives, without credentials: printed at start. */
  location: string;
  prisma: PrismaClient;
  sql: SqlDriver;
  ping(): Promise<boolean>;
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
    transaction: (work) =>
      db.transaction((tx) =>
        work({
          async exec(script) {
            await tx.exec(script);
          },
          async query<Row>(text: string, params: unknown[] = []) {
            return (await tx.query(text, params)).rows as Row[];
          },
        }),
      ),
  };
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
    async transaction(work) {
      const client = await pool.connect();
      try {
        await client.query('BEGIN');
        const result = await work(on(client));
        await client.query('COMMIT');
        return result;
      } catch (error) {
        await client.query('ROLLBACK').catch(() => undefined);
        throw error;
      } finally {
        client.release();
      }
    },
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
