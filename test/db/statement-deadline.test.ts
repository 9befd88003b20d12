/**
 * Every statement sent to PostgreSQL has a deadline (DATABASE_TIMEOUT_MS): one the server never
 * answers fails as the database being unavailable, and its connection is dropped so that the next
 * statements get a working one. (What the deadline costs the garbage collector: young-garbage.test.ts.)
 */
import net, { type AddressInfo } from 'node:net';
import { openDatabase, type Database } from '../../src/db/database.js';
import { isDatabaseUnavailable } from '../../src/db/unavailable.js';
import { backend, createTestDatabase, type TestDatabase } from '../support/database.js';

const onPostgres = backend === 'postgresql' ? test : test.skip;
const TIMEOUT_MS = 1500;

let database: TestDatabase | undefined;
beforeAll(async () => {
  if (backend === 'postgresql') database = await createTestDatabase();
}, 60_000);
afterAll(() => database?.close(), 60_000);

/**
 * A TCP proxy to the test database that can go silent: while frozen it passes nothing either way
 * and keeps every connection open, as a network partition does.
 */
async function freezableProxy(target: URL) {
  let frozen = false;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(Number(target.port || 5432), target.hostname);
    for (const [from, to] of [
      [client, upstream],
      [upstream, client],
    ] as const) {
      sockets.add(from);
      from.on('data', (chunk) => {
        if (!frozen) to.write(chunk);
      });
      from.on('error', () => to.destroy());
      from.on('close', () => to.destroy());
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = new URL(target);
  url.hostname = '127.0.0.1';
  url.port = String((server.address() as AddressInfo).port);
  return {
    url: url.toString(),
    freeze: (value: boolean) => {
      frozen = value;
    },
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

/** How long `work` took to fail, and with what. */
async function failure(work: () => Promise<unknown>): Promise<{ error: unknown; ms: number }> {
  const started = Date.now();
  try {
    await work();
  } catch (error) {
    return { error, ms: Date.now() - started };
  }
  throw new Error('the statement was answered');
}

describe('a statement the server never answers', () => {
  onPostgres(
    'fails within DATABASE_TIMEOUT_MS as the database being unavailable, in every form; the pool then hands out working connections',
    async () => {
      const proxy = await freezableProxy(new URL(database!.url!));
      let db: Database | undefined;
      try {
        // Also the connect timeout: short enough for a quick test, long enough for PostgreSQL to
        // start a backend for the reconnection while other test files load the machine.
        db = await openDatabase({ databaseUrl: proxy.url, migrate: false, timeoutMs: TIMEOUT_MS });
        const open = db;
        // Connections are made and work before the partition.
        await Promise.all([1, 2, 3].map((i) => open.sql.query('SELECT $1::int AS i', [i])));
        proxy.freeze(true);
        const failures = await Promise.all([
          failure(() => open.sql.query('SELECT 1 AS i')),
          failure(() => open.sql.query('SELECT $1::int AS i', [7], 'named_during_partition')),
          failure(() => open.sql.transaction(async (tx) => tx.query('SELECT 1 AS i'))),
          failure(() => open.prisma.$queryRaw`SELECT 1 AS i`),
        ]);
        for (const { error, ms } of failures) {
          expect(isDatabaseUnavailable(error)).toBe(true);
          // Generous: the bound is what matters; without a deadline these never fail.
          expect(ms).toBeLessThan(TIMEOUT_MS * 3 + 3000);
        }
        expect(String((failures[0].error as Error).message)).toMatch(/Query read timeout/);
        proxy.freeze(false);
        // The silent connections were dropped: what comes next is answered.
        const rows = await open.sql.query<{ i: number }>('SELECT $1::int AS i', [42]);
        expect(rows).toEqual([{ i: 42 }]);
        await expect(open.sql.transaction(async (tx) => tx.query<{ i: number }>('SELECT 2 AS i'))).resolves.toEqual([
          { i: 2 },
        ]);
        await expect(open.prisma.$queryRaw`SELECT 3 AS i`).resolves.toEqual([{ i: 3 }]);
      } finally {
        await db?.close().catch(() => undefined);
        await proxy.close();
      }
    },
    60_000,
  );
});
