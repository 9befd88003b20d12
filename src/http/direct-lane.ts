import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from 'pino';
import { AppError } from '../errors.js';
import { logUnexpected } from '../logger.js';
import type { Telemetry } from '../observability/telemetry.js';
import type { RequestState } from '../api/request-state.js';
import { Headers } from '../api/fetch-api.js';
import { errorAnswer, toWireError, wireError, type PlainAnswer } from './envelope.js';
import { answerHeaders, clientAddressOf, inServerSpan, observeAnswer, serve } from './lifecycle.js';
import { newRequestState } from './request-state.js';
import type { DirectRoutes, ReadRoutes } from './rest-facade.js';

/**
 * Node's server answers the direct routes (the gateway's execute and evaluate, most of the
 * traffic) before yoga, with the facade's own steps (`DirectRoutes.answer`) and the lifecycle's
 * bookkeeping (request id, X-RateLimit headers, metrics, span, log line). What it leaves out is
 * what only cost: a Fetch Request and Response around each call and yoga's plugin chain, about
 * half of an evaluate's CPU (docs/decisions/0072-gateway-calls-before-yoga.md). It answers the
 * operators' reads too, a GET the facade would give SOFA, with SOFA's operation (`ReadRoutes`,
 * docs/decisions/0078-reads-before-yoga.md). Any request it does not take goes to yoga, which
 * answers it as it did: another path or method, a gateway call with a query string, an `Origin`
 * when CORS is configured (yoga writes those headers).
 */
export interface DirectLaneOptions {
  direct: DirectRoutes;
  /** The operators' reads (GET routes SOFA serves), decision 0078. */
  reads: ReadRoutes;
  logger: Logger;
  telemetry: Telemetry;
  maxBodyBytes: number;
  trustProxy: boolean;
  /** CORS is configured: a browser's request (it sends `Origin`) is yoga's. */
  cors: boolean;
}

/** Header values as Fetch reads them: a repeated header's values joined. */
const headerReader = (req: IncomingMessage) => ({
  get(name: string): string | null {
    const value = req.headers[name.toLowerCase()];
    if (value === undefined) return null;
    return Array.isArray(value) ? value.join(', ') : value;
  },
});

/** The request's headers as Fetch's Headers (what the tracer's propagator reads). */
function fetchHeaders(req: IncomingMessage): Headers {
  const headers = new Headers();
  for (const [name, value] of Object.entries(req.headers)) {
    if (value !== undefined) headers.set(name, Array.isArray(value) ? value.join(', ') : value);
  }
  return headers;
}

const tooLarge = (limit: number) => errorAnswer(wireError('PAYLOAD_TOO_LARGE', `The body exceeds ${limit} bytes`));

/** The body, or 'too_large' once past `limit` (the rest is read and dropped, so the connection stays usable). */
function readBody(req: IncomingMessage, limit: number): Promise<Buffer | 'too_large'> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size <= limit) chunks.push(chunk);
      else if (chunks.length) chunks.length = 0;
    };
    req.on('data', onData);
    req.once('end', () => resolve(size > limit ? 'too_large' : Buffer.concat(chunks, size)));
    // The client went away or broke the body off: its answer, if it still reads one, is a 400.
    const broken = () => reject(new AppError('BAD_REQUEST', 'The request body ended early'));
    req.once('error', broken);
    req.once('aborted', broken);
  });
}

/**
 * Returns the handler Node's server calls: it answers a direct route and returns true, or returns
 * false and leaves the request to the caller (yoga).
 */
export function directLane(options: DirectLaneOptions): (req: IncomingMessage, res: ServerResponse) => boolean {
  const { direct, reads, logger, telemetry, maxBodyBytes, trustProxy, cors } = options;

  async function answer(
    req: IncomingMessage,
    route: NonNullable<ReturnType<DirectRoutes['find']>>,
    state: RequestState,
  ) {
    const declared = Number(req.headers['content-length'] ?? Number.NaN);
    if (declared > maxBodyBytes) return tooLarge(maxBodyBytes);
    const body = await readBody(req, maxBodyBytes);
    if (body === 'too_large') return tooLarge(maxBodyBytes);
    const url = new URL(`http://lane${req.url}`);
    // As yoga's Request reads it (@whatwg-node's text()): UTF-8, a malformed sequence replaced.
    return direct.answer(route, { headers: headerReader(req) }, url, state, async () => body.toString('utf8'));
  }

  function write(res: ServerResponse, result: PlainAnswer, state: RequestState) {
    if (res.headersSent || res.destroyed) return;
    res.statusCode = result.status;
    for (const [name, value] of Object.entries(result.headers)) res.setHeader(name, value);
    for (const [name, value] of answerHeaders(state)) res.setHeader(name, value);
    res.setHeader('Content-Length', Buffer.byteLength(result.body));
    res.end(result.body);
  }

  /** Serves `answered` as the lane does every request: its state, span, turn, answer and log line. */
  function serveLane(
    req: IncomingMessage,
    res: ServerResponse,
    label: string,
    path: string,
    answered: (state: RequestState) => Promise<PlainAnswer>,
  ): true {
    const method = req.method!;
    const headers = headerReader(req);
    const state = newRequestState(headers, clientAddressOf(headers, req.socket.remoteAddress, trustProxy));
    state.route = label;
    const work = () =>
      serve(state, () =>
        answered(state)
          .catch((error: unknown) => {
            if (!(error instanceof AppError))
              logUnexpected(logger, error, { request_id: state.requestId }, 'unexpected error');
            return errorAnswer(toWireError(error));
          })
          .then((result) => {
            write(res, result, state);
            observeAnswer({ logger, telemetry }, state, method, result.status, () => path.split('?', 1)[0]);
          }),
      );
    const failed = (error: unknown) => {
      logUnexpected(logger, error, { request_id: state.requestId }, 'unexpected error');
      write(res, errorAnswer(wireError('INTERNAL_ERROR', 'An internal error occurred')), state);
    };
    try {
      // The span reads `traceparent` through Fetch's Headers, made only when tracing is on; its URL
      // attributes are the path's and the scheme's, so the Host header plays no part.
      const traced = inServerSpan(telemetry, state, method, `http://localhost${path}`, () => fetchHeaders(req), work);
      Promise.resolve(traced).catch(failed);
    } catch (error) {
      failed(error);
    }
    return true;
  }

  return (req, res) => {
    const path = req.url;
    if (!path?.startsWith('/') || (cors && req.headers.origin !== undefined)) return false;
    if (req.method === 'POST' && !path.includes('?')) {
      const route = direct.find(req.method, path);
      if (!route) return false;
      return serveLane(req, res, route.label, path, (state) => answer(req, route, state));
    }
    if (req.method === 'GET') {
      const url = new URL(`http://lane${path}`);
      const route = reads.find(req.method, url);
      if (!route) return false;
      return serveLane(req, res, route.label, path, (state) =>
        reads.answer(route, { headers: headerReader(req) }, url, state),
      );
    }
    return false;
  };
}
