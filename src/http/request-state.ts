import type { Span } from '@opentelemetry/api';
import type { AuthState } from '../authz/authz.js';
import { Headers } from './fetch-api.js';
import { scopedSlot } from '../lib/async-scope.js';
import { randomHexId } from '../lib/ids.js';
import { runWithRequestId } from '../lib/request-id.js';

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
  /** Headers decided during execution (rate limits) that the response must carry. */
  responseHeaders: Headers;
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

const requestSlot = scopedSlot<RequestState>('request');

/** The request being served, for code far from the context (audit entries, error logs). */
export const currentRequest = (): RequestState | undefined => requestSlot.get();
/** Serves `work` as this request: its state for the edge, its id for the domain (src/lib/request-id.ts). */
export const runWithRequest = <T>(state: RequestState, work: () => T): T =>
  requestSlot.run(state, () => runWithRequestId(state.requestId, work));

const acceptableRequestId = /^[A-Za-z0-9._:-]{1,128}$/;

export function newRequestState(request: Request, clientAddress: string): RequestState {
  const given = request.headers.get('x-request-id');
  return {
    requestId: given && acceptableRequestId.test(given) ? given : randomHexId('req'),
    startedAt: process.hrtime.bigint(),
    clientAddress,
    route: undefined,
    orgId: undefined,
    responseHeaders: new Headers(),
    auth: undefined,
  };
}
