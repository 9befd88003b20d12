import type { Deps } from '../../deps.js';
import { AppError } from '../../errors.js';
import { fixedWindow } from '../../lib/rate-counter.js';
import type { RequestState } from '../../http/request-state.js';
import type { Principal } from '../auth/authz.js';
import { countOperatorRequests } from './org.store.js';

/**
 * The per-org limit on operator traffic (docs/decisions/0013-operator-rate-limit.md: 1000 a minute unless the org says
 * otherwise), counted in the database so that every process on it shares the count. Gateway
 * routes are left to the manifest budgets instead.
 *
 * A REST call counts one request; a GraphQL operation counts as many as its cost is worth
 * (src/graphql/limits.ts), so that one document cannot do the work of hundreds of calls for the
 * price of one. Refused requests count too, as every request did before.
 */
export function createOperatorRateLimit({ db }: Deps) {
  return async function count(principal: Principal, state: RequestState, requests = 1): Promise<void> {
    const window = fixedWindow(60);
    const row = await countOperatorRequests(db.sql, principal.orgId, window.start, requests);
    const limit = row.limit ?? 0;
    const headers = state.responseHeaders;
    headers.set('X-RateLimit-Limit', String(limit));
    headers.set('X-RateLimit-Remaining', String(Math.max(0, limit - row.count)));
    headers.set('X-RateLimit-Reset', String(window.resetAt));
    if (row.count > limit) {
      const retryAfter = Math.max(1, Math.ceil(window.resetAt - Date.now() / 1000));
      headers.set('Retry-After', String(retryAfter));
      throw new AppError('POLICY_VIOLATION', `Rate limit of ${limit} requests per minute exceeded`, {
        details: { limit, period: '1m', current: row.count },
      });
    }
  };
}
