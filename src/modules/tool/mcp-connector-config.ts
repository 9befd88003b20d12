import type { HttpToolConfig } from './connectors.js';

/**
 * What the mcp connector's files share: mcp-connector.ts, mcp-upstream-call.ts and
 * mcp-upstream-client.ts import these from here, so that their imports run one way.
 */

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
