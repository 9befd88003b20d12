import type { SqlDriver } from '../db/sql.js';
import { decrementCounter, deleteCounter, deleteCountersBefore, incrementCounters } from './rate-counter.store.js';

/**
 * Fixed-window counters in the database, so that every process on one database shares them.
 * One statement per hit: an upsert that returns the new count.
 */

export interface Window {
  start: Date;
  /** Unix seconds when the window ends, for `X-RateLimit-Reset` and `Retry-After`. */
  resetAt: number;
}

export type { RateQuota } from '../errors.js';

/**
 * The operator rate limit's window (docs/decisions/0013-operator-rate-limit.md): counted by the
 * org module, and by the bearer check in the statement that checks the token.
 */
export const OPERATOR_WINDOW_SECONDS = 60;

export function fixedWindow(windowSeconds: number, now = Date.now()): Window {
  const size = windowSeconds * 1000;
  const start = Math.floor(now / size) * size;
  return { start: new Date(start), resetAt: (start + size) / 1000 };
}

/**
 * Adds one to each bucket's current window and returns the new counts, in one statement: every
 * concurrent caller gets a count of its own, so a limit checked against it cannot be overrun.
 */
export const hit = (sql: SqlDriver, buckets: readonly string[], window: Window): Promise<Map<string, number>> =>
  incrementCounters(sql, buckets, window.start);

/** Takes back one hit (never below zero): an attempt that turned out to be no failure. */
export const unhit = (sql: SqlDriver, bucket: string, window: Window): Promise<void> =>
  decrementCounter(sql, bucket, window.start);

export const reset = (sql: SqlDriver, bucket: string, window: Window): Promise<void> =>
  deleteCounter(sql, bucket, window.start);

/** Drops windows that ended long ago; called periodically. */
export const pruneCounters = (sql: SqlDriver, olderThanSeconds = 86400): Promise<void> =>
  deleteCountersBefore(sql, new Date(Date.now() - olderThanSeconds * 1000));
