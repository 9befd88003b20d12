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

async function take(tx: SqlConnection, bucket: string, window: Window, limit: number): Promise<number | undefined> {
  const rows = await tx.query<{ count: number }>(
    `INSERT INTO rate_counters (bucket, window_start, count) VALUES ($1, $2, 1)
     ON CONFLICT (bucket, window_start) DO UPDATE SET count = rate_counters.count + 1
     WHERE rate_counters.count < $3
     RETURNING count`,
    [bucket, window.start, limit],
  );
  return rows[0]?.count;
}

/**
 * Counts one allowed action against the day and the hour inside `tx`. When either is exhausted
 * nothing is counted: the caller rolls the transaction back.
 */
export async function takeBudget(tx: SqlConnection, orgId: string, svcId: string, limits: BudgetLimits): Promise<BudgetOutcome> {
  const hour = fixedWindow(3600);
  const day = fixedWindow(86400);
  const names = buckets(orgId, svcId);
  const state = (dayCount: number, hourCount: number): BudgetState => ({
    hour: { limit: limits.maxActionsPerHour, current: hourCount, window: hour },
    day: { limit: limits.maxActionsPerDay, current: dayCount, window: day },
  });
  const dayCount = await take(tx, names.day, day, limits.maxActionsPerDay);
  if (dayCount === undefined) return { ok: false, exceeded: 'day', state: state(limits.maxActionsPerDay, 0) };
  const hourCount = await take(tx, names.hour, hour, limits.maxActionsPerHour);
  if (hourCount === undefined) {
    return { ok: false, exceeded: 'hour', state: state(dayCount - 1, limits.maxActionsPerHour) };
  }
  return { ok: true, state: state(dayCount, hourCount) };
}
