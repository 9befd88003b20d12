import { createHmac } from 'node:crypto';
import http from 'node:http';
import https from 'node:https';
import { AddressRefusedError, checkLiteralHost, guardedLookup } from './address-policy.js';

/** What a tool execution returns into the gateway decision's `result`. */
export type ToolResult =
  | { success: true; data: Record<string, unknown> }
  | { success: false; data: Record<string, unknown>; error: { code: string; message: string } };

export interface HttpToolConfig {
  url: string;
  timeout_ms: number;
  headers: Record<string, string>;
  allow_private_network: boolean;
}

export interface ToolCall {
  svc_id: string;
  agent_id: string;
  action: { type: string; tool: string; params: Record<string, unknown> };
  interaction_id: string;
}

export const MAX_RESPONSE_BYTES = 1024 * 1024;

const failure = (code: string, message: string): ToolResult => ({ success: false, data: {}, error: { code, message } });

export function runMock(config: { response?: unknown }, call: ToolCall): ToolResult {
  const data = config.response === undefined ? call.action.params : config.response;
  return { success: true, data: typeof data === 'object' && data !== null && !Array.isArray(data) ? (data as Record<string, unknown>) : { value: data } };
}

/** `X-Signature: sha256=<hex>` over `<timestamp>.<body>`, so receivers can reject replays. */
export function signBody(secret: string, timestamp: string, body: string): string {
  return `sha256=${createHmac('sha256', secret).update(`${timestamp}.${body}`).digest('hex')}`;
}

/**
 * POSTs the call as JSON. Follows no redirect, gives up after `timeout_ms`, reads at most 1 MiB,
 * and connects only to addresses the address policy allows. Never throws: failures are results.
 */
export function runHttp(config: HttpToolConfig, secret: string | null, call: ToolCall): Promise<ToolResult> {
  let url: URL;
  try {
    url = new URL(config.url);
    checkLiteralHost(url.hostname, config.allow_private_network);
  } catch (error) {
    if (error instanceof AddressRefusedError) return Promise.resolve(failure(error.code, error.message));
    return Promise.resolve(failure('TOOL_CONFIG_INVALID', 'The tool URL is invalid'));
  }
  const body = JSON.stringify(call);
  const timestamp = String(Math.floor(Date.now() / 1000));
  const headers: Record<string, string> = {
    ...config.headers,
    'content-type': 'application/json',
    'content-length': String(Buffer.byteLength(body)),
    'user-agent': 'agent-gateway',
    'x-timestamp': timestamp,
    'x-interaction-id': call.interaction_id,
  };
  if (secret) headers['x-signature'] = signBody(secret, timestamp, body);
  const client = url.protocol === 'https:' ? https : http;

  return new Promise<ToolResult>((resolve) => {
    let settled = false;
    const finish = (result: ToolResult) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve(result);
    };
    const request = client.request(
      url,
      { method: 'POST', headers, lookup: guardedLookup(config.allow_private_network), agent: false },
      (response) => {
        const status = response.statusCode ?? 0;
        if (status >= 300 && status < 400) {
          response.destroy();
          return finish(failure('TOOL_REDIRECT_REFUSED', `The tool answered ${status}; redirects are not followed`));
        }
        const chunks: Buffer[] = [];
        let size = 0;
        response.on('data', (chunk: Buffer) => {
          size += chunk.length;
          if (size > MAX_RESPONSE_BYTES) {
            response.destroy();
            finish(failure('TOOL_RESPONSE_TOO_LARGE', `The tool response exceeds ${MAX_RESPONSE_BYTES} bytes`));
            return;
          }
          chunks.push(chunk);
        });
        response.on('error', () => finish(failure('TOOL_UNREACHABLE', 'The tool connection failed')));
        response.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          let data: unknown = {};
          if (text) {
            try {
              data = JSON.parse(text);
            } catch {
              data = { body: text };
            }
          }
          const object =
            typeof data === 'object' && data !== null && !Array.isArray(data) ? (data as Record<string, unknown>) : { value: data };
          if (status < 200 || status >= 300) {
            finish({ success: false, data: object, error: { code: 'TOOL_HTTP_ERROR', message: `The tool answered HTTP ${status}` } });
          } else {
            finish({ success: true, data: object });
          }
        });
      },
    );
    const timer = setTimeout(() => {
      request.destroy();
      finish(failure('TOOL_TIMEOUT', `The tool did not answer within ${config.timeout_ms} ms`));
    }, config.timeout_ms);
    request.on('error', (error) => {
      if (error instanceof AddressRefusedError) finish(failure(error.code, error.message));
      else finish(failure('TOOL_UNREACHABLE', 'The tool could not be reached'));
    });
    request.end(body);
  });
}
