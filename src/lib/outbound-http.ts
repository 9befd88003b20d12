import http from 'node:http';
import https from 'node:https';
import {
  AddressRefusedError,
  checkLiteralHost,
  guardedLookup,
  hostRefusal,
  type NetworkAccess,
  refusalMessage,
} from './address-policy.js';

/**
 * Requests on a tenant's behalf (tools, their definition reads, webhook deliveries, single sign-on,
 * client metadata documents), with the same
 * safety rules for all: only addresses the address policy allows (checked on the literal, and on
 * every resolved address the socket would connect to), no redirect followed, a deadline, and a
 * cap on how much of the answer is read. Never throws: every failure is an outcome.
 */

export const MAX_OUTBOUND_URL_LENGTH = 2048;

/**
 * What is wrong with a URL saved for outbound requests (tools, webhooks, single sign-on), or
 * undefined when it may be saved. Saving refuses what is known without DNS: IP literals the
 * address policy refuses however the URL parser normalised them (`127.1`, `2130706433`,
 * `[::ffff:7f00:1]`) and `localhost`/`*.localhost`. Names are checked again, on each address they
 * resolve to, when connecting. `refused` tells the address policy's refusal from a malformed URL.
 */
export function outboundUrlError(
  text: unknown,
  access: NetworkAccess,
): { refused: boolean; message: string } | undefined {
  let url: URL | undefined;
  try {
    url = typeof text === 'string' && text.length <= MAX_OUTBOUND_URL_LENGTH ? new URL(text) : undefined;
  } catch {
    url = undefined;
  }
  if (!url || !['http:', 'https:'].includes(url.protocol) || url.username || url.password) {
    return {
      refused: false,
      message: `must be an http(s) URL without credentials, at most ${MAX_OUTBOUND_URL_LENGTH} characters`,
    };
  }
  const refusal = hostRefusal(url.hostname, access);
  return refusal ? { refused: true, message: refusalMessage('the URL points to', refusal) } : undefined;
}

/** One request on a customer's behalf; `body`, when given, is sent as is with its length. */
export interface OutboundRequest {
  method: string;
  url: string;
  headers: Record<string, string>;
  body?: string;
  timeoutMs: number;
  maxResponseBytes: number;
  /**
   * What a longer answer means: `fail` (the caller needs the whole answer: a tool result) or
   * `truncate` (only the status matters: the rest is not read and the status stands).
   */
  oversize: 'fail' | 'truncate';
  /** Which addresses the request may connect to (src/lib/address-policy.ts). */
  access: NetworkAccess;
  /** Aborting ends the request at once (shutdown, a deadline over several requests). */
  signal?: AbortSignal;
  /**
   * Keeps connections for later requests to the same receiver (an mcp tool's upstream client);
   * without it each request has a connection of its own. Its connections were checked against the
   * address policy when they were opened.
   */
  agent?: http.Agent;
}

/** A JSON POST: the body is JSON and sent with its content type. */
export type OutboundPost = Omit<OutboundRequest, 'method' | 'body'> & { body: string };

export type OutboundFailureCode =
  | 'INVALID_URL'
  | 'ADDRESS_REFUSED'
  | 'TIMEOUT'
  | 'RESPONSE_TOO_LARGE'
  | 'UNREACHABLE'
  | 'ABORTED';

export type OutboundOutcome =
  /** Any answer that is not a redirect; `body` holds at most `maxResponseBytes`. */
  | { kind: 'response'; status: number; headers: http.IncomingHttpHeaders; body: Buffer }
  /** A 3xx: never followed. */
  | { kind: 'redirect'; status: number }
  /** `refused`: nothing of the request reached the receiver (a refused connection, or a kept-alive one it had closed). */
  | { kind: 'failure'; code: OutboundFailureCode; message: string; refused?: boolean };

/**
 * An answer as a web-standard Response, for the libraries that read what `fetch` answers (the MCP
 * SDK's client, oauth4webapi): a status without a body has none.
 */
export function responseOf(
  status: number,
  headers: Record<string, string | string[] | undefined>,
  body: Buffer,
): Response {
  const webHeaders = new Headers();
  for (const [name, value] of Object.entries(headers)) {
    for (const item of Array.isArray(value) ? value : value === undefined ? [] : [value]) webHeaders.append(name, item);
  }
  const bodyless = status === 204 || status === 205 || status === 304 || body.length === 0;
  return new Response(bodyless ? null : new Uint8Array(body), { status, headers: webHeaders });
}

export function postJson(request: OutboundPost): Promise<OutboundOutcome> {
  return sendOutbound({
    ...request,
    method: 'POST',
    headers: { ...request.headers, 'content-type': 'application/json' },
  });
}

export function sendOutbound(request: OutboundRequest): Promise<OutboundOutcome> {
  let url: URL;
  try {
    url = new URL(request.url);
    if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new TypeError('not http(s)');
    checkLiteralHost(url.hostname, request.access);
  } catch (error) {
    if (error instanceof AddressRefusedError)
      return Promise.resolve({ kind: 'failure', code: 'ADDRESS_REFUSED', message: error.message });
    return Promise.resolve({ kind: 'failure', code: 'INVALID_URL', message: 'The URL is not a valid http(s) URL' });
  }
  if (request.signal?.aborted)
    return Promise.resolve({ kind: 'failure', code: 'ABORTED', message: 'The request was aborted' });
  const client = url.protocol === 'https:' ? https : http;
  const headers =
    request.body === undefined
      ? request.headers
      : { ...request.headers, 'content-length': String(Buffer.byteLength(request.body)) };

  return new Promise<OutboundOutcome>((resolve) => {
    let settled = false;
    let answered = false;
    const finish = (outcome: OutboundOutcome) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      request.signal?.removeEventListener('abort', onAbort);
      resolve(outcome);
    };
    const outgoing = client.request(
      url,
      {
        method: request.method,
        headers,
        lookup: guardedLookup(request.access),
        agent: request.agent ?? false,
      },
      (response) => {
        answered = true;
        const status = response.statusCode ?? 0;
        if (status >= 300 && status < 400) {
          response.destroy();
          return finish({ kind: 'redirect', status });
        }
        const chunks: Buffer[] = [];
        let size = 0;
        response.on('data', (chunk: Buffer) => {
          if (size + chunk.length > request.maxResponseBytes) {
            response.destroy();
            if (request.oversize === 'fail') {
              finish({
                kind: 'failure',
                code: 'RESPONSE_TOO_LARGE',
                message: `The response exceeds ${request.maxResponseBytes} bytes`,
              });
            } else {
              chunks.push(chunk.subarray(0, request.maxResponseBytes - size));
              finish({ kind: 'response', status, headers: response.headers, body: Buffer.concat(chunks) });
            }
            return;
          }
          size += chunk.length;
          chunks.push(chunk);
        });
        response.on('error', () =>
          finish({ kind: 'failure', code: 'UNREACHABLE', message: 'The connection failed while reading the response' }),
        );
        response.on('end', () =>
          finish({ kind: 'response', status, headers: response.headers, body: Buffer.concat(chunks) }),
        );
      },
    );
    const timer = setTimeout(() => {
      outgoing.destroy();
      finish({ kind: 'failure', code: 'TIMEOUT', message: `No response within ${request.timeoutMs} ms` });
    }, request.timeoutMs);
    const onAbort = () => {
      outgoing.destroy();
      finish({ kind: 'failure', code: 'ABORTED', message: 'The request was aborted' });
    };
    request.signal?.addEventListener('abort', onAbort, { once: true });
    outgoing.on('error', (error) => {
      if (error instanceof AddressRefusedError)
        finish({ kind: 'failure', code: 'ADDRESS_REFUSED', message: error.message });
      else {
        // A kept-alive connection the receiver closed while it sat idle is reset when the next request
        // is written to it, before any answer: the receiver never read that request (Node's documented
        // keep-alive race, `request.reusedSocket`), like a refused connection.
        const code = (error as NodeJS.ErrnoException).code;
        const refused = code === 'ECONNREFUSED' || (outgoing.reusedSocket && code === 'ECONNRESET' && !answered);
        finish({ kind: 'failure', code: 'UNREACHABLE', message: 'The receiver could not be reached', refused });
      }
    });
    outgoing.end(request.body);
  });
}
