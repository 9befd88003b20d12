import { AsyncLocalStorage } from 'node:async_hooks';
import { ProtocolError } from '@modelcontextprotocol/client';
import { failure, toolFailure, type ToolResult } from './connectors.js';
import type { McpCallTracing, McpToolConfig } from './mcp-connector-config.js';

export const MAX_ERROR_MESSAGE_LENGTH = 500;

/**
 * What a failed exchange means. The SDK wraps whatever our fetch threw in its own errors, so an
 * outbound failure (`remembered`, the first one the fetch saw, or the upstream's last HTTP error)
 * decides; then a JSON-RPC error the upstream answered; anything else is an answer the SDK could
 * not read as MCP.
 */
export function failureOfExchange(error: unknown, remembered: ToolResult | undefined): ToolResult {
  if (remembered) return remembered;
  // The SDK's own errors (a closed connection, its request timeout) are not ProtocolErrors and
  // cannot come first anyway: only the deadline ends a call's requests, and it is remembered; the
  // SDK's timeout is not shorter.
  if (error instanceof ProtocolError)
    return failure('TOOL_MCP_ERROR', `The MCP server answered error ${error.code}: ${error.message}`);
  const reason = error instanceof Error ? error.message : String(error);
  return failure(
    'TOOL_RESPONSE_INVALID',
    `The MCP server's answer is not valid MCP: ${reason.slice(0, MAX_ERROR_MESSAGE_LENGTH)}`,
  );
}

/** What one attempt of a call learned from its requests. */
export interface AttemptReport {
  /** The first failure seen: it decides the result (the SDK's error carries no more than that it failed). */
  remembered?: ToolResult;
  /** The upstream's HTTP error status, while no later answer was fine (a 2025-era server's answer to the probe is then forgotten). */
  httpError?: ToolResult;
  /** A request the upstream certainly did not process: its session was unknown (404) or its connection refused. */
  unprocessed: boolean;
}

/** What a call's request throws for the SDK to carry: the failure itself is remembered by the call. */
export class RequestFailed extends Error {}

const callStorage = new AsyncLocalStorage<UpstreamCall>();
/** Why a call's requests end when it is over; one object, as an abort without a reason makes (and traces) a new one each time. */
const CALL_OVER = new Error('The MCP call is over');

/** The call whose work is running: requests find their deadline, headers and signal here. */
export const currentCall = (): UpstreamCall | undefined => callStorage.getStore();

/**
 * One call's share of an upstream client that other calls may use at the same time
 * (docs/decisions/0049-mcp-upstream-pool.md): its deadline, its own headers (trace context,
 * interaction id), what ends its requests, and what they learned. The client's requests find the
 * call through AsyncLocalStorage, so neither a deadline nor a header of one call reaches another's.
 */
export class UpstreamCall {
  readonly deadline: number;
  /** Sent with each of its requests, after the configured headers. */
  readonly ownHeaders: Record<string, string>;
  /** Rejects when the call is decided before its work is done: its deadline, or an answer the SDK could not read. */
  readonly ended: Promise<never>;
  report: AttemptReport = { unprocessed: false };
  private readonly controller = new AbortController();
  private endWith: (error: Error) => void = () => undefined;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    readonly config: McpToolConfig,
    interactionId: string,
    readonly tracing: McpCallTracing,
  ) {
    this.deadline = Date.now() + config.timeout_ms;
    this.ownHeaders = { ...tracing.traceHeaders, 'user-agent': 'agent-gateway', 'x-interaction-id': interactionId };
    this.ended = new Promise<never>((_, reject) => {
      this.endWith = reject;
    });
    this.ended.catch(() => undefined);
  }

  /** Aborted when the call is decided or over: what it still has in flight ends. */
  get signal(): AbortSignal {
    return this.controller.signal;
  }

  /**
   * Runs the call's work as the current call. The deadline's timer starts in it, so that what the
   * deadline sets off (the SDK's cancellation of the request) is sent as this call's.
   */
  run<T>(work: () => Promise<T>): Promise<T> {
    return callStorage.run(this, () => {
      this.timer = setTimeout(
        () => this.fail(toolFailure('TIMEOUT', 'deadline', this.config)),
        Math.max(0, this.deadline - Date.now()),
      );
      return work().finally(() => {
        clearTimeout(this.timer);
        this.controller.abort(CALL_OVER);
      });
    });
  }

  /** Another attempt begins: what the previous one learned no longer counts. */
  retry() {
    this.report = { unprocessed: false };
  }

  /** Keeps the first failure, and gives the SDK an error to carry (its text is not what is reported). */
  remember(result: ToolResult): Error {
    this.report.remembered ??= result;
    return new RequestFailed('the MCP exchange failed');
  }

  /** Decides the call as failed now: its requests end and its work is no longer waited for. */
  fail(result: ToolResult) {
    const error = this.remember(result);
    this.controller.abort(error);
    this.endWith(error);
  }

  /** What the attempt's failure means: what its requests met, else what the SDK threw. */
  failureOf(error: unknown): ToolResult {
    return failureOfExchange(error, this.report.remembered ?? this.report.httpError);
  }
}
