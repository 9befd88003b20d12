import type { SqlConnection, SqlDriver } from '../../db/sql.js';
import { fixedWindow, type Window } from '../../lib/rate-counter.js';

/**
 * Manifest budgets: allowed actions per agent in fixed UTC hours and days, counted in the
 * database. The increment is conditional (`WHERE count < limit` on the upsert), and concurrent
 * upserts of one row serialize on its lock, so N concurrent requests against B remaining allow
 * exactly min(N, B), whichever processes they arrive at.
 */

export interface BudgetLimits {
  maxActionsPerHour: number;
  maxActionsPerDay: number;
}

export interface BudgetState {
  hour: { limit: number; current: number; window: Window };
  day: { limit: number; current: number; window: Window };
}

const buckets = (orgId: string, svcId: string) => ({
  hour: `budget:hour:${orgId}:${svcId}`,
  day: `budget:day:${orgId}:${svcId}`,
});

/** Current counts, without counting anything (evaluate, and requests already denied). */
export async function peekBudget(sql: SqlDriver, orgId: string, svcId: string, limits: BudgetLimits): Promise<BudgetState> {
  const hour = fixedWindow(3600);
  const day = fixedWindow(86400);
  const names = buckets(orgId, svcId);
  const rows = await sql.query<{ bucket: string; count: number }>(
    `SELECT bucket, count FROM rate_counters
     WHERE (bucket = $1 AND window_start = $2) OR (bucket = $3 AND window_start = $4)`,
    [names.hour, hour.start, names.day, day.start],
    'peek_budget',
  );
  const count = (bucket: string) => rows.find((r) => r.bucket === bucket)?.count ?? 0;
  return {
    hour: { limit: limits.maxActionsPerHour, current: count(names.hour), window: hour },
    day: { limit: limits.maxActionsPerDay, current: count(names.day), window: day },
  };
}

export type BudgetOutcome =
  | { ok: true; state: BudgetState }
  | { ok: false; exceeded: 'day' | 'hour'; state: BudgetState };

/**
 * Counts one allowed action against the day and the hour, in one statement (the `take_budget`
 * function of the migrations): the counter rows of an agent, which every execute updates, are
 * locked only for that statement. When either is exhausted nothing is counted. `conn` is the
 * driver itself (the statement is its own transaction) or a transaction that also uses a token
 * or an approval.
 */
export async function takeBudget(
  conn: SqlConnection,
  orgId: string,
  svcId: string,
  limits: BudgetLimits,
): Promise<BudgetOutcome> {
  const hour = fixedWindow(3600);
  const day = fixedWindow(86400);
  const names = buckets(orgId, svcId);
  const state = (dayCount: number, hourCount: number): BudgetState => ({
    hour: { limit: limits.maxActionsPerHour, current: hourCount, window: hour },
    day: { limit: limits.maxActionsPerDay, current: dayCount, window: day },
  });
  const [counts] = await conn.query<{ day_count: number | null; hour_count: number | null }>(
    'SELECT day_count, hour_count FROM take_budget($1, $2, $3, $4, $5, $6)',
    [names.day, day.start, limits.maxActionsPerDay, names.hour, hour.start, limits.maxActionsPerHour],
    'take_budget',
  );
  if (counts.day_count === null) return { ok: false, exceeded: 'day', state: state(limits.maxActionsPerDay, 0) };
  if (counts.hour_count === null) return { ok: false, exceeded: 'hour', state: state(counts.day_count, limits.maxActionsPerHour) };
  return { ok: true, state: state(counts.day_count, counts.hour_count) };
}
