import { Client, ProtocolError, SdkHttpError, StreamableHTTPClientTransport, type CallToolResult, type FetchLike } from '@modelcontextprotocol/client';
import { sendOutbound, type OutboundOutcome } from '../../lib/outbound-http.js';
import { MAX_JSON_DEPTH, nestsDeeperThan } from '../../lib/storable-input.js';
import {
  failure,
  MAX_RESPONSE_BYTES,
  toolFailure,
  withoutTraceContext,
  type HttpToolConfig,
  type ToolCall,
  type ToolCredentials,
  type ToolErrorCode,
  type ToolResult,
} from './connectors.js';

/** What the tool call's span gives the exchange and learns from it. */
export interface McpCallTracing {
  /** W3C trace context sent with every request of the exchange. */
  traceHeaders: Record<string, string>;
  /** Hears the protocol version the upstream agreed to. */
  negotiated?(protocolVersion: string): void;
}

/** What an mcp tool stores in `config`: an http tool's endpoint and the upstream tool's name, when not the action's. */
export interface McpToolConfig extends HttpToolConfig {
  tool: string | null;
}

/**
 * The headers the SDK's client sets that an MCP server needs (2026-07-28 adds `mcp-method` and
 * `mcp-name`, which servers check against the body); anything else it might add is not sent.
 */
const protocolHeaders = ['accept', 'content-type', 'mcp-protocol-version', 'mcp-session-id', 'mcp-method', 'mcp-name'] as const;
/** Ending the upstream's session is a courtesy: it gets this long, after the result is known. */
const SESSION_END_TIMEOUT_MS = 1000;
const MAX_ERROR_MESSAGE_LENGTH = 500;
const CLIENT_INFO = { name: 'agent-gateway', version: '1' };

/** The outbound rules' answer as the web-standard Response the SDK reads. */
function responseOf(status: number, headers: Record<string, string | string[] | undefined>, body: Buffer): Response {
  const webHeaders = new Headers();
  for (const [name, value] of Object.entries(headers)) {
    for (const item of Array.isArray(value) ? value : value === undefined ? [] : [value]) webHeaders.append(name, item);
  }
  const bodyless = status === 204 || status === 205 || status === 304 || body.length === 0;
  return new Response(bodyless ? null : new Uint8Array(body), { status, headers: webHeaders });
}

/**
 * An upstream tool's CallToolResult as the gateway's result: `{content, structuredContent?}`;
 * `isError` (the tool ran and reported a failure) is a failed result with the tool's first text.
 */
export function resultOfToolCall(result: Pick<CallToolResult, 'content' | 'structuredContent' | 'isError'>): ToolResult {
  const data: Record<string, unknown> = { content: result.content };
  if (result.structuredContent !== undefined) data.structuredContent = result.structuredContent;
  // The result is hashed into the record and returned; a hostile depth would overflow both.
  if (nestsDeeperThan(data)) return failure('TOOL_RESPONSE_INVALID', `The MCP tool's result nests deeper than ${MAX_JSON_DEPTH} levels`);
  if (!result.isError) return { success: true, data };
  const text = result.content.find((item) => item.type === 'text')?.text;
  const message = text ? text.slice(0, MAX_ERROR_MESSAGE_LENGTH) : 'The MCP tool reported an error';
  return { success: false, data, error: { code: 'TOOL_ERROR', message } };
}

/**
 * What a failed exchange means. The SDK wraps whatever our fetch threw in its own errors, so an
 * outbound failure (`remembered`, the first one the fetch saw, or the upstream's last HTTP error)
 * decides; then a JSON-RPC error the upstream answered; anything else is an answer the SDK could
 * not read as MCP.
 */
export function failureOfExchange(error: unknown, remembered: ToolResult | undefined): ToolResult {
  if (remembered) return remembered;
  // The SDK's own errors (a closed connection, its request timeout) are not ProtocolErrors and
  // cannot come first anyway: only the deadline closes the transport, and it is remembered; the
  // SDK's timeout is not shorter.
  if (error instanceof ProtocolError) return failure('TOOL_MCP_ERROR', `The MCP server answered error ${error.code}: ${error.message}`);
  const reason = error instanceof Error ? error.message : String(error);
  return failure('TOOL_RESPONSE_INVALID', `The MCP server's answer is not valid MCP: ${reason.slice(0, MAX_ERROR_MESSAGE_LENGTH)}`);
}

/** A tool as the upstream's `tools/list` describes it: what the gateway keeps and pins. */
export interface UpstreamToolDefinition {
  name: string;
  title?: string;
  description?: string;
  inputSchema: Record<string, unknown>;
  outputSchema?: Record<string, unknown>;
  annotations?: Record<string, unknown>;
}

export type UpstreamToolsResult =
  | { ok: true; tools: UpstreamToolDefinition[] }
  | { ok: false; error: { code: ToolErrorCode; message: string } };

/** A `tools/list` is paginated; an upstream offering more than this many pages is cut off (and said to be). */
export const MAX_TOOL_LIST_PAGES = 20;

/** What one exchange needs besides the upstream: its id (sent as `x-interaction-id`) and its span. */
interface ExchangeContext {
  interactionId: string;
  tracing: McpCallTracing;
}

/**
 * Calls the tool on an upstream MCP server over Streamable HTTP with the http connector's rules for
 * every request: the address policy, no redirect followed, at most 1 MiB per answer, and one
 * deadline, `timeout_ms`, for the whole exchange. The SDK's client negotiates the revision
 * (docs/decisions/0048-mcp-protocol-revisions.md): it asks `server/discover` first and speaks
 * 2026-07-28 (tools/call, nothing else) to a server that offers it, and falls back to `initialize`
 * (then tools/call) for the 2025 family, which answers the probe with an error. Only the configured
 * headers and the protocol's own are sent, never anything of the agent's. Never throws: failures
 * are results.
 */
export async function runMcp(
  config: McpToolConfig,
  credentials: ToolCredentials,
  call: ToolCall,
  tracing: McpCallTracing = { traceHeaders: {} },
): Promise<ToolResult> {
  const outcome = await exchange(config, credentials, { interactionId: call.interaction_id, tracing }, (client, options) =>
    client.callTool({ name: config.tool ?? call.action.tool, arguments: call.action.params }, options),
  );
  return outcome.ok ? resultOfToolCall(outcome.value as CallToolResult) : outcome.failure;
}

/**
 * The upstream's tool definitions (`tools/list`, every page up to MAX_TOOL_LIST_PAGES) under the
 * same rules as a call: what the gateway pins and shows to models. Never throws.
 */
export async function listUpstreamTools(
  config: McpToolConfig,
  credentials: ToolCredentials,
  context: { interactionId: string; tracing?: McpCallTracing },
): Promise<UpstreamToolsResult> {
  const outcome = await exchange(config, credentials, { interactionId: context.interactionId, tracing: context.tracing ?? { traceHeaders: {} } }, async (client, options) => {
    const tools: UpstreamToolDefinition[] = [];
    let cursor: string | undefined;
    for (let page = 0; page < MAX_TOOL_LIST_PAGES; page++) {
      const listed = await client.listTools(cursor === undefined ? {} : { cursor }, options);
      tools.push(...(listed.tools as UpstreamToolDefinition[]));
      cursor = listed.nextCursor;
      if (!cursor) return tools;
    }
    throw new TooManyPages();
  });
  if (outcome.ok) return { ok: true, tools: outcome.value };
  if (!outcome.failure.success) return { ok: false, error: outcome.failure.error };
  return { ok: false, error: { code: 'TOOL_RESPONSE_INVALID', message: 'The MCP server did not list its tools' } };
}

class TooManyPages extends Error {}

type ExchangeOutcome<T> = { ok: true; value: T } | { ok: false; failure: ToolResult };

/** One MCP exchange with the upstream: connect (negotiating the revision), `work`, close. Never throws. */
async function exchange<T>(
  config: McpToolConfig,
  credentials: ToolCredentials,
  { interactionId, tracing }: ExchangeContext,
  work: (client: Client, options: { timeout: number }) => Promise<T>,
): Promise<ExchangeOutcome<T>> {
  let url: URL;
  try {
    url = new URL(config.url);
  } catch {
    return { ok: false, failure: failure('TOOL_CONFIG_INVALID', 'The tool URL is invalid') };
  }
  // The protocol's headers are the SDK's to set: a configured one must not stand in for them.
  const configured = Object.fromEntries(
    Object.entries(withoutTraceContext(credentials.headers, tracing.traceHeaders))
      .map(([name, value]) => [name.toLowerCase(), value])
      .filter(([name]) => !(protocolHeaders as readonly string[]).includes(name)),
  );
  const ownHeaders = { ...tracing.traceHeaders, 'user-agent': 'agent-gateway', 'x-interaction-id': interactionId };
  const deadline = Date.now() + config.timeout_ms;
  /** Ends what is in flight once the exchange is decided (the deadline, or a failure). */
  const inFlight = new AbortController();
  let remembered: ToolResult | undefined;
  /** The upstream's HTTP error status, while no later answer was fine (the probe's is then forgotten). */
  let httpError: ToolResult | undefined;
  let sessionId: string | undefined;
  /** Keeps the first failure, and gives the SDK an error to carry (its text is not what is reported). */
  const remember = (result: ToolResult) => {
    remembered ??= result;
    return new Error('the MCP exchange failed');
  };

  const fetchThroughOutboundRules: FetchLike = async (target, init) => {
    const method = (init?.method ?? 'GET').toUpperCase();
    // After initializing, the client opens a standalone GET stream for server-initiated messages; a
    // single tool call needs none, and the stream would outlive it. The SDK takes 405 as "none".
    if (method === 'GET') return new Response(null, { status: 405 });
    if (inFlight.signal.aborted) throw new Error('The MCP exchange is over');
    const sent = new Headers(init?.headers);
    const headers: Record<string, string> = { ...configured };
    for (const name of protocolHeaders) {
      const value = sent.get(name);
      if (value !== null) headers[name] = value;
    }
    Object.assign(headers, ownHeaders);
    const outcome: OutboundOutcome = await sendOutbound({
      method,
      url: String(target),
      headers,
      body: typeof init?.body === 'string' ? init.body : undefined,
      timeoutMs: Math.max(1, deadline - Date.now()),
      maxResponseBytes: MAX_RESPONSE_BYTES,
      oversize: 'fail',
      allowPrivateNetwork: config.allow_private_network,
      signal: inFlight.signal,
    });
    if (outcome.kind === 'failure') throw remember(toolFailure(outcome.code, outcome.message, config));
    if (outcome.kind === 'redirect') {
      throw remember(failure('TOOL_REDIRECT_REFUSED', `The MCP server answered ${outcome.status}; redirects are not followed`));
    }
    if (outcome.status < 200 || outcome.status > 599) {
      throw remember(failure('TOOL_RESPONSE_INVALID', `The MCP server answered HTTP ${outcome.status}`));
    }
    // The SDK turns this into its own error; the status is what the result reports, unless the
    // exchange went on: a 2025-era server answers the `server/discover` probe with a 4xx.
    httpError = outcome.status >= 400 ? failure('TOOL_HTTP_ERROR', `The MCP server answered HTTP ${outcome.status}`) : undefined;
    const session = outcome.headers['mcp-session-id'];
    if (typeof session === 'string') sessionId = session;
    return responseOf(outcome.status, outcome.headers, outcome.body);
  };

  const client = new Client(CLIENT_INFO, { capabilities: {}, versionNegotiation: { mode: 'auto' } });
  const transport = new StreamableHTTPClientTransport(url, { fetch: fetchThroughOutboundRules });
  let failNow: (error: Error) => void = () => undefined;
  const ended = new Promise<never>((_, reject) => {
    failNow = reject;
  });
  const timer = setTimeout(() => failNow(remember(toolFailure('TIMEOUT', 'deadline', config))), config.timeout_ms);
  // A message the SDK cannot read (a broken event in a stream, a response to no request) would
  // otherwise leave the call waiting for the deadline. An HTTP error is reported here too, but the
  // request it answered fails by itself, and it may be a 2025-era server's answer to the
  // `server/discover` probe, after which the client goes on with `initialize`.
  client.onerror = (error) => {
    if (!(error instanceof SdkHttpError)) failNow(remember(failureOfExchange(error, undefined)));
  };
  // The SDK's own request timeout is not the deadline: ours ends the exchange first.
  const requestOptions = { timeout: config.timeout_ms + SESSION_END_TIMEOUT_MS };
  try {
    const worked = (async () => {
      await client.connect(transport, requestOptions);
      const protocolVersion = client.getNegotiatedProtocolVersion();
      if (protocolVersion) tracing.negotiated?.(protocolVersion);
      return work(client, requestOptions);
    })();
    return { ok: true, value: await Promise.race([worked, ended]) };
  } catch (error) {
    if (error instanceof TooManyPages) {
      return { ok: false, failure: failure('TOOL_RESPONSE_INVALID', `The MCP server lists more than ${MAX_TOOL_LIST_PAGES} pages of tools`) };
    }
    return { ok: false, failure: failureOfExchange(error, remembered ?? httpError) };
  } finally {
    clearTimeout(timer);
    inFlight.abort();
    // Before closing: closing forgets what was negotiated.
    const protocolVersion = client.getNegotiatedProtocolVersion();
    await client.close().catch(() => undefined);
    if (sessionId) void endSession(url, { ...configured, ...ownHeaders }, sessionId, protocolVersion, config.allow_private_network);
  }
}

/** Best effort (MCP asks clients to end sessions they are done with): its outcome changes nothing. */
function endSession(url: URL, headers: Record<string, string>, sessionId: string, protocolVersion: string | undefined, allowPrivateNetwork: boolean) {
  return sendOutbound({
    method: 'DELETE',
    url: url.href,
    headers: { ...headers, 'mcp-session-id': sessionId, ...(protocolVersion ? { 'mcp-protocol-version': protocolVersion } : {}) },
    timeoutMs: SESSION_END_TIMEOUT_MS,
    maxResponseBytes: 1024,
    oversize: 'truncate',
    allowPrivateNetwork,
  });
}
