import { AppError } from '../errors.js';
import type { Env } from '../env.js';
import type { RequestState, Turn } from '../api/request-state.js';
import { FairScheduler, type Admission, type FairSchedulerOptions } from '../lib/fair-scheduler.js';
import type { RateQuota } from '../lib/rate-counter.js';
import type { ApiKeyService } from '../modules/api-key/api-key.service.js';
import type { OperatorCount, SessionService } from '../modules/auth/session.service.js';
import type { AuthState, Principal } from '../authz/authz.js';

/*
 * Admission at the HTTP edge: who the caller is (their credentials), whether the request counts
 * against the operator rate limit, and the org's turn in the process (the fair scheduler). Built by
 * the app (src/app.ts) from the services it needs; the turn it makes is parked on the request
 * state (`state.turn`), released by the request lifecycle, and handed to the services that wait
 * outside the process as their `awayWhile` (docs/decisions/0006-fair-sharing-between-orgs.md).
 */

export interface AuthenticatorDeps {
  sessions: Pick<SessionService, 'verify' | 'verifyCounted'>;
  apiKeys: Pick<ApiKeyService, 'verify'>;
  /** Counts `requests` (default one) against the org's operator rate limit; throws past it, with the quota. */
  countOperatorRequests: (principal: Principal, requests?: number) => Promise<RateQuota>;
  /** The quota of an org whose request the bearer check counted; throws past the limit, with the quota. */
  operatorQuota: (counted: OperatorCount, window: OperatorCount['window']) => RateQuota;
  /** How requests of different orgs share the process (ORG_MAX_CONCURRENCY and the rest). */
  concurrency: FairSchedulerOptions;
}

/**
 * How long after its last request an org keeps its share of the process: an agent that calls every
 * few hundred milliseconds still counts as active between its calls, so a busy org's concurrency
 * stays bounded for it instead of growing back after each one.
 */
const ORG_ACTIVE_WINDOW_MS = 1000;

/**
 * After answering an org that sends one request at a time, busy orgs wait this long for its next
 * (src/lib/fair-scheduler.ts): about what an agent on the same host takes to send it, and the
 * timer's resolution. A busy org starts in at least one of every this many windows in a row: it
 * keeps a start for every few of the steady org's, about a quarter of the process.
 */
const ORG_ANTICIPATION_MS = 1;
const ORG_ANTICIPATION_LIMIT = 3;

/** How the orgs share the process, from the environment (MAX_CONCURRENT_REQUESTS, ORG_MAX_CONCURRENCY, ORG_MAX_QUEUED). */
export const concurrencyOf = (
  env: Pick<Env, 'maxConcurrentRequests' | 'orgMaxConcurrency' | 'orgMaxQueued'>,
): FairSchedulerOptions => ({
  capacity: env.maxConcurrentRequests,
  perTenant: env.orgMaxConcurrency,
  maxQueuedPerTenant: env.orgMaxQueued,
  activeWindowMs: ORG_ACTIVE_WINDOW_MS,
  anticipationMs: ORG_ANTICIPATION_MS,
  anticipationLimit: ORG_ANTICIPATION_LIMIT,
});

const bearerPattern = /^Bearer\s+(\S+)\s*$/i;

export interface AuthenticateOptions {
  /**
   * False for a route governed by the agent's manifest budget instead (the gateway's, declared
   * `budgeted`): it is counted there, not against the operator rate limit. Default true.
   */
  operatorRateLimit?: boolean;
}

export function createAuthenticator({
  sessions,
  apiKeys,
  countOperatorRequests,
  operatorQuota,
  concurrency,
}: AuthenticatorDeps) {
  const scheduler = new FairScheduler(concurrency);

  /**
   * Counts `requests` against the org's operator rate limit and keeps where the org stands on the
   * request state (`state.rateLimit`), refused or not, for the response's X-RateLimit headers.
   */
  async function countRequests(principal: Principal, state: RequestState, requests = 1): Promise<void> {
    await keepQuota(state, () => countOperatorRequests(principal, requests));
  }

  /** Where the org stands, on the request state, whether the request was refused for it or not. */
  async function keepQuota(state: RequestState, quota: () => RateQuota | Promise<RateQuota>): Promise<void> {
    try {
      state.rateLimit = await quota();
    } catch (error) {
      if (error instanceof AppError && error.quota) state.rateLimit = error.quota;
      throw error;
    }
  }

  /** A turn of the org that can be given back while the request waits outside and taken again. */
  function turnOf(orgId: string, first: Admission & { admitted: true }): Turn {
    let current = first;
    /** The request was answered: its turn is over, even if that happened while it was away. */
    let ended = false;
    return {
      release: () => {
        ended = true;
        current.release();
      },
      async away(wait) {
        current.release();
        try {
          return await wait();
        } finally {
          // A request can be answered while away: a client that hangs up on an MCP call gets its
          // answer (499) from the SDK at once. What it still does (its record) then runs without a
          // turn; taking one back would keep it for good, since nothing would release it again.
          if (!ended) {
            const back = (await scheduler.admit(orgId, true)) as Admission & { admitted: true };
            if (ended) back.release();
            else current = back;
          }
        }
      },
    };
  }

  /**
   * Waits for the org's turn to do the request's work (src/lib/fair-scheduler.ts), once per
   * request; the turn ends with the request (`state.turn`, released by the request lifecycle).
   * An org with too many requests waiting already is refused: 429.
   */
  async function admit(orgId: string, state: RequestState): Promise<void> {
    if (state.turn) return;
    const admission = await scheduler.admit(orgId);
    if (!admission.admitted) {
      throw new AppError(
        'POLICY_VIOLATION',
        `Too many requests of this organization at once: ${admission.running} running and ${admission.queued} waiting; retry shortly`,
        {
          // What the org may have in the process at once, running and waiting; this request was one more.
          details: {
            limit: concurrency.perTenant + concurrency.maxQueuedPerTenant,
            period: 'concurrent',
            current: admission.running + admission.queued + 1,
          },
          headers: { 'Retry-After': '1' },
        },
      );
    }
    state.turn = turnOf(orgId, admission);
  }

  /**
   * The caller of the request's credentials, or the refusal of them; with `countBearer`, a bearer
   * token's check also counts the request against the operator rate limit (one statement for both).
   */
  async function principalOf(
    request: { headers: Pick<Headers, 'get'> },
    countBearer: boolean,
  ): Promise<{ principal: Principal; operatorCount?: OperatorCount } | { principal: null; error?: AppError }> {
    const authorization = request.headers.get('authorization');
    const apiKey = request.headers.get('x-api-key');
    if (!authorization && !apiKey) return { principal: null };
    try {
      if (authorization && apiKey) {
        throw new AppError('INVALID_TOKEN', 'Send either a bearer token or an API key, not both');
      }
      if (apiKey) return { principal: await apiKeys.verify(apiKey.trim()) };
      const token = bearerPattern.exec(authorization!)?.[1];
      if (!token) throw new AppError('INVALID_TOKEN', 'The Authorization header must be "Bearer <token>"');
      return countBearer ? await sessions.verifyCounted(token) : { principal: await sessions.verify(token) };
    } catch (error) {
      if (error instanceof AppError && error.code === 'INVALID_TOKEN') return { principal: null, error };
      throw error;
    }
  }

  /** Reads the request's credentials without counting it: /graphql counts once it knows the cost. */
  async function identify(request: { headers: Pick<Headers, 'get'> }, state: RequestState): Promise<AuthState> {
    const caller = await principalOf(request, false);
    if (!caller.principal) return caller;
    state.orgId = caller.principal.orgId;
    await admit(caller.principal.orgId, state);
    return { principal: caller.principal };
  }

  /** Reads the credentials and counts the request against the operator rate limit (REST), unless told not to. */
  async function authenticate(
    request: { headers: Pick<Headers, 'get'> },
    state: RequestState,
    { operatorRateLimit = true }: AuthenticateOptions = {},
  ): Promise<AuthState> {
    const caller = await principalOf(request, operatorRateLimit);
    if (!caller.principal) return caller;
    const { principal, operatorCount } = caller;
    state.orgId = principal.orgId;
    await admit(principal.orgId, state);
    if (operatorCount) await keepQuota(state, () => operatorQuota(operatorCount, operatorCount.window));
    else if (operatorRateLimit) await countRequests(principal, state);
    return { principal };
  }

  return { identify, authenticate, admit, countOperatorRequests: countRequests };
}

/**
 * Runs `wait` (a wait for something outside the process) with the request's turn given back, when
 * it has one; what the context and the direct routes hand the modules as `awayWhile`.
 */
export const awayWhile = <T>(state: RequestState, wait: () => Promise<T>): Promise<T> =>
  state.turn ? state.turn.away(wait) : wait();
