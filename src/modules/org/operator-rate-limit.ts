import type { Deps } from '../../deps.js';
import { AppError } from '../../errors.js';
import { keyBatcher } from '../../lib/key-batcher.js';
import { fixedWindow, OPERATOR_WINDOW_SECONDS, type RateQuota, type Window } from '../../lib/rate-counter.js';
import type { Principal } from '../../authz/authz.js';
import { countOperatorRequests } from './org.store.js';

/** Where an org's operator count stands after a request was counted, and its limit (null: the default's column was empty). */
export interface OperatorCount {
  count: number;
  limit: number | null;
}

/**
 * The org's quota once a request was counted in `window`, which the edge reports in the
 * X-RateLimit headers; past the limit, 429 POLICY_VIOLATION with Retry-After, carrying the quota.
 * For counts taken elsewhere too: the bearer check counts an operator's request in its own
 * statement (src/modules/auth/session.store.ts).
 */
export function operatorQuota(row: OperatorCount, window: Window): RateQuota {
  const limit = row.limit ?? 0;
  const quota: RateQuota = { limit, remaining: Math.max(0, limit - row.count), resetAt: window.resetAt };
  if (row.count > limit) {
    const retryAfter = Math.max(1, Math.ceil(window.resetAt - Date.now() / 1000));
    throw new AppError('POLICY_VIOLATION', `Rate limit of ${limit} requests per minute exceeded`, {
      details: { limit, period: '1m', current: row.count },
      headers: { 'Retry-After': String(retryAfter) },
      quota,
    });
  }
  return quota;
}

/**
 * The per-org limit on operator traffic (docs/decisions/0013-operator-rate-limit.md: 1000 a minute unless the org says
 * otherwise), counted in the database so that every process on it shares the count. Gateway
 * routes are left to the manifest budgets instead.
 *
 * A REST call counts one request; a GraphQL operation counts as many as its cost is worth
 * (src/api/limits.ts), so that one document cannot do the work of hundreds of calls for the
 * price of one. Refused requests count too, as every request did before.
 *
 * Each count answers where the org stands (its quota, which the edge reports in the X-RateLimit
 * headers); past the limit it throws 429 POLICY_VIOLATION with Retry-After, carrying the quota.
 */
export function createOperatorRateLimit({ db }: Deps) {
  // The requests of one org and minute that arrive while its upsert is in flight go in the next
  // one: an org's requests no longer queue on its counter row one commit at a time. Each request
  // still gets a count of its own (its place among the batch's increments), so the limit stays exact.
  const counted = keyBatcher<{ orgId: string; windowStart: Date; requests: number }, OperatorCount>(
    async (_key, batch) => {
      const { orgId, windowStart } = batch[0].item;
      const added = batch.reduce((sum, queued) => sum + queued.item.requests, 0);
      const row = await countOperatorRequests(db.sql, orgId, windowStart, added);
      let count = row.count - added;
      for (const queued of batch) {
        count += queued.item.requests;
        queued.resolve({ count, limit: row.limit });
      }
    },
  );

  return async function count(principal: Principal, requests = 1): Promise<RateQuota> {
    const window = fixedWindow(OPERATOR_WINDOW_SECONDS);
    const row = await counted(`${principal.orgId}@${window.start.getTime()}`, {
      orgId: principal.orgId,
      windowStart: window.start,
      requests,
    });
    return operatorQuota(row, window);
  };
}
