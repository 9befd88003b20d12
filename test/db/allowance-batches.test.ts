/**
 * `take_allowances_as` counts a batch of executes of one agent in one pass (decision 0079): it
 * must answer each execute exactly as `take_allowance` called once per execute, in order, would
 * have, and leave every counter where those calls would have left it (rows at zero included).
 * Random batches against random counters, limits, shadow and enforced policies, and budgets
 * compare the two on the database itself; PostgreSQL's own count of the rows a transaction wrote
 * shows that a batch writes each counter once.
 */
import type { Database } from '../../src/db/database.js';
import type { SqlConnection } from '../../src/db/sql.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';

let database: TestDatabase;
let db: Database;
const OWNER = 7;
beforeAll(async () => {
  database = await createTestDatabase();
  db = database.db;
  await db.sql.query(
    `INSERT INTO gateway_journal_owners (owner, lease_expires_at) VALUES ($1, now() + interval '1 day')`,
    [OWNER],
  );
}, 60_000);
afterAll(() => database.close(), 60_000);

/** A small deterministic generator, so that a failure can be run again. */
function generator(seed: number) {
  let state = seed >>> 0;
  const next = () => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return state / 2 ** 32;
  };
  return { int: (max: number) => Math.floor(next() * (max + 1)), chance: (p: number) => next() < p };
}

interface Scenario {
  times: number;
  limits: number[];
  enforced: boolean[];
  dayLimit: number;
  hourLimit: number;
  /** The count of each counter before the batch (policy counters, day, hour); null: no row. */
  before: (number | null)[];
}

function scenarioOf(seed: number): Scenario {
  const { int, chance } = generator(seed);
  const n = int(3);
  return {
    times: 2 + int(10),
    limits: Array.from({ length: n }, () => int(6)),
    enforced: Array.from({ length: n }, () => chance(0.7)),
    dayLimit: int(9),
    hourLimit: int(9),
    before: Array.from({ length: n + 2 }, () => (chance(0.35) ? null : int(8))),
  };
}

const START = new Date('2026-11-30T10:00:00.000Z');

/**
 * The scenario's counters under `prefix`, its rows as `before` says (written through `sql`: the
 * pool, or a transaction), and the functions' arguments after owner and times.
 */
async function prepare(scenario: Scenario, prefix: string, sql: SqlConnection = db.sql) {
  const n = scenario.limits.length;
  const buckets = Array.from({ length: n }, (_, i) => `${prefix}:policy:${i}`);
  const all = [...buckets, `${prefix}:day`, `${prefix}:hour`];
  for (const [i, count] of scenario.before.entries()) {
    if (count !== null)
      await sql.query('INSERT INTO rate_counters (bucket, window_start, count) VALUES ($1, $2, $3)', [
        all[i],
        START,
        count,
      ]);
  }
  const args = [
    buckets,
    buckets.map(() => START),
    scenario.limits,
    scenario.enforced,
    `${prefix}:day`,
    START,
    scenario.dayLimit,
    `${prefix}:hour`,
    START,
    scenario.hourLimit,
  ];
  const counts = async () => {
    const rows = await db.sql.query<{ bucket: string; count: number }>(
      'SELECT bucket, count FROM rate_counters WHERE bucket = ANY($1)',
      [all],
    );
    const byBucket = new Map(rows.map((row) => [row.bucket, row.count]));
    return all.map((bucket) => byBucket.get(bucket) ?? null);
  };
  return { args, counts };
}

type Answer = {
  limit_counts: number[] | null;
  refused_by: number;
  day_count: number | null;
  hour_count: number | null;
};
const COLUMNS = 'limit_counts, refused_by, day_count, hour_count';
const PARAMS = '$1, $2, $3, $4, $5, $6, $7, $8, $9, $10';

async function batched(scenario: Scenario, prefix: string) {
  const { args, counts } = await prepare(scenario, prefix);
  const answers = await db.sql.query<Answer & { ord: string }>(
    `SELECT a.ord::text AS ord, ${COLUMNS} FROM take_allowances_as($11, $12, ${PARAMS}) AS a ORDER BY a.ord`,
    [...args, OWNER, scenario.times],
  );
  return { answers, counts: await counts() };
}

async function oneByOne(scenario: Scenario, prefix: string) {
  const { args, counts } = await prepare(scenario, prefix);
  const answers: (Answer & { ord: string })[] = [];
  for (let k = 1; k <= scenario.times; k++) {
    const [answer] = await db.sql.query<Answer>(`SELECT ${COLUMNS} FROM take_allowance(${PARAMS})`, args);
    answers.push({ ord: String(k), ...answer });
  }
  return { answers, counts: await counts() };
}

test('a batch answers every execute and leaves every counter as take_allowance once per execute would', async () => {
  const outcomes = new Set<string>();
  for (let seed = 1; seed <= 250; seed++) {
    const scenario = scenarioOf(seed);
    const expected = await oneByOne(scenario, `seq${seed}`);
    const actual = await batched(scenario, `bat${seed}`);
    expect({ seed, ...actual }).toEqual({ seed, ...expected });
    for (const answer of expected.answers)
      outcomes.add(
        answer.refused_by > 0
          ? 'policy'
          : answer.day_count === null
            ? 'day'
            : answer.hour_count === null
              ? 'hour'
              : 'ok',
      );
  }
  // The scenarios reach every outcome, so each branch of the function was compared.
  expect([...outcomes].sort()).toEqual(['day', 'hour', 'ok', 'policy']);
}, 120_000);

test('a batch of ten allowed executes writes each counter once, not once per execute', async () => {
  // PostgreSQL's own count of the rows this transaction wrote in rate_counters.
  const written = `SELECT pg_stat_get_xact_tuples_inserted('rate_counters'::regclass)::int AS inserted,
                          pg_stat_get_xact_tuples_updated('rate_counters'::regclass)::int AS updated`;
  const writesOf = (scenario: Scenario, prefix: string) =>
    db.sql.transaction(async (tx) => {
      const { args } = await prepare(scenario, prefix, tx);
      const [before] = await tx.query<{ inserted: number; updated: number }>(written);
      const answers = await tx.query<Answer>(`SELECT ${COLUMNS} FROM take_allowances_as($11, $12, ${PARAMS})`, [
        ...args,
        OWNER,
        scenario.times,
      ]);
      const [after] = await tx.query<{ inserted: number; updated: number }>(written);
      return {
        allowed: answers.filter((a) => a.refused_by === 0 && a.hour_count !== null).length,
        inserted: after.inserted - before.inserted,
        updated: after.updated - before.updated,
      };
    });
  const ten = { times: 10, limits: [100], enforced: [true], dayLimit: 100, hourLimit: 100 };
  // Three counters (a policy's, the day's, the hour's), each already counting: one update each.
  expect(await writesOf({ ...ten, before: [1, 1, 1] }, 'writes-known')).toEqual({
    allowed: 10,
    inserted: 0,
    updated: 3,
  });
  // Counters without rows: each made once at zero, then updated once.
  expect(await writesOf({ ...ten, before: [null, null, null] }, 'writes-new')).toEqual({
    allowed: 10,
    inserted: 3,
    updated: 3,
  });
});

test('a batch of an owner without a lease counts nothing and answers nothing', async () => {
  const scenario: Scenario = { times: 3, limits: [5], enforced: [true], dayLimit: 5, hourLimit: 5, before: [1, 1, 1] };
  const { args, counts } = await prepare(scenario, 'nolease');
  const answers = await db.sql.query(`SELECT * FROM take_allowances_as($11, $12, ${PARAMS})`, [...args, OWNER + 1, 3]);
  expect(answers).toEqual([]);
  expect(await counts()).toEqual([1, 1, 1]);
});
