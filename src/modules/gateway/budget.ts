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
    return {
      ok: false,
      exceeded: 'day',
      state: budgetState(windows, limits, { day: limits.maxActionsPerDay, hour: 0 }),
    };
  }
  if (counts.hour_count === null) {
    return {
      ok: false,
      exceeded: 'hour',
      state: budgetState(windows, limits, { day: counts.day_count, hour: limits.maxActionsPerHour }),
    };
  }
  return { ok: true, state: budgetState(windows, limits, { day: counts.day_count, hour: counts.hour_count }) };
}

/**
 * A `rate_limit` policy's counter for one request: per policy and per agent, API key or org, in
 * fixed windows of `window_seconds` aligned to the Unix epoch (the window length is part of the
 * bucket, so a policy whose window changes starts new counts). Counted by `take_allowance` with
 * the budget; an enforced limit refuses, a shadow one only counts.
 */
export interface PolicyCounter {
  /** Index of the policy in the request's matches. */
  match: number;
  bucket: string;
  window: Window;
  limit: number;
  enforced: boolean;
}

export interface PolicyLimitSubject {
  orgId: string;
  svcId: string;
  /** The API key (or, for a user's evaluate, the user) the request came with. */
  callerId: string;
}

export function policyCounters(
  matches: readonly {
    policy: {
      id: string;
      mode: string;
      rateLimit: { limit: number; windowSeconds: number; per: 'agent' | 'api_key' | 'org' } | null;
    };
  }[],
  subject: PolicyLimitSubject,
  now = Date.now(),
): PolicyCounter[] {
  const counters: PolicyCounter[] = [];
  matches.forEach(({ policy }, match) => {
    const rule = policy.rateLimit;
    if (!rule) return;
    const scope =
      rule.per === 'agent' ? `agent:${subject.svcId}` : rule.per === 'api_key' ? `key:${subject.callerId}` : 'org';
    counters.push({
      match,
      bucket: `policy:${subject.orgId}:${policy.id}:${rule.windowSeconds}:${scope}`,
      window: fixedWindow(rule.windowSeconds, now),
      limit: rule.limit,
      enforced: policy.mode === 'enforce',
    });
  });
  // The lock order of take_allowance: concurrent commits take shared rows in one order.
  return counters.sort((a, b) => (a.bucket < b.bucket ? -1 : a.bucket > b.bucket ? 1 : 0));
}

/** Seconds until a window resets, at least 1 (`Retry-After`). */
export const secondsUntil = (window: Window, now = Date.now()): number =>
  Math.max(1, Math.ceil(window.resetAt - now / 1000));

/** Seconds until the hour's window resets, at least 1 (`Retry-After`). */
export const retryAfterSeconds = (state: BudgetState, now = Date.now()): number =>
  Math.max(1, Math.ceil(state.hour.window.resetAt - now / 1000));
