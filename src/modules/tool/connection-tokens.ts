import { setTimeout as sleep } from 'node:timers/promises';
import type { Deps } from '../../deps.js';
import { sqlConnectionOf } from '../../db/prisma-sql.js';
import type { Tool } from '../../generated/prisma/client.js';
import { randomId } from '../../lib/ids.js';
import type { Actor } from '../audit/audit-events.js';
import { recordAudit } from '../audit/audit.service.js';
import { enqueueWebhookEvent, type WebhookWake } from '../webhook/webhook.service.js';
import type { ConnectionClients } from './connection-clients.js';
import type { ConnectionRevocation } from './connection-revocation.js';
import type { ConnectionSecrets } from './connection-secrets.js';
import {
  CONSOLE_TOOLS_PATH,
  type ConnectionRequiredReason,
  oauthAuthOf,
  snapshotOf,
  type UpstreamAccess,
  UpstreamAuthorizationUnavailable,
} from './tool-connections.js';
import {
  type CallConnectionRow,
  claimRefresh,
  type ConnectionRow,
  findConnectionById,
  findConnectionForCall,
  findLastUsedConnection,
  markReauthorizationRequired,
  recordConnectionUses,
  releaseRefresh,
  storeRefreshed,
} from './tool-connections.store.js';
import { findToolById } from './tool.store.js';
import { resourceOf } from './upstream-oauth-discovery.js';
import { type AuthorizationServer, needsRefresh, refreshTokens } from './upstream-oauth.js';

/**
 * The token side of the tools' OAuth connections, which every call goes through: the access token
 * to send to a tool's upstream for its caller, refreshed ahead of its expiry one refresh at a time
 * across processes (a lease in the database) and within one (its callers share it), and again after
 * an upstream 401; a connection whose grant is gone marked for authorizing again; and when each
 * connection was last used, written in batches.
 */

/** A refresh claimed by a process is its own this long; a refresh request gets 5 s (OAUTH_TIMEOUT_MS). */
const REFRESH_LEASE_SECONDS = 30;
/** How often a caller waiting on another process's refresh looks again. */
const REFRESH_WAIT_POLL_MS = 25;
/** How long a caller waits on another process's refresh before giving up (the lease, and some). */
const REFRESH_WAIT_MAX_MS = (REFRESH_LEASE_SECONDS + 5) * 1000;
/** While another process refreshes, a token valid this much longer is used as it is. */
const STILL_VALID_MARGIN_MS = 5000;
/** An upstream 401 within this long after a refresh is not worth another: the token is new. */
const FORCED_REFRESH_DEBOUNCE_MS = 5000;
/** How often each process writes `last_used_at` for the connections it used. */
export const CONNECTION_USAGE_FLUSH_MS = 30_000;

const SYSTEM: Actor = { type: 'system', id: null, label: 'tool connection refresh' };

const expiryOf = (row: Pick<ConnectionRow, 'token_expires_at'>) =>
  row.token_expires_at ? { expires_at: row.token_expires_at.getTime() } : {};

interface TokenCollaborators {
  webhooks: WebhookWake;
  clients: Pick<ConnectionClients, 'accessOf' | 'clientOfTokens'>;
  sealed: Pick<ConnectionSecrets, 'open' | 'sealTokens'>;
  revocation: Pick<ConnectionRevocation, 'revokeLater'>;
}

/** This process's state of its connections, kept by the service (its views show `uses` too). */
interface TokenState {
  /** When this process last used each connection; written by `flushUsage`. */
  uses: Map<string, number>;
  /** Refreshes under way in this process, by connection: its callers share one. */
  refreshing: Map<string, Promise<UpstreamAccess>>;
}

/** The token side, with what the service hands it: its clients, secrets, revocation and state. */
export function createConnectionTokens(
  { env, db, logger }: Pick<Deps, 'env' | 'db' | 'logger'>,
  {
    webhooks,
    clients: { accessOf, clientOfTokens },
    sealed: { open, sealTokens },
    revocation: { revokeLater },
  }: TokenCollaborators,
  { uses, refreshing }: TokenState,
) {
  const connectUrlOf = (toolId: string) => `${env.publicUrl}${CONSOLE_TOOLS_PATH}/${encodeURIComponent(toolId)}`;

  /**
   * Whether the connection's tokens were issued for the tool's upstream as it is configured now: a
   * tool whose `url` moved elsewhere must not carry its users' tokens there (they connect again).
   */
  const forThisUpstream = (tool: Tool, row: Pick<ConnectionRow, 'resource'>) =>
    row.resource !== null && row.resource === resourceOf(String((tool.config as { url?: unknown }).url))?.href;

  const required = (toolId: string, reason: ConnectionRequiredReason): UpstreamAccess => ({
    required: { connectUrl: connectUrlOf(toolId), reason },
  });

  const reasonOf = (row: Pick<ConnectionRow, 'status'> | undefined): ConnectionRequiredReason =>
    row?.status === 'reauthorization_required' || row?.status === 'revoked' ? row.status : 'not_connected';

  function use(row: CallConnectionRow): UpstreamAccess {
    const token = open(row.access_token!, row.id);
    uses.set(row.id, Date.now());
    return { token, connectionId: row.id, version: row.token_version };
  }

  const stillValid = (row: ConnectionRow) =>
    row.access_token !== null &&
    (row.token_expires_at === null || row.token_expires_at.getTime() > Date.now() + STILL_VALID_MARGIN_MS);

  const recentlyRefreshed = (row: ConnectionRow) => {
    const at = row.last_refreshed_at ?? row.connected_at;
    return at !== null && at.getTime() > Date.now() - FORCED_REFRESH_DEBOUNCE_MS;
  };

  /**
   * The grant is gone (invalid_grant, or a token refused that cannot be refreshed): the connection
   * needs authorizing again. Audited (`tool.connection_expired`) and sent to webhooks, once.
   */
  async function expire(tool: Tool, row: ConnectionRow, owner: string | null, message: string): Promise<void> {
    const changed = await db.prisma.$transaction(async (tx) => {
      const sql = sqlConnectionOf(tx);
      if (!(await markReauthorizationRequired(sql, row.id, owner, message))) return false;
      await recordAudit(tx, row.org_id, SYSTEM, {
        action: 'tool.connection_expired',
        targetType: 'tool_connection',
        targetId: row.id,
        before: snapshotOf(row, tool),
        reason: message,
      });
      await enqueueWebhookEvent(sql, row.org_id, 'tool.connection_expired', {
        connection_id: row.id,
        tool_id: row.tool_id,
        action_type: tool.actionType,
        scope: row.scope,
        user_id: row.user_id,
        connect_url: connectUrlOf(row.tool_id),
        reason: message,
      });
      return true;
    });
    if (changed) {
      webhooks.wake();
      logger.warn(
        { connection_id: row.id, tool_id: row.tool_id, reason: message },
        'a tool connection needs authorizing again',
      );
    }
  }

  /** With the lease held: new tokens from the refresh token, stored; or why not. */
  async function refreshClaimed(
    tool: Tool,
    row: ConnectionRow,
    owner: string,
    force: boolean,
  ): Promise<UpstreamAccess> {
    let settled = false;
    try {
      const client = await clientOfTokens(db.sql, tool, row);
      if (!row.refresh_token || !client || !row.authorization_server) {
        settled = true;
        await expire(
          tool,
          row,
          owner,
          !client
            ? 'The OAuth client the tokens were issued to is no longer the tool’s; connect again'
            : 'The access token can no longer be used and the upstream gave no refresh token; connect again',
        );
        return required(row.tool_id, 'reauthorization_required');
      }
      const as = row.authorization_server as unknown as AuthorizationServer;
      const refreshed = await refreshTokens(
        as,
        client,
        { refreshToken: open(row.refresh_token, row.id), ...(row.resource ? { resource: row.resource } : {}) },
        accessOf(tool),
      );
      if (refreshed.ok) {
        const stored = await storeRefreshed(
          db.sql,
          row.id,
          owner,
          sealTokens(refreshed.value, row.scopes ?? undefined),
        );
        settled = true;
        if (!stored) {
          // Revoked or deleted meanwhile: these tokens are no one's.
          revokeLater([
            {
              connectionId: row.id,
              as,
              client,
              access: accessOf(tool),
              accessToken: refreshed.value.access_token,
              refreshToken: refreshed.value.refresh_token ?? null,
            },
          ]);
          return required(row.tool_id, reasonOf(await findConnectionById(db.sql, row.id)));
        }
        uses.set(row.id, Date.now());
        return { token: refreshed.value.access_token, connectionId: row.id, version: stored.token_version };
      }
      settled = true;
      if (refreshed.error === 'invalid_grant') {
        await expire(tool, row, owner, refreshed.message);
        return required(row.tool_id, 'reauthorization_required');
      }
      await releaseRefresh(db.sql, row.id, owner, refreshed.message);
      logger.warn(
        { connection_id: row.id, tool_id: row.tool_id, reason: refreshed.message },
        'a tool connection’s refresh failed',
      );
      if (!force && stillValid(row)) return use(row);
      throw new UpstreamAuthorizationUnavailable(row.id, refreshed.message, refreshed.transient);
    } finally {
      if (!settled) await releaseRefresh(db.sql, row.id, owner, 'The refresh was interrupted').catch(() => undefined);
    }
  }

  /**
   * Whether a token refused with a 401 has been replaced since: by version when the caller knows
   * which token it sent; and anyway when a refresh just happened, so an upstream that refuses
   * every token costs one refresh per FORCED_REFRESH_DEBOUNCE_MS, not one per call.
   */
  const replacedSince = (row: ConnectionRow, refusedVersion: number | undefined) =>
    refusedVersion === undefined
      ? recentlyRefreshed(row)
      : row.token_version !== refusedVersion ||
        (row.last_refreshed_at !== null && row.last_refreshed_at.getTime() > Date.now() - FORCED_REFRESH_DEBOUNCE_MS);

  /**
   * A fresh token for the connection: refreshed by this process when it claims the lease, else
   * waited for while another process refreshes (its current token serves meanwhile if still
   * valid). `force`: after an upstream 401 (to the token of `refusedVersion`), refreshed even
   * before its expiry, unless it was replaced since.
   */
  async function refreshLoop(
    tool: Tool,
    connectionId: string,
    force: boolean,
    refusedVersion?: number,
  ): Promise<UpstreamAccess> {
    const deadline = Date.now() + REFRESH_WAIT_MAX_MS;
    for (;;) {
      const row = await findConnectionById(db.sql, connectionId);
      if (row?.status !== 'connected') return required(tool.id, reasonOf(row));
      const fresh = force ? replacedSince(row, refusedVersion) : !needsRefresh(expiryOf(row), Date.now());
      if (fresh && row.access_token) return use(row);
      // Nothing to refresh with: the token serves until it expires, then the connection is over.
      if (!force && !row.refresh_token && stillValid(row)) return use(row);
      const owner = randomId('lease');
      const claimed = await claimRefresh(db.sql, row.id, row.token_version, owner, REFRESH_LEASE_SECONDS);
      if (claimed) return refreshClaimed(tool, claimed, owner, force);
      if (!force && stillValid(row)) return use(row);
      if (Date.now() > deadline)
        throw new UpstreamAuthorizationUnavailable(
          row.id,
          'Another process’s refresh of the connection did not finish',
          true,
        );
      await sleep(REFRESH_WAIT_POLL_MS);
    }
  }

  /** One refresh per connection at a time in this process; its callers share the answer. */
  function refreshOnce(
    tool: Tool,
    connectionId: string,
    force: boolean,
    refusedVersion?: number,
  ): Promise<UpstreamAccess> {
    const running = refreshing.get(connectionId);
    if (running) return running;
    const task = refreshLoop(tool, connectionId, force, refusedVersion).finally(() => refreshing.delete(connectionId));
    refreshing.set(connectionId, task);
    return task;
  }

  /**
   * The access token to send to the tool's upstream for this caller (`userId`, or null for the
   * org's connection of an "org" tool), refreshed first when it is within a minute of its expiry;
   * or, when there is none to use, where the user connects and why. Throws
   * UpstreamAuthorizationUnavailable when the authorization server cannot renew an expired token.
   */
  async function accessTokenFor(tool: Tool, { userId }: { userId: string | null }): Promise<UpstreamAccess> {
    const auth = oauthAuthOf(tool);
    if (!auth) throw new Error(`accessTokenFor: the tool ${tool.id} does not authenticate with an OAuth connection`);
    if (auth.connection === 'user' && userId === null) return required(tool.id, 'not_connected');
    const row = await findConnectionForCall(db.sql, tool.id, auth.connection === 'org' ? null : userId);
    if (row?.status !== 'connected' || !row.access_token) return required(tool.id, reasonOf(row));
    if (!forThisUpstream(tool, row)) return required(tool.id, 'reauthorization_required');
    if (!needsRefresh(expiryOf(row), Date.now())) return use(row);
    return refreshOnce(tool, row.id, false);
  }

  /**
   * A token to read the tool's upstream definitions with (tools/list, no call's data): the org's
   * connection; for a per-user tool the given user's when they have one (the operator refreshing),
   * else the connection used last.
   */
  async function definitionsAccessFor(tool: Tool, preferredUserId: string | null): Promise<UpstreamAccess> {
    const auth = oauthAuthOf(tool);
    if (auth?.connection !== 'user') return accessTokenFor(tool, { userId: null });
    if (preferredUserId !== null) {
      const own = await accessTokenFor(tool, { userId: preferredUserId });
      if ('token' in own) return own;
    }
    const last = await findLastUsedConnection(db.sql, tool.id);
    return last?.user_id ? accessTokenFor(tool, { userId: last.user_id }) : required(tool.id, 'not_connected');
  }

  /**
   * After the upstream answered 401 to the connection's token: one refresh, even ahead of expiry
   * (shared by the callers that met the 401 together, and skipped when a refresh just happened),
   * then the new token; or the `required` answer when the grant is gone. `refusedVersion`: the
   * version of the token the upstream refused, when known.
   */
  async function afterUnauthorized(connectionId: string, refusedVersion?: number): Promise<UpstreamAccess> {
    const row = await findConnectionById(db.sql, connectionId);
    const tool = row && (await findToolById(db.prisma, row.tool_id));
    // Gone with its tool or its user: the tools page is where to go next.
    if (!row || !tool)
      return { required: { connectUrl: `${env.publicUrl}${CONSOLE_TOOLS_PATH}`, reason: 'not_connected' } };
    if (row.status !== 'connected') return required(tool.id, reasonOf(row));
    if (!forThisUpstream(tool, row)) return required(tool.id, 'reauthorization_required');
    return refreshOnce(tool, row.id, true, refusedVersion);
  }

  /**
   * Writes when this process last used each connection, in one statement (every
   * CONNECTION_USAGE_FLUSH_MS, and at stop): a call costs no write of its own.
   */
  async function flushUsage(): Promise<void> {
    if (!uses.size) return;
    const taken = [...uses];
    uses.clear();
    await recordConnectionUses(
      db.sql,
      taken.map(([id]) => id),
      taken.map(([, at]) => new Date(at)),
    );
  }

  return { accessTokenFor, definitionsAccessFor, afterUnauthorized, flushUsage };
}

export type ConnectionTokens = ReturnType<typeof createConnectionTokens>;
