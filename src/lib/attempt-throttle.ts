import type { SqlDriver } from '../db/sql.js';
import { AppError } from '../errors.js';
import { hit, type Window } from './rate-counter.js';

export interface AttemptLimit {
  bucket: string;
  limit: number;
}

/**
 * Counts an attempt in each bucket before any of its work is done, and refuses it (429
 * POLICY_VIOLATION with Retry-After) when a bucket is past its limit. The count and the check are
 * one statement, so a burst of concurrent attempts cannot all read the same count below the limit:
 * exactly `limit` get through in a window. A refused attempt stays counted; the window is fixed,
 * so that only tells how hard the bucket is being pushed and never lengthens the wait.
 */
export async function countAttempt(
  sql: SqlDriver,
  limits: readonly AttemptLimit[],
  window: Window,
  refusal: { message: string; period: string },
): Promise<void> {
  const counts = await hit(
    sql,
    limits.map((l) => l.bucket),
    window,
  );
  for (const { bucket, limit } of limits) {
    const current = counts.get(bucket) ?? 0;
    if (current <= limit) continue;
    const retryAfter = Math.max(1, Math.ceil(window.resetAt - Date.now() / 1000));
    throw new AppError('POLICY_VIOLATION', refusal.message, {
      details: { limit, period: refusal.period, current },
      headers: { 'Retry-After': String(retryAfter) },
    });
  }
}
