import type { Span } from '@opentelemetry/api';
import type { AuthState } from '../authz/authz.js';
import type { RateQuota } from '../lib/rate-counter.js';

/**
 * What the HTTP layer knows about one request, shared by the GraphQL context, SOFA's copied
 * context and the response hooks (they all hold this same object).
 */
export interface RequestState {
  requestId: string;
  startedAt: bigint;
  clientAddress: string;
  /** Route pattern, e.g. `POST /api/v1/orgs/:org_id/users`, for logs. */
  route: string | undefined;
  orgId: string | undefined;
  /**
   * The rate limit the request was last counted against (the operator rate limit, or the agent's
   * budget or a policy's limit on a gateway call), as data: the edge writes it as the response's
   * X-RateLimit headers (src/http/lifecycle.ts).
   */
  rateLimit?: RateQuota;
  /** The caller's credentials, resolved at most once per request (REST guard or GraphQL context). */
  auth: Promise<AuthState> | undefined;
  /** The request's server span, when tracing is on. */
  span?: Span;
  /** The org's turn to do work (src/lib/fair-scheduler.ts), once the caller is known. */
  turn?: Turn;
}

/** A request's turn to do work in the process, as the code that serves it holds it. */
export interface Turn {
  /** Ends the turn; called once the request is answered. */
  release(): void;
  /**
   * Runs `wait`, a wait for something outside the process (a tool's answer), with the turn given
   * back, so that others' work runs meanwhile; then waits for a turn again.
   */
  away<T>(wait: () => Promise<T>): Promise<T>;
}
