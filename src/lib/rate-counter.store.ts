import type { SqlConnection } from '../db/sql.js';

/** The statements of the fixed-window counters (rate-counter.ts): one per hit, an upsert that returns the count. */

/**
 * Adds one to each bucket's window and returns the new counts, in one statement. Rows are locked
 * in bucket order, so two callers never wait on each other in a cycle.
 */
export async function incrementCounters(
  sql: SqlConnection,
  buckets: readonly string[],
  windowStart: Date,
): Promise<Map<string, number>> {
  const rows = await sql.query<{ bucket: string; count: number }>(
    `INSERT INTO rate_counters (bucket, window_start, count)
     SELECT bucket, $2, 1 FROM unnest($1::text[]) AS bucket ORDER BY bucket
     ON CONFLICT (bucket, window_start) DO UPDATE SET count = rate_counters.count + 1
     RETURNING bucket, count`,
    [[...new Set(buckets)].sort(), windowStart],
  );
  return new Map(rows.map((r) => [r.bucket, r.count]));
}

/** Takes one back, never below zero. */
export async function decrementCounter(sql: SqlConnection, bucket: string, windowStart: Date): Promise<void> {
  await sql.query('UPDATE rate_counters SET count = count - 1 WHERE bucket = $1 AND window_start = $2 AND count > 0', [
    bucket,
    windowStart,
  ]);
}

export async function deleteCounter(sql: SqlConnection, bucket: string, windowStart: Date): Promise<void> {
  await sql.query('DELETE FROM rate_counters WHERE bucket = $1 AND window_start = $2', [bucket, windowStart]);
}

export async function deleteCountersBefore(sql: SqlConnection, before: Date): Promise<void> {
  await sql.query('DELETE FROM rate_counters WHERE window_start < $1', [before]);
  // The operator rate limit's windows (decision 0074) end with the others.
  await sql.query('DELETE FROM operator_rate_counters WHERE window_start < $1', [before]);
}
