import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { openDatabase, type Database } from '../../src/db/database.js';
import type { QueryObserver } from '../../src/db/query-observer.js';
import { migratedTemplate } from './pglite-template.js';

/**
 * Tests run on embedded PGlite, or on PostgreSQL when DATABASE_URL is set: then each test file
 * gets a database of its own on that server, dropped when the file is done.
 */
export const backend: 'postgresql' | 'pglite' = process.env.DATABASE_URL ? 'postgresql' : 'pglite';

/**
 * How long a test's statement may wait on PostgreSQL (DATABASE_TIMEOUT_MS is 5 s in service): a
 * machine running two test files at once can hold a lock that long without anything being wrong.
 * The tests of the timeout itself set their own.
 */
export const TEST_DATABASE_TIMEOUT_MS = 30_000;

export interface TestDatabase {
  db: Database;
  /** For child processes that must open the same database. */
  url: string | undefined;
  close(): Promise<void>;
}

async function admin<T>(work: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: process.env.DATABASE_URL });
  await client.connect();
  try {
    return await work(client);
  } finally {
    await client.end();
  }
}

/** An empty database on the configured backend; migrated unless told otherwise. */
export async function createTestDatabase(
  options: { migrate?: boolean; onQuery?: QueryObserver } = {},
): Promise<TestDatabase> {
  if (backend === 'pglite') {
    // A migrated database starts from the migrated template; an empty one (migration tests) from initdb.
    const loadDataDir = options.migrate === false ? undefined : await migratedTemplate();
    const db = await openDatabase({
      dataDir: 'memory://',
      migrate: options.migrate,
      onQuery: options.onQuery,
      loadDataDir,
    });
    return { db, url: undefined, close: () => db.close() };
  }
  const name = `agw_test_${randomBytes(6).toString('hex')}`;
  await admin((client) => client.query(`CREATE DATABASE ${name}`));
  const url = new URL(process.env.DATABASE_URL!);
  url.pathname = `/${name}`;
  const db = await openDatabase({
    databaseUrl: url.toString(),
    migrate: options.migrate,
    poolSize: 20,
    onQuery: options.onQuery,
    timeoutMs: TEST_DATABASE_TIMEOUT_MS,
  });
  return {
    db,
    url: url.toString(),
    async close() {
      await db.close();
      await admin((client) => client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`));
    },
  };
}

/**
 * The same database opened a second time, as another process would: on PostgreSQL with a pool of
 * its own (so concurrent transactions really interleave); PGlite is one connection, so it is shared.
 * Closing it closes only this second handle.
 */
export async function reopenTestDatabase(database: TestDatabase): Promise<TestDatabase> {
  if (!database.url) return { db: database.db, url: undefined, close: async () => undefined };
  const db = await openDatabase({
    databaseUrl: database.url,
    migrate: false,
    poolSize: 20,
    timeoutMs: TEST_DATABASE_TIMEOUT_MS,
  });
  return { db, url: database.url, close: () => db.close() };
}
