import { createHash } from 'node:crypto';
import http from 'node:http';
import https from 'node:https';
import { Client, SdkHttpError, StreamableHTTPClientTransport, type FetchLike } from '@modelcontextprotocol/client';
import type { NetworkAccess, PrivateNetworks } from '../../lib/address-policy.js';
import { responseOf, sendOutbound, type OutboundOutcome } from '../../lib/outbound-http.js';
import { failure, MAX_RESPONSE_BYTES, toolFailure, withoutTraceContext, type ToolCredentials } from './connectors.js';
import type { Closable } from './mcp-client-pool.js';
import type { McpToolConfig } from './mcp-connector-config.js';
import { currentCall, failureOfExchange, RequestFailed, type UpstreamCall } from './mcp-upstream-call.js';

/** The upstream of one mcp tool: what a client is made for, and what keys it in the pool. */
export interface McpUpstream {
  toolId: string;
  config: McpToolConfig;
  credentials: ToolCredentials;
  /** The deployment's OUTBOUND_PRIVATE_NETWORKS, which the config's `allow_private_network` may reach. */
  privateNetworks: PrivateNetworks;
}

/** What the upstream's requests may connect to: the deployment's list, as far as the tool asks for it. */
const accessOf = (upstream: McpUpstream): NetworkAccess => ({
  privateNetworks: upstream.privateNetworks,
  allowPrivateNetwork: upstream.config.allow_private_network,
});

/** A client of one upstream, connected once and shared by the calls of its tool (mcp-client-pool.ts). */
export interface UpstreamClient extends Closable {
  readonly sdk: Client;
  /** Settles once the revision is negotiated (`server/discover`, or `initialize` for the 2025 family); rejects when that failed. */
  readonly ready: Promise<void>;
  readonly state: 'connecting' | 'connected' | 'failed';
}

/** A `tools/list` is paginated; an upstream offering more than this many pages is cut off (and said to be). */
export const MAX_TOOL_LIST_PAGES = 20;
/** Ending the upstream's session is a courtesy, and so is telling it a call was given up: each gets this long. */
export const SESSION_END_TIMEOUT_MS = 1000;
/**
 * The headers the SDK's client sets that an MCP server needs (2026-07-28 adds `mcp-method` and
 * `mcp-name`, which servers check against the body); anything else it might add is not sent.
 */
const protocolHeaders = [
  'accept',
  'content-type',
  'mcp-protocol-version',
  'mcp-session-id',
  'mcp-method',
  'mcp-name',
] as const;
const CLIENT_INFO = { name: 'agent-gateway', version: '1' };
/**
 * A connection to the upstream left unused this long is closed: before the 5 s after which servers
 * commonly close idle ones (Node's default), so that a request is rarely sent on a connection the
 * server is closing (the agent also honours a shorter `Keep-Alive: timeout` the server announces).
 */
const IDLE_CONNECTION_MS = 4000;

/**
 * The pool's key: the tool, and a hash of everything that shapes its exchange (the endpoint, the
 * configured headers with their values, the address policy, the deadline), so that neither two
 * tools nor one tool before and after an update share a client or its credentials.
 */
export function upstreamKey({ toolId, config, credentials }: McpUpstream): string {
  const headers = Object.entries(credentials.headers)
    .map(([name, value]) => [name.toLowerCase(), value])
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  const shape = JSON.stringify([config.url, config.timeout_ms, config.allow_private_network, headers]);
  return `${toolId}:${createHash('sha256').update(shape).digest('base64url')}`;
}

/**
 * Opens a client of the upstream, connecting as the current call (its deadline and headers; a call
 * that finds the client still connecting waits for it). Every request follows the outbound rules:
 * the address policy, no redirect followed, at most 1 MiB per answer, the current call's deadline.
 */
export function openUpstreamClient(upstream: McpUpstream, url: URL, opening: UpstreamCall): UpstreamClient {
  const configured = configuredHeaders(upstream.credentials);
  // The client's connections, reused by its requests (a TLS handshake or a TCP one per request otherwise).
  const agent = new (url.protocol === 'https:' ? https.Agent : http.Agent)({
    keepAlive: true,
    timeout: IDLE_CONNECTION_MS,
  });
  const sdk = new Client(CLIENT_INFO, {
    capabilities: {},
    versionNegotiation: { mode: 'auto' },
    listMaxPages: MAX_TOOL_LIST_PAGES,
  });
  const transport = new StreamableHTTPClientTransport(url, {
    fetch: fetchThroughOutboundRules(accessOf(upstream), configured, agent),
  });
  // A message the SDK cannot read (a broken event in a stream, a response to no request) would
  // otherwise leave the call waiting for its deadline. A failed request is reported here too (an
  // HTTP error, or what the fetch threw), but it fails by itself, and the call may go on: to
  // `initialize` after a 2025-era server refused the `server/discover` probe, or to another
  // client when the upstream did not process it.
  sdk.onerror = (error) => {
    if (!(error instanceof SdkHttpError || error instanceof RequestFailed))
      currentCall()?.fail(failureOfExchange(error, undefined));
  };
  let state: UpstreamClient['state'] = 'connecting';
  // The first handlers of the promise: the state is known before any call waiting for it resumes.
  const ready = sdk.connect(transport, requestOptions(opening)).then(
    () => {
      state = 'connected';
    },
    (error: unknown) => {
      state = 'failed';
      throw error;
    },
  );
  ready.catch(() => undefined);
  return {
    sdk,
    ready,
    get state() {
      return state;
    },
    async close() {
      // Before closing: closing forgets what was negotiated.
      const protocolVersion = sdk.getNegotiatedProtocolVersion();
      const sessionId = transport.sessionId;
      await sdk.close().catch(() => undefined);
      if (sessionId)
        await endSession(
          url,
          accessOf(upstream),
          agent,
          { ...configured, 'user-agent': 'agent-gateway' },
          sessionId,
          protocolVersion,
        );
      agent.destroy();
    },
  };
}

/** The configured headers as sent: the protocol's are the SDK's to set, and a configured one must not stand in for them. */
const configuredHeaders = (credentials: ToolCredentials): Record<string, string> =>
  Object.fromEntries(
    Object.entries(credentials.headers)
      .map(([name, value]) => [name.toLowerCase(), value])
      .filter(([name]) => !(protocolHeaders as readonly string[]).includes(name)),
  );

/** The SDK's options for a request of the call: its own timeout is not the deadline (the call's ends it first). */
export const requestOptions = (call: UpstreamCall) => ({
  timeout: call.config.timeout_ms + SESSION_END_TIMEOUT_MS,
  signal: call.signal,
});

/**
 * The client's fetch: each request goes out as the current call's, with the configured headers,
 * the protocol's own and the call's. Only the current call's requests end when it does, except the
 * SDK's notice that the call was given up (`notifications/cancelled`), which goes out after it.
 */
function fetchThroughOutboundRules(
  access: NetworkAccess,
  configured: Record<string, string>,
  agent: http.Agent,
): FetchLike {
  return async (target, init) => {
    const method = (init?.method ?? 'GET').toUpperCase();
    // After initializing, the client opens a standalone GET stream for server-initiated messages;
    // the gateway's calls need none, and the stream would hold a connection for nothing. The SDK
    // takes 405 as "none".
    if (method === 'GET') return new Response(null, { status: 405 });
    const call = currentCall();
    if (!call) throw new Error('An MCP request outside any call');
    const body = typeof init?.body === 'string' ? init.body : undefined;
    const cancelling = call.signal.aborted && isCancellation(body);
    if (call.signal.aborted && !cancelling) throw new Error('The MCP call is over');
    const sent = new Headers(init?.headers);
    const headers: Record<string, string> = { ...withoutTraceContext(configured, call.tracing.traceHeaders) };
    for (const name of protocolHeaders) {
      const value = sent.get(name);
      if (value !== null) headers[name] = value;
    }
    Object.assign(headers, call.ownHeaders);
    const outcome = await sendOutbound({
      method,
      url: String(target),
      headers,
      body,
      // The call's deadline ends its requests (through its signal), so that the SDK cancels the
      // call upstream; a request's own timeout is only a backstop after it.
      timeoutMs: cancelling ? SESSION_END_TIMEOUT_MS : Math.max(1, call.deadline - Date.now()) + SESSION_END_TIMEOUT_MS,
      maxResponseBytes: MAX_RESPONSE_BYTES,
      oversize: 'fail',
      access,
      signal: cancelling ? undefined : call.signal,
      agent,
    });
    return answerOf(call, outcome, headers['mcp-session-id'] !== undefined);
  };
}

function isCancellation(body: string | undefined): boolean {
  try {
    return body !== undefined && (JSON.parse(body) as { method?: unknown }).method === 'notifications/cancelled';
  } catch {
    return false;
  }
}

/** The outbound rules' answer as the SDK reads it, or the call's failure. */
function answerOf(call: UpstreamCall, outcome: OutboundOutcome, sentSession: boolean): Response {
  const { config, report } = call;
  if (outcome.kind === 'failure') {
    if (outcome.refused) report.unprocessed = true;
    throw call.remember(toolFailure(outcome.code, outcome.message, config));
  }
  if (outcome.kind === 'redirect') {
    throw call.remember(
      failure('TOOL_REDIRECT_REFUSED', `The MCP server answered ${outcome.status}; redirects are not followed`),
    );
  }
  if (outcome.status < 200 || outcome.status > 599) {
    throw call.remember(failure('TOOL_RESPONSE_INVALID', `The MCP server answered HTTP ${outcome.status}`));
  }
  // A session the upstream does not know (it restarted, or ended the session) is 404, and the
  // request was not processed (the MCP specification: the client starts a new session).
  if (outcome.status === 404 && sentSession) report.unprocessed = true;
  // The SDK turns this into its own error; the status is what the result reports, unless the
  // exchange went on: a 2025-era server answers the `server/discover` probe with a 4xx.
  report.httpError =
    outcome.status >= 400 ? failure('TOOL_HTTP_ERROR', `The MCP server answered HTTP ${outcome.status}`) : undefined;
  return responseOf(outcome.status, outcome.headers, outcome.body);
}

/** Best effort (MCP asks clients to end sessions they are done with): its outcome changes nothing. */
async function endSession(
  url: URL,
  access: NetworkAccess,
  agent: http.Agent,
  headers: Record<string, string>,
  sessionId: string,
  protocolVersion: string | undefined,
) {
  await sendOutbound({
    method: 'DELETE',
    url: url.href,
    headers: {
      ...headers,
      'mcp-session-id': sessionId,
      ...(protocolVersion ? { 'mcp-protocol-version': protocolVersion } : {}),
    },
    timeoutMs: SESSION_END_TIMEOUT_MS,
    maxResponseBytes: 1024,
    oversize: 'truncate',
    access,
    agent,
  });
}
