import { fixedWindow, type Window } from '../../lib/rate-counter.js';

/**
 * Manifest budgets: allowed actions per agent in fixed UTC hours and days, counted in the
 * database by the `take_budget` function of the migrations (called from gateway.store.ts). Its
 * increment is conditional (`WHERE count < limit` on the upsert), and concurrent upserts of one row
 * serialize on its lock, so N concurrent requests against B remaining allow exactly min(N, B),
 * whichever processes they arrive at. This file names the counters and shapes their state.
 */

export interface BudgetLimits {
  maxActionsPerHour: number;
  maxActionsPerDay: number;
}

export interface BudgetState {
  hour: { limit: number; current: number; window: Window };
  day: { limit: number; current: number; window: Window };
}

/** The counters of one agent in the current hour and day. */
export function budgetWindows(orgId: string, svcId: string, now = Date.now()) {
  return {
    hour: { bucket: `budget:hour:${orgId}:${svcId}`, window: fixedWindow(3600, now) },
    day: { bucket: `budget:day:${orgId}:${svcId}`, window: fixedWindow(86400, now) },
  };
}

export type BudgetWindows = ReturnType<typeof budgetWindows>;

export interface BudgetCounts {
  day: number;
  hour: number;
}

export function budgetState(windows: BudgetWindows, limits: BudgetLimits, counts: BudgetCounts): BudgetState {
  return {
    hour: { limit: limits.maxActionsPerHour, current: counts.hour, window: windows.hour.window },
    day: { limit: limits.maxActionsPerDay, current: counts.day, window: windows.day.window },
  };
}

export type BudgetOutcome =
  | { ok: true; state: BudgetState }
  | { ok: false; exceeded: 'day' | 'hour'; state: BudgetState };

/** What `take_budget` answered: the new counts, or NULL for the budget that was exhausted (the day first). */
export function budgetOutcome(
  windows: BudgetWindows,
  limits: BudgetLimits,
  counts: { day_count: number | null; hour_count: number | null },
): BudgetOutcome {
  if (counts.day_count === null) {
    return { ok: false, exceeded: 'day', state: budgetState(windows, limits, { day: limits.maxActionsPerDay, hour: 0 }) };
  }
  if (counts.hour_count === null) {
    return { ok: false, exceeded: 'hour', state: budgetState(windows, limits, { day: counts.day_count, hour: limits.maxActionsPerHour }) };
  }
  return { ok: true, state: budgetState(windows, limits, { day: counts.day_count, hour: counts.hour_count }) };
}

/** Seconds until the hour's window resets, at least 1 (`Retry-After`). */
export const retryAfterSeconds = (state: BudgetState, now = Date.now()): number =>
  Math.max(1, Math.ceil(state.hour.window.resetAt - now / 1000));
