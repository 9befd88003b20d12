import type { Tool } from '../../generated/prisma/client.js';
import { failure, type ToolCredentials, type ToolResult } from './connectors.js';
import {
  UpstreamAuthorizationUnavailable,
  type ConnectionRequiredReason,
  type ToolConnections,
  type UpstreamAccess,
} from './tool-connections.service.js';

/**
 * What a call to a tool with an OAuth connection carries from its decision to its upstream
 * (docs/decisions/0068-upstream-connections.md): read before the decision, because a caller
 * without a usable connection is denied (`UPSTREAM_AUTHORIZATION_REQUIRED`) rather than executed.
 */
export type ConnectionAccess =
  /** The token to send, and whose connection it is (the records name both, never the token). */
  | { token: string; connectionId: string; version: number; userId: string | null }
  /** Nothing to use: where the caller's user connects, and why. */
  | { required: { connectUrl: string; reason: ConnectionRequiredReason } }
  /** A connection that could not give a token now (its server unreachable, a refresh refused oddly). */
  | { unavailable: { connectionId: string; userId: string | null; message: string } };

/** The connection a record names: the one a call used, or would have used. */
export interface UsedConnection {
  connectionId: string;
  userId: string | null;
}

type Refusal = Extract<ToolResult, { success: false }>;
export type ConnectionCredentials = { ok: true; credentials: ToolCredentials } | { ok: false; failure: Refusal };

/** Whether the tool's calls go with an OAuth connection's token (its `config.auth.type` is `oauth`). */
export function connectionScopeOf(tool: Pick<Tool, 'config'>): 'org' | 'user' | undefined {
  const auth = (tool.config as { auth?: { type?: unknown; connection?: unknown } }).auth;
  if (auth?.type !== 'oauth') return undefined;
  return auth.connection === 'user' ? 'user' : 'org';
}

/** The answer of the connections service as a call carries it: its token's owner, or why there is none. */
export async function connectionAccess(
  answer: () => Promise<UpstreamAccess>,
  userId: string | null,
): Promise<ConnectionAccess> {
  try {
    const access = await answer();
    return 'token' in access ? { ...access, userId } : access;
  } catch (error) {
    if (!(error instanceof UpstreamAuthorizationUnavailable)) throw error;
    return { unavailable: { connectionId: error.connectionId, userId, message: error.message } };
  }
}

/**
 * The caller's token for the tool's upstream (`userId`: the user behind the call, used by a
 * per-user tool), or where to connect, or why neither.
 */
export function accessForCall(
  connections: Pick<ToolConnections, 'accessTokenFor'>,
  tool: Tool,
  userId: string | null,
): Promise<ConnectionAccess> {
  const owner = connectionScopeOf(tool) === 'user' ? userId : null;
  return connectionAccess(() => connections.accessTokenFor(tool, { userId: owner }), owner);
}

/** The connection a call went with, for its record; none when no connection was found. */
export function usedConnectionOf(access: ConnectionAccess | undefined): UsedConnection | null {
  if (!access) return null;
  if ('token' in access) return { connectionId: access.connectionId, userId: access.userId };
  if (!('unavailable' in access)) return null;
  const { connectionId, userId } = access.unavailable;
  return { connectionId, userId };
}

const refusal = (message: string) => failure('TOOL_AUTHORIZATION_FAILED', message) as Refusal;

/**
 * The request's credentials with the connection's token as `Authorization`, or the failed
 * result the agent gets instead: its words name where to connect, never a token.
 */
export function withConnection(
  credentials: ToolCredentials,
  access: ConnectionAccess | undefined,
): ConnectionCredentials {
  if (!access) return { ok: false, failure: refusal('The tool needs an OAuth connection, and the call has none') };
  if ('unavailable' in access) {
    return {
      ok: false,
      failure: refusal(`The tool's OAuth connection could not give a token: ${access.unavailable.message}`),
    };
  }
  if ('required' in access) {
    const { connectUrl, reason } = access.required;
    return {
      ok: false,
      failure: refusal(
        `The tool's OAuth connection must be made again (${reason.replace(/_/g, ' ')}): connect it at ${connectUrl}`,
      ),
    };
  }
  const headers = { ...credentials.headers, Authorization: `Bearer ${access.token}` };
  return { ok: true, credentials: { ...credentials, headers } };
}
