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

function clientAddressOf(request: Request, context: ServerContext, trustProxy: boolean): string {
  if (trustProxy) {
    const forwarded = request.headers.get('x-forwarded-for')?.split(',')[0]?.trim();
    if (forwarded) return forwarded;
  }
  return context.req?.socket?.remoteAddress ?? context.clientAddress ?? 'unknown';
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
        const state = newRequestState(request, 'unknown');
        pendingStates.set(request, state);
        if (!telemetry.tracing) return serve(state, wrapped);
        const url = new URL(request.url);
        return telemetry.withSpan(
          request.method,
          {
            kind: SpanKind.SERVER,
            remoteParent: request.headers,
            attributes: {
              [ATTR_HTTP_REQUEST_METHOD]: request.method,
              [ATTR_URL_PATH]: url.pathname,
              [ATTR_URL_SCHEME]: url.protocol.slice(0, -1),
            },
          },
          (span) => {
            state.span = span;
            return serve(state, wrapped);
          },
        );
      },
    },
    async onRequest({ request, serverContext, endResponse, setRequest, url }) {
      const state = pendingStates.get(request) ?? newRequestState(request, 'unknown');
      pendingStates.delete(request);
      state.clientAddress = clientAddressOf(request, serverContext, trustProxy);
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
      if (state.rateLimit) {
        // The limit the request was counted against; Retry-After, on a 429, is its error's.
        final.headers.set('X-RateLimit-Limit', String(state.rateLimit.limit));
        final.headers.set('X-RateLimit-Remaining', String(state.rateLimit.remaining));
        final.headers.set('X-RateLimit-Reset', String(state.rateLimit.resetAt));
      }
      final.headers.set('X-Request-Id', state.requestId);
      const durationMs = Number(process.hrtime.bigint() - state.startedAt) / 1e6;
      const space = state.route?.indexOf(' ') ?? -1;
      const routePath = state.route && space > 0 ? state.route.slice(space + 1) : UNMATCHED_ROUTE;
      telemetry.httpRequest(request.method, routePath, final.status, durationMs / 1000);
      if (state.span) {
        // HTTP semantic conventions: `{method} {http.route}`; a server span is an error on 5xx only.
        if (state.route) state.span.updateName(state.route).setAttribute(ATTR_HTTP_ROUTE, routePath);
        state.span
          .setAttribute(ATTR_HTTP_RESPONSE_STATUS_CODE, final.status)
          .setAttribute('agw.request_id', state.requestId);
        if (final.status >= 500) state.span.setStatus({ code: SpanStatusCode.ERROR });
      }
      logger.info(
        {
          request_id: state.requestId,
          method: request.method,
          route: state.route ?? new URL(request.url).pathname,
          status: final.status,
          duration_ms: Math.round(durationMs * 100) / 100,
          org_id: state.orgId,
        },
        'request',
      );
    },
  };
}

/** Runs the request in its scope; once it is answered (or failed), its org's turn ends. */
function serve(state: RequestState, wrapped: () => void | Promise<void>): void | Promise<void> {
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
