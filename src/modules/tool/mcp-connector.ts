import { SdkError, SdkErrorCode, type CallToolResult, type Client } from '@modelcontextprotocol/client';
import { MAX_JSON_DEPTH, nestsDeeperThan } from '../../lib/storable-input.js';
import { failure, type ToolCall, type ToolErrorCode, type ToolResult } from './connectors.js';
import type { McpCallTracing } from './mcp-connector-config.js';
import { createClientPool, type ClientPool, type Lease, type PoolOptions } from './mcp-client-pool.js';
import { MAX_ERROR_MESSAGE_LENGTH, UpstreamCall } from './mcp-upstream-call.js';
import {
  MAX_TOOL_LIST_PAGES,
  openUpstreamClient,
  requestOptions,
  upstreamKey,
  type McpUpstream,
  type UpstreamClient,
} from './mcp-upstream-client.js';

export { failureOfExchange } from './mcp-upstream-call.js';
export { MAX_TOOL_LIST_PAGES, type McpUpstream } from './mcp-upstream-client.js';

/**
 * An upstream tool's CallToolResult as the gateway's result: `{content, structuredContent?}`;
 * `isError` (the tool ran and reported a failure) is a failed result with the tool's first text.
 */
export function resultOfToolCall(
  result: Pick<CallToolResult, 'content' | 'structuredContent' | 'isError'>,
): ToolResult {
  const data: Record<string, unknown> = { content: result.content };
  if (result.structuredContent !== undefined) data.structuredContent = result.structuredContent;
  // The result is hashed into the record and returned; a hostile depth would overflow both.
  if (nestsDeeperThan(data))
    return failure('TOOL_RESPONSE_INVALID', `The MCP tool's result nests deeper than ${MAX_JSON_DEPTH} levels`);
  if (!result.isError) return { success: true, data };
  const text = result.content.find((item) => item.type === 'text')?.text;
  const message = text ? text.slice(0, MAX_ERROR_MESSAGE_LENGTH) : 'The MCP tool reported an error';
  return { success: false, data, error: { code: 'TOOL_ERROR', message } };
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

/** The connected upstream clients of one app, reused across calls (docs/decisions/0049-mcp-upstream-pool.md). */
export type McpUpstreamPool = ClientPool<UpstreamClient>;

export const createMcpUpstreamPool = (options: PoolOptions): McpUpstreamPool =>
  createClientPool<UpstreamClient>(options);

/** What one exchange needs besides the upstream: its id (sent as `x-interaction-id`) and its span. */
interface ExchangeContext {
  interactionId: string;
  tracing: McpCallTracing;
  /**
   * Whether a client opened for the exchange stays in the pool. Calls keep theirs; a read of the
   * tool's definitions uses a pooled client but keeps none, so that the periodic reads of every
   * tool do not push out the clients of the tools being called.
   */
  admit: boolean;
}

/**
 * Calls the tool on an upstream MCP server over Streamable HTTP with the http connector's rules for
 * every request: the address policy, no redirect followed, at most 1 MiB per answer, and one
 * deadline, `timeout_ms`, for the whole call. The client comes from the pool, connected earlier by
 * another call of the tool or now; connecting negotiates the revision
 * (docs/decisions/0048-mcp-protocol-revisions.md): `server/discover` first, and 2026-07-28 with a
 * server that offers it, else `initialize` for the 2025 family, which answers the probe with an
 * error. Only the configured headers and the protocol's own are sent, never anything of the
 * agent's. Never throws: failures are results.
 */
export async function runMcp(
  pool: McpUpstreamPool,
  upstream: McpUpstream,
  call: ToolCall,
  tracing: McpCallTracing = { traceHeaders: {} },
): Promise<ToolResult> {
  const outcome = await exchange(
    pool,
    upstream,
    { interactionId: call.interaction_id, tracing, admit: true },
    (client, options) =>
      client.callTool({ name: upstream.config.tool ?? call.action.tool, arguments: call.action.params }, options),
  );
  return outcome.ok ? resultOfToolCall(outcome.value as CallToolResult) : outcome.failure;
}

/**
 * The upstream's tool definitions (`tools/list`, every page up to MAX_TOOL_LIST_PAGES) under the
 * same rules as a call, on the tool's pooled client when it has one (else on one of its own, closed
 * after): what the gateway pins and shows to models. Never throws.
 */
export async function listUpstreamTools(
  pool: McpUpstreamPool,
  upstream: McpUpstream,
  context: { interactionId: string; tracing?: McpCallTracing },
): Promise<UpstreamToolsResult> {
  const exchangeContext = {
    interactionId: context.interactionId,
    tracing: context.tracing ?? { traceHeaders: {} },
    admit: false,
  };
  const outcome = await exchange(pool, upstream, exchangeContext, async (client, options) => {
    try {
      // Read anew every time: the SDK's cache would answer from an earlier list for as long as the
      // upstream's `ttlMs` says, and a cached list makes the shared client check later calls'
      // results against its output schemas, which a call on a fresh client does not.
      const listed = await client.listTools(undefined, { ...options, cacheMode: 'bypass' });
      return listed.tools as UpstreamToolDefinition[];
    } catch (error) {
      // The SDK walks the pages, at most MAX_TOOL_LIST_PAGES (the client's `listMaxPages`).
      if (error instanceof SdkError && error.code === SdkErrorCode.ListPaginationExceeded) throw new TooManyPages();
      throw error;
    }
  });
  if (outcome.ok) return { ok: true, tools: outcome.value };
  if (!outcome.failure.success) return { ok: false, error: outcome.failure.error };
  return { ok: false, error: { code: 'TOOL_RESPONSE_INVALID', message: 'The MCP server did not list its tools' } };
}

class TooManyPages extends Error {}

type ExchangeOutcome<T> = { ok: true; value: T } | { ok: false; failure: ToolResult };
type Work<T> = (client: Client, options: ReturnType<typeof requestOptions>) => Promise<T>;

/**
 * One call's exchange with the upstream on a pooled client, tried again once on a fresh client
 * when the first attempt certainly was not processed. Never throws.
 */
async function exchange<T>(
  pool: McpUpstreamPool,
  upstream: McpUpstream,
  context: ExchangeContext,
  work: Work<T>,
): Promise<ExchangeOutcome<T>> {
  let url: URL;
  try {
    url = new URL(upstream.config.url);
  } catch {
    return { ok: false, failure: failure('TOOL_CONFIG_INVALID', 'The tool URL is invalid') };
  }
  const call = new UpstreamCall(upstream.config, context.interactionId, context.tracing);
  const lease = () =>
    pool.lease(upstreamKey(upstream), upstream.toolId, () => openUpstreamClient(upstream, url, call), context.admit);
  return call.run(async () => {
    const first = await attempt(lease(), call, work);
    if (!first.retry) return first.outcome;
    call.retry();
    return (await attempt(lease(), call, work)).outcome;
  });
}

/**
 * One attempt: the work on the leased client (the tool's pooled one, waiting for it to connect, or
 * a new one). A call that was decided (its deadline) is never tried again.
 */
async function attempt<T>(
  lease: Lease<UpstreamClient>,
  call: UpstreamCall,
  work: Work<T>,
): Promise<{ outcome: ExchangeOutcome<T>; retry: boolean }> {
  const { client } = lease;
  try {
    await Promise.race([client.ready, call.ended]);
    const protocolVersion = client.sdk.getNegotiatedProtocolVersion();
    if (protocolVersion) call.tracing.negotiated?.(protocolVersion);
    const value = await Promise.race([work(client.sdk, requestOptions(call)), call.ended]);
    lease.release(true);
    return { outcome: { ok: true, value }, retry: false };
  } catch (error) {
    const result =
      error instanceof TooManyPages
        ? failure('TOOL_RESPONSE_INVALID', `The MCP server lists more than ${MAX_TOOL_LIST_PAGES} pages of tools`)
        : call.failureOf(error);
    lease.release(keepsClient(client, error instanceof TooManyPages ? null : result));
    return {
      outcome: { ok: false, failure: result },
      retry: !lease.opened && !call.signal.aborted && unprocessed(client, call),
    };
  }
}

/**
 * The failures that are the call's own, after which its client serves the next call: its deadline
 * (the request is cancelled, the session stays), an error the upstream answered, an answer too
 * large. Any other failure (the connection, an HTTP error, an answer that is not MCP) drops the
 * client, so that the next call connects anew.
 */
const callsOwnFailures = new Set<ToolErrorCode>(['TOOL_TIMEOUT', 'TOOL_MCP_ERROR', 'TOOL_RESPONSE_TOO_LARGE']);

/** Whether the client stays after a failed attempt (`result` null: a failure of the work's own, not of the exchange). */
function keepsClient(client: UpstreamClient, result: ToolResult | null): boolean {
  // A call that stopped waiting for another's connecting leaves the client to that call.
  if (client.state === 'connecting') return true;
  if (client.state === 'failed') return false;
  return result === null || (!result.success && callsOwnFailures.has(result.error.code));
}

/**
 * The upstream certainly did not process the attempt's request: the client's connecting failed
 * while the call waited (the request was never sent), its session was unknown (the upstream
 * restarted or ended it: 404), or its connection was refused. Such an attempt on a client that was
 * not opened for it is tried again once on a fresh client.
 */
const unprocessed = (client: UpstreamClient, call: UpstreamCall) =>
  client.state === 'failed' || call.report.unprocessed;
