import type { Logger } from 'pino';
import type { Plugin } from 'graphql-yoga';
import {
  ATTR_HTTP_REQUEST_METHOD,
  ATTR_HTTP_RESPONSE_STATUS_CODE,
  ATTR_HTTP_ROUTE,
  ATTR_URL_PATH,
  ATTR_URL_SCHEME,
} from '@opentelemetry/semantic-conventions';
import { SpanKind, SpanStatusCode, type Telemetry } from '../observability/telemetry.js';
import { errorResponse, wireError } from './envelope.js';
import type { RequestState } from '../api/request-state.js';
import { newRequestState, runWithRequest } from './request-state.js';
import { Request, Response } from '../api/fetch-api.js';

export interface ServerContext {
  state: RequestState;
  /** Set by node's adapter; a streamed response that fails half-way destroys the socket. */
  req?: { socket?: { remoteAddress?: string; destroy?(): void } };
  /** Tests calling `yoga.fetch` may name the client address here. */
  clientAddress?: string;
}

const bodyMethods = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

async function readLimited(request: Request, limit: number): Promise<Uint8Array | 'too_large'> {
  const chunks: Uint8Array[] = [];
  let size = 0;
  if (!request.body) return new Uint8Array();
  const reader = request.body.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > limit) {
      await reader.cancel().catch(() => undefined);
      return 'too_large';
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks);
}

/** The client's address: the first X-Forwarded-For hop behind a trusted proxy, else the socket's. */
export function clientAddressOf(headers: Pick<Headers, 'get'>, socketAddress: string | undefined, trustProxy: boolean) {
  if (trustProxy) {
    const forwarded = headers.get('x-forwarded-for')?.split(',')[0]?.trim();
    if (forwarded) return forwarded;
  }
  return socketAddress ?? 'unknown';
}

/** The route label of a request no route claimed: never its raw path, which may carry ids. */
export const UNMATCHED_ROUTE = 'unmatched';

/**
 * Per-request bookkeeping around everything else: the request id and state, the body size limit,
 * the X-RateLimit headers of the limit the request was counted against (`state.rateLimit`), 204
 * bodies, one structured log line, the request metrics and the request's server span (continuing
 * an incoming `traceparent`).
 */
export function useRequestLifecycle(options: {
  logger: Logger;
  telemetry: Telemetry;
  maxBodyBytes: number;
  trustProxy: boolean;
}): Plugin<{}, ServerContext> {
  const { logger, telemetry, maxBodyBytes, trustProxy } = options;
  return {
    instrumentation: {
      request({ request }, wrapped) {
        // The state must exist before the async scope starts so that every hook shares it.
        const state = newRequestState(request.headers, 'unknown');
        pendingStates.set(request, state);
        return inServerSpan(
          telemetry,
          state,
          request.method,
          request.url,
          () => request.headers,
          () => serve(state, wrapped),
        );
      },
    },
    async onRequest({ request, serverContext, endResponse, setRequest, url }) {
      const state = pendingStates.get(request) ?? newRequestState(request.headers, 'unknown');
      pendingStates.delete(request);
      state.clientAddress = clientAddressOf(
        request.headers,
        serverContext.req?.socket?.remoteAddress ?? serverContext.clientAddress,
        trustProxy,
      );
      serverContext.state = state;
      if (!bodyMethods.has(request.method)) return;
      const declared = Number(request.headers.get('content-length') ?? NaN);
      if (declared > maxBodyBytes) {
        endResponse(errorResponse(wireError('PAYLOAD_TOO_LARGE', `The body exceeds ${maxBodyBytes} bytes`)));
        return;
      }
      if (Number.isFinite(declared)) return;
      const body = await readLimited(request, maxBodyBytes);
      if (body === 'too_large') {
        endResponse(errorResponse(wireError('PAYLOAD_TOO_LARGE', `The body exceeds ${maxBodyBytes} bytes`)));
        return;
      }
      setRequest(
        new Request(url, {
          method: request.method,
          headers: request.headers,
          body: body.length ? (body as Uint8Array<ArrayBuffer>) : null,
        }),
      );
    },
    onResponse({ request, response, serverContext, setResponse }) {
      const state = serverContext.state;
      if (!state) return;
      let final = response;
      if (response.status === 204) {
        // SOFA serialises the field's value even for 204; a 204 must not have a body.
        final = new Response(null, { status: 204, headers: response.headers });
        final.headers.delete('content-length');
        final.headers.delete('content-type');
        setResponse(final);
      }
      for (const [name, value] of answerHeaders(state)) final.headers.set(name, value);
      observeAnswer({ logger, telemetry }, state, request.method, final.status, () => new URL(request.url).pathname);
    },
  };
}

/** Runs `work` in the request's server span (continuing an incoming `traceparent`) when tracing is on. */
export function inServerSpan<T>(
  telemetry: Telemetry,
  state: RequestState,
  method: string,
  href: string,
  headers: () => Headers,
  work: () => T,
): T {
  if (!telemetry.tracing) return work();
  const url = new URL(href);
  const attributes = {
    [ATTR_HTTP_REQUEST_METHOD]: method,
    [ATTR_URL_PATH]: url.pathname,
    [ATTR_URL_SCHEME]: url.protocol.slice(0, -1),
  };
  return telemetry.withSpan(method, { kind: SpanKind.SERVER, remoteParent: headers(), attributes }, (span) => {
    state.span = span;
    return work();
  });
}

/** What every answer carries: the X-RateLimit headers of the limit the request was counted against, and its id. */
export function answerHeaders(state: RequestState): [string, string][] {
  const headers: [string, string][] = [];
  if (state.rateLimit) {
    // Retry-After, on a 429, is its error's.
    headers.push(
      ['X-RateLimit-Limit', String(state.rateLimit.limit)],
      ['X-RateLimit-Remaining', String(state.rateLimit.remaining)],
      ['X-RateLimit-Reset', String(state.rateLimit.resetAt)],
    );
  }
  headers.push(['X-Request-Id', state.requestId]);
  return headers;
}

/** An answered request: its metrics, its span's route and status, one structured log line. */
export function observeAnswer(
  { logger, telemetry }: { logger: Logger; telemetry: Telemetry },
  state: RequestState,
  method: string,
  status: number,
  requestPath: () => string,
): void {
  const durationMs = Number(process.hrtime.bigint() - state.startedAt) / 1e6;
  const space = state.route?.indexOf(' ') ?? -1;
  const routePath = state.route && space > 0 ? state.route.slice(space + 1) : UNMATCHED_ROUTE;
  telemetry.httpRequest(method, routePath, status, durationMs / 1000);
  if (state.span) {
    // HTTP semantic conventions: `{method} {http.route}`; a server span is an error on 5xx only.
    if (state.route) state.span.updateName(state.route).setAttribute(ATTR_HTTP_ROUTE, routePath);
    state.span.setAttribute(ATTR_HTTP_RESPONSE_STATUS_CODE, status).setAttribute('agw.request_id', state.requestId);
    if (status >= 500) state.span.setStatus({ code: SpanStatusCode.ERROR });
  }
  logger.info(
    {
      request_id: state.requestId,
      method,
      route: state.route ?? requestPath(),
      status,
      duration_ms: Math.round(durationMs * 100) / 100,
      org_id: state.orgId,
    },
    'request',
  );
}

/** Runs the request in its scope; once it is answered (or failed), its org's turn ends. */
export function serve(state: RequestState, wrapped: () => void | Promise<void>): void | Promise<void> {
  const release = () => state.turn?.release();
  let result: void | Promise<void>;
  try {
    result = runWithRequest(state, wrapped);
  } catch (error) {
    release();
    throw error;
  }
  if (result && typeof result.then === 'function') return Promise.resolve(result).finally(release);
  release();
  return result;
}

// Hand-over from the instrumentation wrapper to onRequest, keyed by the request object.
const pendingStates = new WeakMap<Request, RequestState>();
