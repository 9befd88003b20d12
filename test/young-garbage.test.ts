/**
 * A request's objects die young. Objects that outlive two young-generation collections are copied
 * twice and then kept until a full collection: under steady load that made scavenges of 6 to 9 ms,
 * the p99 of a request (docs/decisions/0057-young-garbage.md). Each case runs in a process of
 * its own, so that nothing else of the test run is counted.
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { backend, createTestDatabase, type TestDatabase } from './support/database.js';

const onPostgres = backend === 'postgresql' ? test : test.skip;

let database: TestDatabase | undefined;
beforeAll(async () => {
  if (backend === 'postgresql') database = await createTestDatabase({ migrate: false });
}, 60_000);
afterAll(() => database?.close(), 60_000);

const support = (file: string) => fileURLToPath(new URL(`./support/${file}`, import.meta.url));

async function run(args: string[], env: NodeJS.ProcessEnv): Promise<string> {
  const { stdout } = await promisify(execFile)(process.execPath, args, {
    env: { ...process.env, NODE_OPTIONS: '', ...env },
    maxBuffer: 64 * 1024 * 1024,
    timeout: 120_000,
  });
  return stdout;
}

/**
 * Bytes that young-generation collections promoted while `statements` statements ran one after
 * another, with a 1 MB young generation so that it collects often (--trace-gc-nvp's lines); on
 * PostgreSQL through the pool, or on the embedded database when `databaseUrl` is empty.
 */
async function promotedPerStatement(
  form: 'statement' | 'transaction' | 'page',
  statements: number,
  databaseUrl = database?.url ?? '',
) {
  const stdout = await run(['--max-semi-space-size=1', '--trace-gc-nvp', support('statement-garbage.mjs')], {
    DATABASE_URL: databaseUrl,
    STATEMENT_FORM: form,
    STATEMENTS: String(statements),
  });
  const lines = stdout.split('\n');
  const counted = lines.slice(lines.indexOf('START') + 1, lines.indexOf('END'));
  const scavenges = counted.filter((line) => / gc=s /.test(line));
  const promoted = scavenges.reduce((sum, line) => sum + Number(/ promoted=(\d+)/.exec(line)![1]), 0);
  return { scavenges: scavenges.length, perStatement: promoted / statements };
}

describe("statements through the pool's clients (PostgreSQL)", () => {
  // With node-postgres' query_timeout, each statement promoted 0.5 to 1.6 KB (its objects and those
  // it reached): 1,588 bytes alone, 763 in a transaction. Now a few bytes.
  onPostgres.each(['statement', 'transaction'] as const)(
    'a %s leaves nothing for the old generation',
    async (form) => {
      const { scavenges, perStatement } = await promotedPerStatement(form, 10_000);
      // Enough collections for the figure to mean something.
      expect(scavenges).toBeGreaterThan(50);
      expect(perStatement).toBeLessThan(100);
    },
    180_000,
  );
});

describe('statements through the embedded database', () => {
  // Ordered into PGlite's thread by PGlite's Mutex, every answer outlived two collections: a page
  // of 100 rows of 1 KB promoted 108,633 bytes, all of it, so a records export filled the old
  // generation at the pace it was read (docs/decisions/0064-exports-streamed-with-backpressure.md).
  // With the lock of pglite-worker.ts, 717 bytes. Runs on PGlite whatever DATABASE_URL says.
  test('a page of 100 rows of 1 KB leaves its answer to the young generation', async () => {
    const { scavenges, perStatement } = await promotedPerStatement('page', 2000, '');
    expect(scavenges).toBeGreaterThan(50);
    expect(perStatement).toBeLessThan(10 * 1024);
  }, 180_000);
});

describe('requests through the service', () => {
  // Without allocation-site pretenuring: V8 decides it from what earlier rounds promoted, which
  // would let one round's figure move the next.
  async function promotedPerRequest(request: { method: string; path: string; body?: unknown; operator?: boolean }) {
    const stdout = await run(['--expose-gc', '--no-allocation-site-pretenuring', support('request-garbage.mjs')], {
      REQUEST: JSON.stringify(request),
    });
    const { perRequest } = JSON.parse(stdout.trim().split('\n').pop()!) as { perRequest: number[] };
    // The median round: one round may include a young collection the harness did not ask for.
    return [...perRequest].sort((a, b) => a - b)[Math.floor(perRequest.length / 2)];
  }

  // Yoga's own body-size limit piped every body through a stream transform whose objects
  // outlived two collections: 12.9 KB a request. The service's limit (useRequestLifecycle) is
  // applied instead; http.test.ts checks it on /graphql.
  test('a GraphQL POST leaves under 2 KB a request for the old generation', async () => {
    const promoted = await promotedPerRequest({ method: 'POST', path: '/graphql', body: { query: '{ __typename }' } });
    expect(promoted).toBeLessThan(2048);
  }, 120_000);

  // Pothos' scope-auth cache and the context pointed at each other through a WeakMap, which a
  // young collection keeps: 16.2 KB a read on the embedded database, 10.1 KB once the cache is
  // released when the result is complete (scope-cache.ts). The rest is not ours (0057).
  test("an operator's GraphQL read leaves under 13 KB a request for the old generation", async () => {
    const promoted = await promotedPerRequest({
      method: 'POST',
      path: '/graphql',
      body: { query: '{ organization(org_id: "ORG") { name slug } }' },
      operator: true,
    });
    expect(promoted).toBeLessThan(13 * 1024);
  }, 120_000);
});
