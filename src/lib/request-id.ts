import { scopedSlot } from './async-scope.js';

/**
 * The id of the request being served, for what records it: audit entries, error logs. The edge
 * that accepts a request opens the scope (src/http/request-state.ts); the domain reads the id
 * here, like a trace context, without knowing HTTP or passing it through every service call.
 */
const requestIdSlot = scopedSlot<string>('request-id');

export const currentRequestId = (): string | undefined => requestIdSlot.get();
export const runWithRequestId = <T>(requestId: string, work: () => T): T => requestIdSlot.run(requestId, work);
