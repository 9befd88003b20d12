/**
 * `npm run bench:cost` (scripts/bench-cost.ts) still measures what it says, run as it runs but tiny:
 * one round of 1 s rows at a low rate, a few executes, embedded PGlite (and on PostgreSQL, when the
 * tests run there, its statement rows with one caller). Nothing here compares
 * a time or a figure with a bar (the machine is shared): only that every row has its numbers,
 * every response was 200, every execute has its record, the memory rows are read, and the
 * temporary data directory is gone afterwards. The service is the tests' build of src/
 * (test/support/global-setup.js) rather than dist/, which the test does not build.
 */
import { spawn } from 'node:child_process';
import { mkdir, mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { backend, createTestDatabase } from './support/database.js';

const root = fileURLToPath(new URL('..', import.meta.url));
const COLUMNS = ['bare', 'bare POST', 'evaluate', 'execute', 'operator read'];
let scratch: string;

beforeAll(async () => {
  await mkdir(path.join(root, '.scratch'), { recursive: true });
  scratch = await mkdtemp(path.join(root, '.scratch', 'bench-cost-'));
});

afterAll(async () => {
  await rm(scratch, { recursive: true, force: true });
});

function bench(env: Record<string, string>) {
  const childEnv: NodeJS.ProcessEnv = {
    ...process.env,
    // Its temporary DATA_DIR goes here, where the test can see that it is removed.
    TMPDIR: scratch,
    BENCH_COST_SERVICE: path.join(process.env.AGW_TEST_SERVICE_BUILD!, 'main.js'),
  };
  // Embedded unless the test gives a database; jest's --experimental-vm-modules is not for the child.
  delete childEnv.DATABASE_URL;
  delete childEnv.NODE_OPTIONS;
  Object.assign(childEnv, env);
  const child = spawn(process.execPath, ['--import', 'tsx', 'scripts/bench-cost.ts'], {
    cwd: root,
    env: childEnv,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk));
  return new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) =>
    child.on('close', (code) => resolve({ code, stdout, stderr })),
  );
}

test('one tiny round prints every row with numbers, no error, every record, and the memory rows', async () => {
  const json = path.join(scratch, 'cost.json');
  const run = await bench({
    BENCH_COST_ROUNDS: '1',
    BENCH_COST_SECONDS: '1',
    BENCH_COST_RATE_SECONDS: '1',
    BENCH_COST_RATES: '50',
    BENCH_COST_CONNECTIONS: '4',
    BENCH_COST_EXECUTES: '100',
    BENCH_COST_IDLE_SECONDS: '0.5',
    BENCH_COST_JSON: json,
  });
  // Its output where it failed.
  expect(run.code === 0 ? 0 : `exit ${run.code}\n${run.stdout}\n${run.stderr}`).toBe(0);

  const rows = [
    'open loop 50/s p50 / p99 ms',
    'open loop 50/s p99 ms, each round',
    'closed loop 4: rps',
    'closed loop 4: ratio to bare',
    'service CPU µs/req, closed loop',
    'service CPU µs/req, 50/s',
  ];
  const result = JSON.parse(await readFile(json, 'utf8'));
  expect(result.backend).toBe('pglite');
  const toBarePost = 'closed loop 4: ratio to bare POST';
  expect(Object.keys(result.table)).toEqual([
    ...rows.slice(0, 4),
    toBarePost,
    ...rows.slice(4),
    'errors (not 200), all rows',
  ]);
  for (const row of rows) {
    for (const column of COLUMNS) {
      const cell = String(result.table[row][column]);
      // A figure (two for p50 / p99; one a round, and this run has one), never an empty cell or NaN.
      expect({ row, column, cell }).toEqual({
        row,
        column,
        cell: expect.stringMatching(/^\d+(\.\d+)?( \/ \d+(\.\d+)?)?$/),
      });
    }
  }
  expect(result.table['errors (not 200), all rows']).toEqual({
    bare: 0,
    'bare POST': 0,
    evaluate: 0,
    execute: 0,
    'operator read': 0,
  });
  expect(result.table['closed loop 4: ratio to bare'].bare).toBe('1.000');
  // The gateway's calls, POSTs, are also measured against bare answering the same POST; the
  // operator's read, a GET, only against bare.
  expect(result.table[toBarePost]).toEqual({
    bare: '',
    'bare POST': '1.000',
    evaluate: expect.stringMatching(/^\d+\.\d{3}$/),
    execute: expect.stringMatching(/^\d+\.\d{3}$/),
    'operator read': '',
  });

  // The first start's peak, idle, and after the executes: all read, in megabytes.
  expect(Object.keys(result.memory)).toEqual([
    'first start (initdb + migrations), peak',
    'idle after start',
    'after 100 executes',
  ]);
  for (const { MB } of Object.values<{ MB: number }>(result.memory)) expect(MB).toBeGreaterThan(10);

  // Every execute answered 200 has its record (the setup's, the 100, the rows'), and no more were
  // written than were sent (a closed loop stops with a few in flight, which the service may finish).
  expect(result.executed).toBeGreaterThan(100);
  expect(result.records).toBeGreaterThanOrEqual(result.executed);
  expect(result.records).toBeLessThanOrEqual(result.executed + result.unanswered);
  // At most one in flight a connection, in the closed loop of executes and the row.
  expect(result.unanswered).toBeLessThanOrEqual(2 * 4);
  // The goals are printed with what was measured (met or not is the machine's business).
  expect(Object.keys(result.goals)).toEqual(
    expect.arrayContaining([
      'service CPU per evaluate',
      'execute, closed loop, to bare',
      'execute, closed loop, to bare POST',
      'evaluate, closed loop, to bare POST',
      'memory, idle after start',
    ]),
  );

  // The same, as printed: the tables and the records line.
  for (const row of rows) expect(run.stdout).toContain(row);
  expect(run.stdout).toContain("issue 44's goals (not enforced):");
  expect(run.stdout).toContain('every execute has its record');
  // No DATA_DIR left behind.
  expect((await readdir(scratch)).filter((entry) => entry.startsWith('agw-bench-cost-'))).toEqual([]);
}, 120_000);

(backend === 'postgresql' ? test : test.skip)(
  'on PostgreSQL: the statements per request and the floor they set, from one caller at a time',
  async () => {
    const database = await createTestDatabase({ migrate: false });
    try {
      const json = path.join(scratch, 'cost-postgresql.json');
      const run = await bench({
        DATABASE_URL: database.url!,
        BENCH_COST_ROUNDS: '1',
        // The idle rate subtracted from each row's transactions is off by a few now and then (the
        // service's periodic jobs): over 1 s of one caller that was 0.57 a read once in CI, over 3 s
        // it is a third of that.
        BENCH_COST_SECONDS: '3',
        BENCH_COST_RATE_SECONDS: '1',
        BENCH_COST_RATES: '50',
        // One caller: nothing batches the statements of concurrent requests, so each request's count is its own.
        BENCH_COST_CONNECTIONS: '1',
        BENCH_COST_EXECUTES: '0',
        BENCH_COST_IDLE_SECONDS: '0.5',
        BENCH_COST_JSON: json,
      });
      expect(run.code === 0 ? 0 : `exit ${run.code}\n${run.stdout}\n${run.stderr}`).toBe(0);
      const result = JSON.parse(await readFile(json, 'utf8'));
      expect(result.backend).toBe('postgresql');
      const perRequest = result.table['PostgreSQL transactions per request'];
      // An evaluate reads its counters in one statement; an operator read checks the token and counts
      // the request in one, its answer to a repeated read kept (decision 0084), so it reads the org
      // only the first time. Counted from pg_stat_database less the idle
      // rate, which CI's neighbours make noisy (1.8 once for 2), so the bounds sit halfway to the next
      // whole count: one statement more or fewer fails, and a broken count is 0 or wild.
      expect(Number(perRequest.evaluate)).toBeGreaterThan(0.5);
      expect(Number(perRequest.evaluate)).toBeLessThan(1.5);
      expect(Number(perRequest['operator read'])).toBeGreaterThan(0.5);
      expect(Number(perRequest['operator read'])).toBeLessThan(1.5);
      // A round trip costs CPU on both sides, and the floors are built from it.
      expect(result.statement.client).toBeGreaterThan(0);
      expect(result.statement.postgres).toBeGreaterThan(0);
      const serviceFloor = result.table['floor: service CPU µs/req'];
      const postgresFloor = result.table['floor: PostgreSQL CPU µs/req'];
      // Each from its own bare (the gateway's calls from bare's POST, the read from bare's GET) plus
      // a round trip's CPU per statement; within the rounding of the table's figures.
      const plusStatements = (column: string, bare: string) => ({
        column,
        service:
          Math.abs(serviceFloor[column] - serviceFloor[bare] - Number(perRequest[column]) * result.statement.client) <
          3,
        postgres: Math.abs(postgresFloor[column] - Number(perRequest[column]) * result.statement.postgres) < 3,
      });
      for (const [column, bare] of [
        ['evaluate', 'bare POST'],
        ['operator read', 'bare'],
      ])
        expect(plusStatements(column, bare)).toEqual({ column, service: true, postgres: true });
      expect(serviceFloor.evaluate).toBeGreaterThan(serviceFloor['bare POST']);
      expect(serviceFloor['operator read']).toBeGreaterThan(serviceFloor.bare);
      expect(result.goals['PostgreSQL CPU per operator read'].floor).toMatch(/^\d+ µs$/);
    } finally {
      await database.close();
    }
  },
  240_000,
);

test('BENCH_COST_COMPARE: two builds at once, each row in alternating slices, each side its CPU per request and their ratio', async () => {
  const json = path.join(scratch, 'compare.json');
  const run = await bench({
    // The tests' build against itself: what matters here is that both run and both are measured.
    BENCH_COST_COMPARE: path.join(process.env.AGW_TEST_SERVICE_BUILD!, 'main.js'),
    BENCH_COST_COMPARE_SLICES: '2',
    BENCH_COST_COMPARE_SLICE_SECONDS: '0.5',
    BENCH_COST_CONNECTIONS: '4',
    BENCH_COST_JSON: json,
  });
  expect(run.code === 0 ? 0 : `exit ${run.code}\n${run.stdout}\n${run.stderr}`).toBe(0);
  const result = JSON.parse(await readFile(json, 'utf8'));
  expect(result.backend).toBe('pglite');
  expect(Object.keys(result.compare)).toEqual(['evaluate', 'execute', 'operator read']);
  for (const [row, cells] of Object.entries<Record<string, string | number>>(result.compare)) {
    const mine = Number(cells['this build: service CPU µs/req']);
    const theirs = Number(cells['compared build: service CPU µs/req']);
    expect({ row, mine: mine > 0, theirs: theirs > 0 }).toEqual({ row, mine: true, theirs: true });
    // The ratio is of the two sides' figures (each rounded to a microsecond in the table).
    expect(Math.abs(Number(cells['compared / this']) - theirs / mine)).toBeLessThan(0.02 + 2 / mine);
    // Both sides were loaded: requests answered by each.
    const [a, b] = String(cells.requests).split(' / ').map(Number);
    expect({ row, a: a > 0, b: b > 0 }).toEqual({ row, a: true, b: true });
  }
  expect(run.stdout).toContain('side by side, pglite, 2 slices of 0.5 s each per row, 4 connections');
  expect((await readdir(scratch)).filter((entry) => entry.startsWith('agw-bench-cost-'))).toEqual([]);
}, 180_000);

test('BENCH_COST_COMPARE_ROWS: only the rows named are compared; a name of no row is refused', async () => {
  const json = path.join(scratch, 'compare-rows.json');
  const compared = path.join(process.env.AGW_TEST_SERVICE_BUILD!, 'main.js');
  const run = await bench({
    BENCH_COST_COMPARE: compared,
    BENCH_COST_COMPARE_ROWS: 'execute',
    BENCH_COST_COMPARE_SLICES: '1',
    BENCH_COST_COMPARE_SLICE_SECONDS: '0.5',
    BENCH_COST_CONNECTIONS: '4',
    BENCH_COST_JSON: json,
  });
  expect(run.code === 0 ? 0 : `exit ${run.code}\n${run.stdout}\n${run.stderr}`).toBe(0);
  expect(Object.keys(JSON.parse(await readFile(json, 'utf8')).compare)).toEqual(['execute']);
  const refused = await bench({ BENCH_COST_COMPARE: compared, BENCH_COST_COMPARE_ROWS: 'execute,read' });
  expect(refused.code).not.toBe(0);
  expect(refused.stderr).toContain('BENCH_COST_COMPARE_ROWS: read is not one of evaluate, execute, operator read');
}, 180_000);

test('BENCH_COST=0 skips it (npm run bench without the cost rows)', async () => {
  const run = await bench({ BENCH_COST: '0' });
  expect(run).toEqual({ code: 0, stdout: expect.stringContaining('BENCH_COST=0'), stderr: '' });
});
