import type { SqlDriver } from '../db/sql.js';

/**
 * Fixed-window counters in the database, so that every process on one database shares them.
 * One statement per hit: an upsert that returns the new count.
 */

export interface Window {
  start: Date;
  /** Unix seconds when the window ends, for `X-RateLimit-Reset` and `Retry-After`. */
  resetAt: number;
}

export function fixedWindow(windowSeconds: number, now = Date.now()): Window {
  const size = windowSeconds * 1000;
  const start = Math.floor(now / size) * size;
  return { start: new Date(start), resetAt: (start + size) / 1000 };
}

/**
 * Adds one to each bucket's current window and returns the new counts, in one statement: every
 * concurrent caller gets a count of its own, so a limit checked against it cannot be overrun.
 * Rows are locked in bucket order, so two callers never wait on each other in a cycle.
 */
export async function hit(sql: SqlDriver, buckets: readonly string[], window: Window): Promise<Map<string, number>> {
  const rows = await sql.query<{ bucket: string; count: number }>(
    `INSERT INTO rate_counters (bucket, window_start, count)
     SELECT bucket, $2, 1 FROM unnest($1::text[]) AS bucket ORDER BY bucket
     ON CONFLICT (bucket, window_start) DO UPDATE SET count = rate_counters.count + 1
     RETURNING bucket, count`,
    [[...new Set(buckets)].sort(), window.start],
  );
  return new Map(rows.map((r) => [r.bucket, r.count]));
}

/** Takes back one hit (never below zero): an attempt that turned out to be no failure. */
export async function unhit(sql: SqlDriver, bucket: string, window: Window): Promise<void> {
  await sql.query('UPDATE rate_counters SET count = count - 1 WHERE bucket = $1 AND window_start = $2 AND count > 0', [
    bucket,
    window.start,
  ]);
}

export async function reset(sql: SqlDriver, bucket: string, window: Window): Promise<void> {
  await sql.query('DELETE FROM rate_counters WHERE bucket = $1 AND window_start = $2', [bucket, window.start]);
}

/** Drops windows that ended long ago; called periodically. */
export async function pruneCounters(sql: SqlDriver, olderThanSeconds = 86400): Promise<void> {
  await sql.query('DELETE FROM rate_counters WHERE window_start < $1', [
    new Date(Date.now() - olderThanSeconds * 1000),
  ]);
}
