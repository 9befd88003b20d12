import type { RequestState } from '../api/request-state.js';
import { scopedSlot } from '../lib/async-scope.js';
import { randomHexId } from '../lib/ids.js';
import { runWithRequestId } from '../lib/request-id.js';

/*
 * The request state at the edge: made for each request, held in an async slot for the code that
 * serves it. Its type is src/api/request-state.ts, below the modules, which read it from their
 * context.
 */
const requestSlot = scopedSlot<RequestState>('request');

/** The request being served, for code far from the context (audit entries, error logs). */
export const currentRequest = (): RequestState | undefined => requestSlot.get();
/** Serves `work` as this request: its state for the edge, its id for the domain (src/lib/request-id.ts). */
export const runWithRequest = <T>(state: RequestState, work: () => T): T =>
  requestSlot.run(state, () => runWithRequestId(state.requestId, work));

const acceptableRequestId = /^[A-Za-z0-9._:-]{1,128}$/;

export function newRequestState(headers: Pick<Headers, 'get'>, clientAddress: string): RequestState {
  const given = headers.get('x-request-id');
  return {
    requestId: given && acceptableRequestId.test(given) ? given : randomHexId('req'),
    startedAt: process.hrtime.bigint(),
    clientAddress,
    route: undefined,
    orgId: undefined,
    auth: undefined,
  };
}
