import type { Deps } from '../../deps.js';
import { sqlConnectionOf } from '../../db/prisma-sql.js';
import { AppError, conflict, forbidden, notFound, validationError } from '../../errors.js';
import type { Prisma, Tool } from '../../generated/prisma/client.js';
import { sha256Hex } from '../../lib/hash.js';
import { randomId } from '../../lib/ids.js';
import { type Principal, may, userIdOf } from '../../authz/authz.js';
import { type Actor, actorOf } from '../audit/audit-events.js';
import { recordAudit } from '../audit/audit.service.js';
import type { UserService } from '../user/user.service.js';
import type { WebhookWake } from '../webhook/webhook.service.js';
import {
  discoverUpstream,
  type OAuthFailure,
  type RegisteredClient,
  startAuthorization,
  UPSTREAM_CALLBACK_PATH,
  UPSTREAM_CLIENT_DOCUMENT_PATH,
  upstreamClientMetadataDocument,
} from './upstream-oauth.js';
import {
  type ConnectionRow,
  connectionsOfTool,
  deleteConnectionsOfTool,
  deleteConnectionsOfUser,
  deleteExpiredAuthorizations,
  ensureConnection,
  findConnectionById,
  insertAuthorization,
  lockConnection,
  markRevoked,
  registeredClientsOfTool,
} from './tool-connections.store.js';
import { findTool, findToolById } from './tool.store.js';
import { isObject, oauthAuthOf, snapshotOf, type UpstreamAccess } from './tool-connections.js';
import { createConnectionAuthorization } from './connection-authorization.js';
import { createConnectionClients } from './connection-clients.js';
import { createConnectionRevocation, type Revocable } from './connection-revocation.js';
import { createConnectionSecrets } from './connection-secrets.js';
import { createConnectionTokens } from './connection-tokens.js';

/**
 * A tool's OAuth connections to its upstream (docs/decisions/0068-upstream-connections.md): the
 * org's one (`config.auth.connection` "org") or each user's ("user"), made through a browser with
 * the authorization code flow of the upstream OAuth client (upstream-oauth.ts), their tokens
 * sealed at rest, refreshed ahead of expiry one refresh at a time across processes, and revoked
 * at the upstream when they are removed.
 *
 * The browser's way: `POST …/connections` answers `authorization_url`, the gateway's
 * `/oauth/upstream/start?state=…`, which binds the authorization to the browser that opens it (a
 * cookie whose SHA-256 it keeps) and sends it on to the authorization server; the server sends it
 * back to `/oauth/upstream/callback`, which takes the authorization once (by the SHA-256 of its
 * state), checks the cookie, exchanges the code and sends the browser to the console's tool page.
 *
 * No token, code, verifier or client secret is ever returned, logged, audited or put in an error:
 * the library's failures quote none, and ours quote theirs.
 *
 * Here: the routes (connect, list, get, revoke, and removal with a tool or a user), and the parts
 * put together. Elsewhere: the browser's way (connection-authorization.ts), the token side of
 * every call (connection-tokens.ts), the OAuth client a connection goes with
 * (connection-clients.ts), its secrets sealed at rest (connection-secrets.ts), their revocation
 * upstream (connection-revocation.ts), and what all of them share (tool-connections.ts).
 */

/** How long an authorization may take, from the POST to the callback (the state's life). */
export const CONNECTION_STATE_TTL_SECONDS = 600;
/** Where `authorization_url` points: the gateway's page that binds the browser, then redirects. */
export const UPSTREAM_START_PATH = '/oauth/upstream/start';
export { UPSTREAM_CALLBACK_PATH, UPSTREAM_CLIENT_DOCUMENT_PATH, upstreamClientMetadataDocument };
// The service is the connections' entrance: the edge, the CLI and the module's other files import these from here.
export type { UpstreamStart } from './connection-authorization.js';
export { reencryptConnectionSecrets } from './connection-secrets.js';
export { CONNECTION_USAGE_FLUSH_MS } from './connection-tokens.js';
export {
  CONSOLE_TOOLS_PATH,
  type ConnectionRequiredReason,
  type UpstreamAccess,
  UpstreamAuthorizationUnavailable,
} from './tool-connections.js';

export const connectionStatuses = ['pending', 'connected', 'reauthorization_required', 'revoked'] as const;
export type ConnectionStatus = (typeof connectionStatuses)[number];
export const connectionScopes = ['org', 'user'] as const;

/** A connection as the API shows it: never a token. */
export interface ToolConnectionView {
  connection_id: string;
  tool_id: string;
  scope: 'org' | 'user';
  user_id: string | null;
  status: ConnectionStatus;
  subject: string | null;
  scopes: string[];
  connected_at: Date | null;
  /** When the access token expires (it is refreshed ahead of that). */
  expires_at: Date | null;
  last_refreshed_at: Date | null;
  last_used_at: Date | null;
  error: string | null;
}

export interface ConnectionStart {
  connection_id: string;
  authorization_url: string;
  expires_at: Date;
}

/** The authorization request without its state: the state is kept only as its SHA-256. */
function withoutState(authorizationUrl: string): string {
  const url = new URL(authorizationUrl);
  url.searchParams.delete('state');
  return url.href;
}

interface Collaborators {
  webhooks: WebhookWake;
  users: Pick<UserService, 'byIds'>;
  /** Told of each connection made (not awaited): an mcp tool's definitions can be read now. */
  connected: (tool: Tool, actor: Actor) => void;
}

export function createToolConnections(deps: Deps, { webhooks, users, connected }: Collaborators) {
  const { env, db, logger, secrets } = deps;
  const connectionClients = createConnectionClients(deps);
  const { redirectUri, accessOf, registeredOf, clientForNewAuthorization, clientOfTokens } = connectionClients;
  const sealed = createConnectionSecrets(deps);
  /** When this process last used each connection; written by `flushUsage`. */
  const uses = new Map<string, number>();
  /** Refreshes under way in this process, by connection: its callers share one. */
  const refreshing = new Map<string, Promise<UpstreamAccess>>();
  /** Revocations at upstreams after a commit, awaited by `close`. */
  const revoking = new Set<Promise<void>>();
  const revocation = createConnectionRevocation(deps, revoking);
  const { revocableOf, revokeAtUpstream, revokeLater } = revocation;
  const { start, callback } = createConnectionAuthorization(deps, {
    users,
    connected,
    clients: connectionClients,
    sealed,
    revocation,
  });
  const { accessTokenFor, definitionsAccessFor, afterUnauthorized, flushUsage } = createConnectionTokens(
    deps,
    { webhooks, clients: connectionClients, sealed, revocation },
    { uses, refreshing },
  );

  const viewOf = (row: ConnectionRow): ToolConnectionView => {
    const used = uses.get(row.id);
    const lastUsed =
      used !== undefined && (!row.last_used_at || row.last_used_at.getTime() < used)
        ? new Date(used)
        : row.last_used_at;
    return {
      connection_id: row.id,
      tool_id: row.tool_id,
      scope: row.scope,
      user_id: row.user_id,
      status: row.status,
      subject: row.subject,
      scopes: row.scopes ?? [],
      connected_at: row.connected_at,
      expires_at: row.token_expires_at,
      last_refreshed_at: row.last_refreshed_at,
      last_used_at: lastUsed,
      error: row.error,
    };
  };

  async function toolOf(orgId: string, toolId: string): Promise<Tool> {
    const tool = await findTool(db.prisma, orgId, toolId);
    if (!tool) throw notFound('Tool');
    return tool;
  }

  /** A failure of discovery, registration or the start of an authorization, as the API answers it. */
  function refusalOf(failure: OAuthFailure): AppError {
    if (failure.transient)
      return new AppError(
        'SERVICE_UNAVAILABLE',
        `The upstream's authorization server cannot be reached right now: ${failure.message}`,
      );
    return validationError([
      { field: 'tool_id', message: `the upstream's authorization server cannot be used: ${failure.message}` },
    ]);
  }

  /**
   * `POST …/tools/{tool_id}/connections`: starts an authorization of the tool's connection for the
   * caller (a "user" tool) or the org (an "org" tool, admins and operators). The connection is
   * made pending the first time; a connection that exists keeps what it holds until the new
   * authorization succeeds.
   */
  async function connect(orgId: string, toolId: string, principal: Principal): Promise<ConnectionStart> {
    const tool = await toolOf(orgId, toolId);
    const auth = oauthAuthOf(tool);
    if (!auth) {
      const type = isObject((tool.config as { auth?: unknown }).auth)
        ? String((tool.config as { auth: Record<string, unknown> }).auth.type)
        : 'headers';
      throw conflict(
        `The tool "${tool.actionType}" does not authenticate with an OAuth connection (its config.auth is of type "${type}"): ` +
          'set config.auth to {"type": "oauth", "connection": "org" | "user"} to connect it',
        { field: 'config.auth' },
      );
    }
    const userId = userIdOf(principal);
    if (userId === null) throw forbidden('A connection is made by a signed-in user, not with an API key');
    if (auth.connection === 'org' && !may(principal, 'tool_connection:manage'))
      throw forbidden('Only admins and operators connect a tool for the whole organization');
    const access = accessOf(tool);
    const discovered = await discoverUpstream((tool.config as { url: string }).url, access);
    if (!discovered.ok) throw refusalOf(discovered);
    const { authorizationServer: as, resource } = discovered.value;
    const client = await clientForNewAuthorization(tool, auth, as, access);
    if (!client.ok) throw refusalOf(client);
    const scopes = auth.scopes ?? discovered.value.scopes;
    const started = await startAuthorization(as, client.value, { redirectUri, resource, scopes }, access);
    if (!started.ok) throw refusalOf(started);
    const { connection, expiresAt } = await db.sql.transaction(async (tx) => {
      const made = await ensureConnection(tx, {
        id: randomId('conn'),
        orgId,
        toolId: tool.id,
        userId: auth.connection === 'org' ? null : userId,
        createdById: userId,
      });
      const expires = await insertAuthorization(tx, {
        stateHash: sha256Hex(started.value.state),
        connectionId: made.id,
        userId,
        codeVerifier: secrets.seal(started.value.codeVerifier),
        requestUrl: withoutState(started.value.authorizationUrl),
        issuer: as.issuer,
        authorizationServer: as as unknown as Record<string, unknown>,
        resource,
        clientId: client.value.client_id,
        registration: client.value.registration,
        ttlSeconds: CONNECTION_STATE_TTL_SECONDS,
      });
      return { connection: made, expiresAt: expires };
    });
    const startUrl = new URL(`${env.publicUrl}${UPSTREAM_START_PATH}`);
    startUrl.searchParams.set('state', started.value.state);
    return { connection_id: connection.id, authorization_url: startUrl.href, expires_at: expiresAt };
  }

  /** The connection, when the caller may see it: their own, or any for admins and operators. */
  async function visibleConnection(tool: Tool, connectionId: string, principal: Principal): Promise<ConnectionRow> {
    const row = await findConnectionById(db.sql, connectionId);
    if (!row || row.tool_id !== tool.id) throw notFound('Connection');
    const own = row.user_id !== null && row.user_id === userIdOf(principal);
    if (!own && !may(principal, 'tool_connection:manage'))
      throw forbidden("Only admins and operators see the organization's connection and other users' connections");
    return row;
  }

  async function list(orgId: string, toolId: string, principal: Principal) {
    const tool = await toolOf(orgId, toolId);
    const all = may(principal, 'tool_connection:manage');
    const own = userIdOf(principal);
    // An API key never gets here (the permission table); a caller who is no user has none.
    if (!all && own === null) return { items: [], total: 0 };
    const rows = await connectionsOfTool(db.sql, tool.id, all ? null : own);
    return { items: rows.map(viewOf), total: rows.length };
  }

  async function get(orgId: string, toolId: string, connectionId: string, principal: Principal) {
    return viewOf(await visibleConnection(await toolOf(orgId, toolId), connectionId, principal));
  }

  /**
   * `DELETE …/connections/{connection_id}`: the connection is revoked (its tokens forgotten, its
   * status `revoked`, audited), then its tokens are revoked at the upstream's server when it
   * offers RFC 7009. Revoking a revoked connection changes nothing.
   */
  async function revoke(orgId: string, toolId: string, connectionId: string, principal: Principal): Promise<void> {
    const tool = await toolOf(orgId, toolId);
    const row = await visibleConnection(tool, connectionId, principal);
    const revocable = await db.prisma.$transaction(async (tx) => {
      const sql = sqlConnectionOf(tx);
      const locked = await lockConnection(sql, row.id);
      if (!locked) throw notFound('Connection');
      if (locked.status === 'revoked') return undefined;
      const client = await clientOfTokens(sql, tool, locked);
      await markRevoked(sql, locked.id);
      await recordAudit(tx, orgId, actorOf(principal), {
        action: 'tool.connection_revoked',
        targetType: 'tool_connection',
        targetId: locked.id,
        before: snapshotOf(locked, tool),
        reason: 'revoked',
      });
      return revocableOf(locked, client, accessOf(tool));
    });
    if (revocable) await revokeAtUpstream(revocable);
  }

  /** The connections of `rows` forgotten with their tool or user: audited in `tx`, revoked upstream after the commit. */
  async function forgetConnections(
    tx: Prisma.TransactionClient,
    rows: readonly ConnectionRow[],
    toolOfRow: (row: ConnectionRow) => Tool | undefined,
    clients: (row: ConnectionRow) => Promise<RegisteredClient | undefined>,
    actor: Actor,
    reason: 'tool_deleted' | 'user_removed',
  ): Promise<() => void> {
    const revocables: Revocable[] = [];
    for (const row of rows) {
      const tool = toolOfRow(row);
      if (!tool) continue;
      if (row.status !== 'revoked') {
        await recordAudit(tx, row.org_id, actor, {
          action: 'tool.connection_revoked',
          targetType: 'tool_connection',
          targetId: row.id,
          before: snapshotOf(row, tool),
          reason,
        });
      }
      const revocable = revocableOf(row, await clients(row), accessOf(tool));
      if (revocable) revocables.push(revocable);
    }
    return () => revokeLater(revocables);
  }

  /**
   * Deletes the tool's connections in the transaction that deletes the tool (before it), audited;
   * answers what to run after the commit: the revocation of their tokens at the upstream.
   */
  async function removeAllOfTool(tx: Prisma.TransactionClient, tool: Tool, actor: Actor): Promise<() => void> {
    const sql = sqlConnectionOf(tx);
    const clients = await registeredClientsOfTool(sql, tool.id);
    const rows = await deleteConnectionsOfTool(sql, tool.id);
    // The registered clients go with the tool: read before it is deleted.
    const clientOf = async (row: ConnectionRow) => {
      if (row.registration === 'given') return clientOfTokens(sql, tool, row);
      const kept = clients.find((c) => c.issuer === row.issuer && c.client_id === row.client_id);
      return kept && registeredOf(kept);
    };
    return forgetConnections(tx, rows, () => tool, clientOf, actor, 'tool_deleted');
  }

  /**
   * Deletes the user's connections in the transaction that removes the user (before it), audited;
   * answers what to run after the commit: the revocation of their tokens at the upstreams.
   */
  async function removeAllOfUser(tx: Prisma.TransactionClient, userId: string, actor: Actor): Promise<() => void> {
    const sql = sqlConnectionOf(tx);
    const rows = await deleteConnectionsOfUser(sql, userId);
    const tools = new Map<string, Tool>();
    for (const toolId of new Set(rows.map((row) => row.tool_id))) {
      const tool = await findToolById(tx, toolId);
      if (tool) tools.set(toolId, tool);
    }
    const clientOf = async (row: ConnectionRow) => {
      const tool = tools.get(row.tool_id);
      return tool && clientOfTokens(sql, tool, row);
    };
    return forgetConnections(tx, rows, (row) => tools.get(row.tool_id), clientOf, actor, 'user_removed');
  }

  const prune = () => deleteExpiredAuthorizations(db.sql);

  async function close(): Promise<void> {
    await flushUsage().catch((error) => logger.warn({ err: error }, 'recording tool connection use failed'));
    await Promise.all(revoking);
  }

  return {
    connect,
    list,
    get,
    revoke,
    start,
    callback,
    accessTokenFor,
    afterUnauthorized,
    definitionsAccessFor,
    removeAllOfTool,
    removeAllOfUser,
    flushUsage,
    prune,
    close,
    redirectUri,
  };
}

export type ToolConnections = ReturnType<typeof createToolConnections>;
