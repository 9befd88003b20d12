import { createHmac } from 'node:crypto';
import type { PrivateNetworks } from '../../lib/address-policy.js';
import { postJson, type OutboundFailureCode } from '../../lib/outbound-http.js';
import { MAX_JSON_DEPTH, nestsDeeperThan } from '../../lib/storable-input.js';
import type { ToolAuth } from './tool-auth.js';

/** Every code a failed tool call can carry, a closed set (what the connectors below return). */
export const TOOL_ERROR_CODES = [
  'TOOL_CONFIG_INVALID',
  'TOOL_ADDRESS_REFUSED',
  'TOOL_TIMEOUT',
  'TOOL_RESPONSE_TOO_LARGE',
  'TOOL_UNREACHABLE',
  'TOOL_REDIRECT_REFUSED',
  'TOOL_RESPONSE_INVALID',
  'TOOL_HTTP_ERROR',
  'TOOL_ERROR',
  'TOOL_MCP_ERROR',
  'TOOL_AUTHORIZATION_FAILED',
  'TOOL_FAILED',
] as const;
export type ToolErrorCode = (typeof TOOL_ERROR_CODES)[number];

/**
 * Whether a failed call was the upstream refusing the credentials it was sent (HTTP 401: both
 * connectors report an HTTP error status as "… answered HTTP <status>"), which a grant may answer
 * with a new token.
 */
export const refusedCredentials = (result: ToolResult): boolean =>
  !result.success && result.error.code === 'TOOL_HTTP_ERROR' && result.error.message.endsWith(' HTTP 401');

/** What a tool execution returns into the gateway decision's `result`. */
export type ToolResult =
  | { success: true; data: Record<string, unknown> }
  | { success: false; data: Record<string, unknown>; error: { code: ToolErrorCode; message: string } };

/** What an http tool stores in `config`: nothing secret (the API shows it, the audit log records it). */
export interface HttpToolConfig {
  url: string;
  timeout_ms: number;
  allow_private_network: boolean;
  /** How the upstream is authenticated, when not by the static headers alone (tool-auth.ts). */
  auth?: ToolAuth;
}

/**
 * The write-only parts of an http or mcp tool, in plaintext: the HMAC secret (http only), the
 * headers sent, and the OAuth client secret of `config.auth` (tool-auth.ts).
 */
export interface ToolCredentials {
  secret: string | null;
  headers: Record<string, string>;
  clientSecret: string | null;
}

export interface ToolCall {
  svc_id: string;
  agent_id: string;
  action: { type: string; tool: string; params: Record<string, unknown> };
  interaction_id: string;
}

export const MAX_RESPONSE_BYTES = 1024 * 1024;

const traceContextHeaders = new Set(['traceparent', 'tracestate']);
/** The configured headers; when the gateway sends its trace context, without headers of those names (any case). */
export const withoutTraceContext = (
  headers: Record<string, string>,
  traceHeaders: Record<string, string>,
): Record<string, string> =>
  Object.keys(traceHeaders).length
    ? Object.fromEntries(Object.entries(headers).filter(([name]) => !traceContextHeaders.has(name.toLowerCase())))
    : headers;

export const failure = (code: ToolErrorCode, message: string): ToolResult => ({
  success: false,
  data: {},
  error: { code, message },
});

export function runMock(config: { response?: unknown }, call: ToolCall): ToolResult {
  const data = config.response === undefined ? call.action.params : config.response;
  return {
    success: true,
    data:
      typeof data === 'object' && data !== null && !Array.isArray(data)
        ? (data as Record<string, unknown>)
        : { value: data },
  };
}

/** `X-Signature: sha256=<hex>` over `<timestamp>.<body>`, so receivers can reject replays. */
export function signBody(secret: string, timestamp: string, body: string): string {
  return `sha256=${createHmac('sha256', secret).update(`${timestamp}.${body}`).digest('hex')}`;
}

/**
 * POSTs the call as JSON through the shared outbound rules (src/lib/outbound-http.ts): no redirect
 * followed, gives up after `timeout_ms`, reads at most 1 MiB, and connects only to addresses the
 * address policy allows: the deployment's `privateNetworks` as far as the tool's
 * `allow_private_network` asks for them. `traceHeaders` (W3C trace context of the tool call's span)
 * go along. Never throws: failures are results.
 */
export async function runHttp(
  config: HttpToolConfig,
  { secret, headers: configured }: ToolCredentials,
  call: ToolCall,
  privateNetworks: PrivateNetworks,
  traceHeaders: Record<string, string> = {},
): Promise<ToolResult> {
  const body = JSON.stringify(call);
  const timestamp = String(Math.floor(Date.now() / 1000));
  const headers: Record<string, string> = {
    ...withoutTraceContext(configured, traceHeaders),
    ...traceHeaders,
    'user-agent': 'agent-gateway',
    'x-timestamp': timestamp,
    'x-interaction-id': call.interaction_id,
  };
  if (secret) headers['x-signature'] = signBody(secret, timestamp, body);
  const outcome = await postJson({
    url: config.url,
    headers,
    body,
    timeoutMs: config.timeout_ms,
    maxResponseBytes: MAX_RESPONSE_BYTES,
    oversize: 'fail',
    access: { privateNetworks, allowPrivateNetwork: config.allow_private_network },
  });
  switch (outcome.kind) {
    case 'redirect':
      return failure('TOOL_REDIRECT_REFUSED', `The tool answered ${outcome.status}; redirects are not followed`);
    case 'failure':
      return toolFailure(outcome.code, outcome.message, config);
    case 'response': {
      const text = outcome.body.toString('utf8');
      let data: unknown = {};
      if (text) {
        try {
          data = JSON.parse(text);
        } catch {
          data = { body: text };
        }
      }
      // The result is hashed into the record and returned; a hostile depth would overflow both.
      if (nestsDeeperThan(data)) {
        return failure('TOOL_RESPONSE_INVALID', `The tool response nests deeper than ${MAX_JSON_DEPTH} levels`);
      }
      const object =
        typeof data === 'object' && data !== null && !Array.isArray(data)
          ? (data as Record<string, unknown>)
          : { value: data };
      if (outcome.status < 200 || outcome.status >= 300) {
        return {
          success: false,
          data: object,
          error: { code: 'TOOL_HTTP_ERROR', message: `The tool answered HTTP ${outcome.status}` },
        };
      }
      return { success: true, data: object };
    }
  }
}

/** An outbound failure as the tool result the agent gets (http and mcp tools). */
export function toolFailure(code: OutboundFailureCode, message: string, config: HttpToolConfig): ToolResult {
  switch (code) {
    case 'INVALID_URL':
      return failure('TOOL_CONFIG_INVALID', 'The tool URL is invalid');
    case 'ADDRESS_REFUSED':
      return failure('TOOL_ADDRESS_REFUSED', message);
    case 'TIMEOUT':
      return failure('TOOL_TIMEOUT', `The tool did not answer within ${config.timeout_ms} ms`);
    case 'RESPONSE_TOO_LARGE':
      return failure('TOOL_RESPONSE_TOO_LARGE', `The tool response exceeds ${MAX_RESPONSE_BYTES} bytes`);
    case 'UNREACHABLE':
    case 'ABORTED':
      return failure('TOOL_UNREACHABLE', 'The tool could not be reached');
  }
}
