/**
 * Every statement sent to PostgreSQL has a deadline (DATABASE_TIMEOUT_MS): one the server never
 * answers fails as the database being unavailable, and its connection is dropped so that the next
 * statements get a working one. And the deadline costs the garbage collector nothing: a statement's
 * objects die young (src/db/statement-deadline.ts says what node-postgres' own `query_timeout` did).
 */
import { execFile } from 'node:child_process';
import net, { type AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { openDatabase, type Database } from '../../src/db/database.js';
import { isDatabaseUnavailable } from '../../src/db/unavailable.js';
import { backend, createTestDatabase, type TestDatabase } from '../support/database.js';

const onPostgres = backend === 'postgresql' ? test : test.skip;

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
        db = await openDatabase({ databaseUrl: proxy.url, migrate: false, timeoutMs: 400 });
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
          expect(ms).toBeLessThan(400 * 3 + 3000);
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

describe("the deadline and the garbage collector (the pool's clients)", () => {
  /**
   * Bytes that young-generation collections promoted while `statements` statements ran one after
   * another in a process of its own, with a 1 MB young generation so that it collects often.
   */
  async function promotedPerStatement(form: 'statement' | 'transaction', statements: number) {
    const { stdout } = await promisify(execFile)(
      process.execPath,
      [
        '--max-semi-space-size=1',
        '--trace-gc-nvp',
        fileURLToPath(new URL('../support/statement-garbage.mjs', import.meta.url)),
      ],
      {
        env: {
          ...process.env,
          NODE_OPTIONS: '',
          DATABASE_URL: database!.url,
          STATEMENT_FORM: form,
          STATEMENTS: String(statements),
        },
        maxBuffer: 64 * 1024 * 1024,
        timeout: 120_000,
      },
    );
    const lines = stdout.split('\n');
    const counted = lines.slice(lines.indexOf('START') + 1, lines.indexOf('END'));
    const scavenges = counted.filter((line) => / gc=s /.test(line));
    const promoted = scavenges.reduce((sum, line) => sum + Number(/ promoted=(\d+)/.exec(line)![1]), 0);
    return { scavenges: scavenges.length, perStatement: promoted / statements };
  }

  // With node-postgres' query_timeout, each statement promoted 0.5 to 1 KB (its objects and those
  // it reached): 960 bytes alone, 515 in a transaction. Now a few bytes.
  onPostgres.each(['statement', 'transaction'] as const)(
    'a %s sent through the pool leaves nothing for the old generation',
    async (form) => {
      const { scavenges, perStatement } = await promotedPerStatement(form, 10_000);
      // Enough collections for the figure to mean something.
      expect(scavenges).toBeGreaterThan(50);
      expect(perStatement).toBeLessThan(100);
    },
    180_000,
  );
});
