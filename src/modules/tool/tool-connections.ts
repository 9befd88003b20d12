import type { Tool } from '../../generated/prisma/client.js';
import type { ToolConnectionSnapshot } from '../audit/audit-events.js';
import type { ToolAuth } from './tool-auth.js';
import type { ConnectionRow } from './tool-connections.store.js';

/**
 * What the tools' OAuth connections (docs/decisions/0068-upstream-connections.md) are, as pure
 * pieces shared by the files that handle them (tool-connections.service.ts, connection-*.ts): what
 * the call path gets, why it may get nothing, and how a tool's `config.auth` and a connection's
 * audit snapshot are read. Nothing here reads or writes.
 */

/** The console's tools page: `/console/tools/<tool_id>` is where a tool is connected, and where the callback ends. */
export const CONSOLE_TOOLS_PATH = '/console/tools';

/** Why a caller must connect (again) before the tool can be called for it. */
export type ConnectionRequiredReason = 'not_connected' | 'reauthorization_required' | 'revoked';

/** What the call path gets: a token to send, or where the user connects and why. */
export type UpstreamAccess =
  /** `version`: the token's, so a 401 to it refreshes only when no one has since (`afterUnauthorized`). */
  | { token: string; connectionId: string; version: number }
  | { required: { connectUrl: string; reason: ConnectionRequiredReason } };

/**
 * Neither a token nor a reason to connect: the authorization server cannot be reached, or refuses
 * for a reason that authorizing again would not fix (its client, its configuration), or the
 * tokens do not open with this service's KEY_ENCRYPTION_KEY. The message quotes no secret.
 */
export class UpstreamAuthorizationUnavailable extends Error {
  constructor(
    readonly connectionId: string,
    message: string,
    /** Trying again later may work. */
    readonly transient: boolean,
  ) {
    super(message);
    this.name = 'UpstreamAuthorizationUnavailable';
  }
}

export type OAuthToolAuth = Extract<ToolAuth, { type: 'oauth' }>;

export const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

/** The tool's `config.auth` when it is an OAuth connection; undefined otherwise. */
export function oauthAuthOf(tool: Pick<Tool, 'config'>): OAuthToolAuth | undefined {
  const auth = (tool.config as { auth?: unknown }).auth;
  return isObject(auth) && auth.type === 'oauth' ? (auth as OAuthToolAuth) : undefined;
}

export const snapshotOf = (row: ConnectionRow, tool: Pick<Tool, 'actionType'>): ToolConnectionSnapshot => ({
  tool_id: row.tool_id,
  action_type: tool.actionType,
  scope: row.scope,
  user_id: row.user_id,
  status: row.status,
  issuer: row.issuer,
  subject: row.subject,
  scopes: row.scopes ?? [],
});
