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

/** Adds one to the bucket's current window and returns the new count. */
export async function hit(sql: SqlDriver, bucket: string, window: Window): Promise<number> {
  const [row] = await sql.query<{ count: number }>(
    `INSERT INTO rate_counters (bucket, window_start, count) VALUES ($1, $2, 1)
     ON CONFLICT (bucket, window_start) DO UPDATE SET count = rate_counters.count + 1
     RETURNING count`,
    [bucket, window.start],
  );
  return row.count;
}

/** Reads the counts of several buckets in the same window without changing them. */
export async function peek(sql: SqlDriver, buckets: string[], window: Window): Promise<Map<string, number>> {
  const rows = await sql.query<{ bucket: string; count: number }>(
    'SELECT bucket, count FROM rate_counters WHERE bucket = ANY($1) AND window_start = $2',
    [buckets, window.start],
  );
  return new Map(rows.map((r) => [r.bucket, r.count]));
}

export async function reset(sql: SqlDriver, bucket: string, window: Window): Promise<void> {
  await sql.query('DELETE FROM rate_counters WHERE bucket = $1 AND window_start = $2', [bucket, window.start]);
}

/** Drops windows that ended long ago; called periodically. */
export async function pruneCounters(sql: SqlDriver, olderThanSeconds = 86400): Promise<void> {
  await sql.query('DELETE FROM rate_counters WHERE window_start < $1', [new Date(Date.now() - olderThanSeconds * 1000)]);
}
