import type { SqlConnection } from '../../db/sql.js';

/**
 * The statements of a tool's OAuth connections (docs/decisions/0068-upstream-connections.md): the
 * clients the gateway registered at upstream authorization servers (`tool_oauth_clients`), the
 * connections and their sealed tokens (`tool_connections`), and the authorizations on their way
 * through a browser (`tool_connection_authorizations`). Raw SQL throughout: the refresh lease and
 * the single-use state are conditional statements whose answer is the row they changed.
 */

export interface RegisteredClientRow {
  tool_id: string;
  issuer: string;
  redirect_uri: string;
  client_id: string;
  /** Sealed. */
  client_secret: string | null;
  client_secret_expires_at: Date | null;
  token_endpoint_auth_method: 'none' | 'client_secret_basic' | 'client_secret_post';
  registration: 'dynamic' | 'metadata_document';
}

export interface ConnectionRow {
  id: string;
  org_id: string;
  tool_id: string;
  user_id: string | null;
  scope: 'org' | 'user';
  status: 'pending' | 'connected' | 'reauthorization_required' | 'revoked';
  created_by_id: string | null;
  issuer: string | null;
  authorization_server: Record<string, unknown> | null;
  resource: string | null;
  client_id: string | null;
  registration: 'given' | 'dynamic' | 'metadata_document' | null;
  /** Sealed. */
  access_token: string | null;
  /** Sealed. */
  refresh_token: string | null;
  token_expires_at: Date | null;
  token_version: number;
  scopes: string[] | null;
  subject: string | null;
  error: string | null;
  connected_at: Date | null;
  last_refreshed_at: Date | null;
  last_used_at: Date | null;
  created_at: Date;
  updated_at: Date;
}

// uuid columns as text: the drivers answer them alike.
const CONNECTION_COLUMNS = `id, org_id::text AS org_id, tool_id, user_id::text AS user_id, scope, status,
  created_by_id::text AS created_by_id, issuer, authorization_server,
  resource, client_id, registration, access_token, refresh_token, token_expires_at, token_version, scopes, subject,
  error, connected_at, last_refreshed_at, last_used_at, created_at, updated_at`;

export async function findRegisteredClient(
  conn: SqlConnection,
  toolId: string,
  issuer: string,
): Promise<RegisteredClientRow | undefined> {
  const [row] = await conn.query<RegisteredClientRow>(
    `SELECT tool_id, issuer, redirect_uri, client_id, client_secret, client_secret_expires_at,
            token_endpoint_auth_method, registration
     FROM tool_oauth_clients WHERE tool_id = $1 AND issuer = $2`,
    [toolId, issuer],
  );
  return row;
}

/**
 * Keeps a newly registered client, and answers the one kept: of two registrations at once the
 * first stays. `replacing` names the stale client this registration replaces (another redirect
 * URI, an expired secret); another one found there is newer and stays.
 */
export async function saveRegisteredClient(
  conn: SqlConnection,
  client: Omit<RegisteredClientRow, 'client_secret_expires_at'> & { client_secret_expires_at: Date | null },
  replacing: string | null,
): Promise<RegisteredClientRow> {
  await conn.query(
    `INSERT INTO tool_oauth_clients (tool_id, issuer, redirect_uri, client_id, client_secret, client_secret_expires_at,
                                     token_endpoint_auth_method, registration)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
     ON CONFLICT (tool_id, issuer) DO UPDATE SET redirect_uri = EXCLUDED.redirect_uri, client_id = EXCLUDED.client_id,
       client_secret = EXCLUDED.client_secret, client_secret_expires_at = EXCLUDED.client_secret_expires_at,
       token_endpoint_auth_method = EXCLUDED.token_endpoint_auth_method, registration = EXCLUDED.registration,
       created_at = now()
     WHERE tool_oauth_clients.client_id = $9`,
    [
      client.tool_id,
      client.issuer,
      client.redirect_uri,
      client.client_id,
      client.client_secret,
      client.client_secret_expires_at,
      client.token_endpoint_auth_method,
      client.registration,
      replacing,
    ],
  );
  return (await findRegisteredClient(conn, client.tool_id, client.issuer))!;
}

/**
 * Whose connection of a tool: the user's, or the org's (`userId` null). Two conditions rather than
 * `IS NOT DISTINCT FROM`, which no index answers: a per-user tool's every call would read all its
 * users' rows. These use the unique (tool_id, user_id) index and the org's partial one.
 */
const ownerCondition = (userId: string | null) => (userId === null ? 'user_id IS NULL' : 'user_id = $2::uuid');
const ownerParameters = (toolId: string, userId: string | null) => (userId === null ? [toolId] : [toolId, userId]);

/** The connection of a tool for a user, or the org's (`userId` null). */
export async function findConnectionFor(
  conn: SqlConnection,
  toolId: string,
  userId: string | null,
): Promise<ConnectionRow | undefined> {
  const [row] = await conn.query<ConnectionRow>(
    `SELECT ${CONNECTION_COLUMNS} FROM tool_connections WHERE tool_id = $1 AND ${ownerCondition(userId)}`,
    ownerParameters(toolId, userId),
  );
  return row;
}

/** What a call reads of its connection: enough to send its token, refresh it, or say why not. */
export type CallConnectionRow = Pick<
  ConnectionRow,
  'id' | 'status' | 'resource' | 'access_token' | 'token_expires_at' | 'token_version'
>;

/**
 * The connection a call of the tool uses (`findConnectionFor`'s), with only the columns the call
 * needs. It is read on every call, and on PGlite the whole row (the server's metadata as JSON, the
 * uuid casts, six timestamps) costs 100–200 µs of CPU more than these, against 2–3 ms for a whole
 * call of an mcp tool (`npm run bench`, issue 43). A refresh reads the whole row again, by id.
 */
export async function findConnectionForCall(
  conn: SqlConnection,
  toolId: string,
  userId: string | null,
): Promise<CallConnectionRow | undefined> {
  const [row] = await conn.query<CallConnectionRow>(
    `SELECT id, status, resource, access_token, token_expires_at, token_version FROM tool_connections
     WHERE tool_id = $1 AND ${ownerCondition(userId)}`,
    ownerParameters(toolId, userId),
  );
  return row;
}

/** The tool's connected connection used last (else connected last), whoever's it is. */
export async function findLastUsedConnection(conn: SqlConnection, toolId: string): Promise<ConnectionRow | undefined> {
  const [row] = await conn.query<ConnectionRow>(
    `SELECT ${CONNECTION_COLUMNS} FROM tool_connections
     WHERE tool_id = $1 AND status = 'connected'
     ORDER BY last_used_at DESC NULLS LAST, connected_at DESC NULLS LAST LIMIT 1`,
    [toolId],
  );
  return row;
}

export async function findConnectionById(conn: SqlConnection, id: string): Promise<ConnectionRow | undefined> {
  const [row] = await conn.query<ConnectionRow>(`SELECT ${CONNECTION_COLUMNS} FROM tool_connections WHERE id = $1`, [
    id,
  ]);
  return row;
}

/** A tool's connections, newest first; only `userId`'s when given. */
export function connectionsOfTool(
  conn: SqlConnection,
  toolId: string,
  onlyUserId: string | null,
): Promise<ConnectionRow[]> {
  return conn.query<ConnectionRow>(
    `SELECT ${CONNECTION_COLUMNS} FROM tool_connections
     WHERE tool_id = $1 AND ($2::uuid IS NULL OR user_id = $2::uuid)
     ORDER BY created_at DESC, id`,
    [toolId, onlyUserId],
  );
}

/** The tool's connection for the user (or the org's), made pending when there is none yet. */
export async function ensureConnection(
  conn: SqlConnection,
  connection: { id: string; orgId: string; toolId: string; userId: string | null; createdById: string },
): Promise<ConnectionRow> {
  await conn.query(
    `INSERT INTO tool_connections (id, org_id, tool_id, user_id, scope, status, created_by_id, scopes)
     VALUES ($1, $2::uuid, $3, $4::uuid, $5, 'pending', $6::uuid, '{}')
     ON CONFLICT DO NOTHING`,
    [
      connection.id,
      connection.orgId,
      connection.toolId,
      connection.userId,
      connection.userId === null ? 'org' : 'user',
      connection.createdById,
    ],
  );
  return (await findConnectionFor(conn, connection.toolId, connection.userId))!;
}

export interface NewAuthorization {
  stateHash: string;
  connectionId: string;
  userId: string;
  /** Sealed. */
  codeVerifier: string;
  requestUrl: string;
  issuer: string;
  authorizationServer: Record<string, unknown>;
  resource: string;
  clientId: string;
  registration: string;
  ttlSeconds: number;
}

/** Stores the authorization; answers when it expires. */
export async function insertAuthorization(conn: SqlConnection, a: NewAuthorization): Promise<Date> {
  const [row] = await conn.query<{ expires_at: Date }>(
    `INSERT INTO tool_connection_authorizations (state_hash, connection_id, user_id, code_verifier, request_url, issuer,
                                                 authorization_server, resource, client_id, registration, expires_at)
     VALUES ($1, $2, $3::uuid, $4, $5, $6, $7::jsonb, $8, $9, $10, now() + make_interval(secs => $11::int))
     RETURNING expires_at`,
    [
      a.stateHash,
      a.connectionId,
      a.userId,
      a.codeVerifier,
      a.requestUrl,
      a.issuer,
      JSON.stringify(a.authorizationServer),
      a.resource,
      a.clientId,
      a.registration,
      a.ttlSeconds,
    ],
  );
  return row.expires_at;
}

/**
 * Binds a live authorization to the browser that opens it first (`/oauth/upstream/start`); answers
 * the authorization request to send it to, or nothing when the authorization is unknown, expired
 * or already opened.
 */
export async function bindBrowser(
  conn: SqlConnection,
  stateHash: string,
  browserHash: string,
): Promise<string | undefined> {
  const [row] = await conn.query<{ request_url: string }>(
    `UPDATE tool_connection_authorizations SET browser_hash = $2
     WHERE state_hash = $1 AND browser_hash IS NULL AND expires_at > now()
     RETURNING request_url`,
    [stateHash, browserHash],
  );
  return row?.request_url;
}

export interface TakenAuthorization {
  connection_id: string;
  user_id: string;
  browser_hash: string | null;
  /** Sealed. */
  code_verifier: string;
  issuer: string;
  authorization_server: Record<string, unknown>;
  resource: string;
  client_id: string;
  registration: 'given' | 'dynamic' | 'metadata_document';
  live: boolean;
  tool_id: string;
}

/** Deletes the authorization and answers it: of two callbacks with one state, exactly one gets it. */
export async function takeAuthorization(
  conn: SqlConnection,
  stateHash: string,
): Promise<TakenAuthorization | undefined> {
  const [row] = await conn.query<TakenAuthorization>(
    `WITH taken AS (
       DELETE FROM tool_connection_authorizations WHERE state_hash = $1
       RETURNING connection_id, user_id::text AS user_id, browser_hash, code_verifier, issuer, authorization_server, resource, client_id,
                 registration, expires_at > now() AS live
     )
     SELECT taken.*, c.tool_id FROM taken JOIN tool_connections c ON c.id = taken.connection_id`,
    [stateHash],
  );
  return row;
}

/** The connection locked until the caller's transaction ends. */
export async function lockConnection(conn: SqlConnection, id: string): Promise<ConnectionRow | undefined> {
  const [row] = await conn.query<ConnectionRow>(
    `SELECT ${CONNECTION_COLUMNS} FROM tool_connections WHERE id = $1 FOR UPDATE`,
    [id],
  );
  return row;
}

export interface SealedTokens {
  accessToken: string;
  refreshToken: string | null;
  expiresAt: Date | null;
  scopes: string[];
}

/** The connection connected with new tokens, from the authorization that got them. */
export async function storeConnected(
  conn: SqlConnection,
  id: string,
  connected: SealedTokens & {
    issuer: string;
    authorizationServer: Record<string, unknown>;
    resource: string;
    clientId: string;
    registration: string;
    subject: string | null;
  },
): Promise<ConnectionRow> {
  const [row] = await conn.query<ConnectionRow>(
    `UPDATE tool_connections SET status = 'connected', issuer = $2, authorization_server = $3::jsonb, resource = $4,
       client_id = $5, registration = $6, access_token = $7, refresh_token = $8, token_expires_at = $9, scopes = $10::text[],
       subject = $11, error = NULL, connected_at = now(), last_refreshed_at = NULL, token_version = token_version + 1,
       refresh_lease_owner = NULL, refresh_lease_until = NULL, updated_at = now()
     WHERE id = $1
     RETURNING ${CONNECTION_COLUMNS}`,
    [
      id,
      connected.issuer,
      JSON.stringify(connected.authorizationServer),
      connected.resource,
      connected.clientId,
      connected.registration,
      connected.accessToken,
      connected.refreshToken,
      connected.expiresAt,
      connected.scopes,
      connected.subject,
    ],
  );
  return row;
}

/** Notes why an authorization or a refresh failed, the connection otherwise as it is. */
export async function noteConnectionError(conn: SqlConnection, id: string, error: string): Promise<void> {
  await conn.query('UPDATE tool_connections SET error = $2, updated_at = now() WHERE id = $1', [id, error]);
}

/**
 * Claims the refresh of a connection's tokens for `owner` until the lease runs out: only while it
 * is connected, holds the tokens the caller saw (`version`), and no live lease is held. Answers
 * the row when claimed.
 */
export async function claimRefresh(
  conn: SqlConnection,
  id: string,
  version: number,
  owner: string,
  leaseSeconds: number,
): Promise<ConnectionRow | undefined> {
  const [row] = await conn.query<ConnectionRow>(
    `UPDATE tool_connections SET refresh_lease_owner = $3, refresh_lease_until = now() + make_interval(secs => $4::int)
     WHERE id = $1 AND status = 'connected' AND token_version = $2
       AND (refresh_lease_until IS NULL OR refresh_lease_until < now())
     RETURNING ${CONNECTION_COLUMNS}`,
    [id, version, owner, leaseSeconds],
  );
  return row;
}

/** Stores refreshed tokens and ends the lease, only if `owner` still holds it. */
export async function storeRefreshed(
  conn: SqlConnection,
  id: string,
  owner: string,
  tokens: SealedTokens,
): Promise<ConnectionRow | undefined> {
  const [row] = await conn.query<ConnectionRow>(
    `UPDATE tool_connections SET access_token = $3, refresh_token = $4, token_expires_at = $5, scopes = $6::text[],
       last_refreshed_at = now(), error = NULL, token_version = token_version + 1,
       refresh_lease_owner = NULL, refresh_lease_until = NULL, updated_at = now()
     WHERE id = $1 AND refresh_lease_owner = $2 AND status = 'connected'
     RETURNING ${CONNECTION_COLUMNS}`,
    [id, owner, tokens.accessToken, tokens.refreshToken, tokens.expiresAt, tokens.scopes],
  );
  return row;
}

/** Ends `owner`'s lease without new tokens, noting why. */
export async function releaseRefresh(conn: SqlConnection, id: string, owner: string, error: string): Promise<void> {
  await conn.query(
    `UPDATE tool_connections SET refresh_lease_owner = NULL, refresh_lease_until = NULL, error = $3, updated_at = now()
     WHERE id = $1 AND refresh_lease_owner = $2`,
    [id, owner, error],
  );
}

/**
 * The connection's grant is gone at the upstream: it needs authorizing again, its tokens are
 * forgotten. Only from `connected`, and only by the lease's owner when one is named. Answers
 * whether it changed the connection.
 */
export async function markReauthorizationRequired(
  conn: SqlConnection,
  id: string,
  owner: string | null,
  error: string,
): Promise<boolean> {
  const rows = await conn.query(
    `UPDATE tool_connections SET status = 'reauthorization_required', access_token = NULL, refresh_token = NULL,
       token_expires_at = NULL, error = $3, token_version = token_version + 1,
       refresh_lease_owner = NULL, refresh_lease_until = NULL, updated_at = now()
     WHERE id = $1 AND status = 'connected' AND ($2::text IS NULL OR refresh_lease_owner = $2)
     RETURNING id`,
    [id, owner, error],
  );
  return rows.length > 0;
}

/** Revoked by a person: its tokens forgotten, its pending authorizations dropped. */
export async function markRevoked(conn: SqlConnection, id: string): Promise<void> {
  await conn.query(
    `UPDATE tool_connections SET status = 'revoked', access_token = NULL, refresh_token = NULL, token_expires_at = NULL,
       error = NULL, token_version = token_version + 1, refresh_lease_owner = NULL, refresh_lease_until = NULL,
       updated_at = now()
     WHERE id = $1`,
    [id],
  );
  await conn.query('DELETE FROM tool_connection_authorizations WHERE connection_id = $1', [id]);
}

/** Deletes the tool's connections (ahead of the tool itself) and answers them, tokens included, for revocation. */
export function deleteConnectionsOfTool(conn: SqlConnection, toolId: string): Promise<ConnectionRow[]> {
  return conn.query<ConnectionRow>(`DELETE FROM tool_connections WHERE tool_id = $1 RETURNING ${CONNECTION_COLUMNS}`, [
    toolId,
  ]);
}

/** Deletes the user's connections (ahead of the user) and answers them, tokens included, for revocation. */
export function deleteConnectionsOfUser(conn: SqlConnection, userId: string): Promise<ConnectionRow[]> {
  return conn.query<ConnectionRow>(
    `DELETE FROM tool_connections WHERE user_id = $1::uuid RETURNING ${CONNECTION_COLUMNS}`,
    [userId],
  );
}

/** Every registered client of a tool, for revoking its connections' tokens once it is gone. */
export function registeredClientsOfTool(conn: SqlConnection, toolId: string): Promise<RegisteredClientRow[]> {
  return conn.query<RegisteredClientRow>(
    `SELECT tool_id, issuer, redirect_uri, client_id, client_secret, client_secret_expires_at,
            token_endpoint_auth_method, registration
     FROM tool_oauth_clients WHERE tool_id = $1`,
    [toolId],
  );
}

/** When connections were last used, batched: a time only moves forward. */
export async function recordConnectionUses(conn: SqlConnection, ids: string[], times: Date[]): Promise<void> {
  await conn.query(
    `UPDATE tool_connections AS c SET last_used_at = u.used_at
     FROM unnest($1::text[], $2::timestamptz[]) AS u(id, used_at)
     WHERE c.id = u.id AND (c.last_used_at IS NULL OR c.last_used_at < u.used_at)`,
    [ids, times],
  );
}

/** Authorizations past their expiry. */
export async function deleteExpiredAuthorizations(conn: SqlConnection): Promise<void> {
  await conn.query('DELETE FROM tool_connection_authorizations WHERE expires_at < now()');
}

export interface SealedConnectionSecrets {
  table: 'tool_connections' | 'tool_oauth_clients' | 'tool_connection_authorizations';
  /** The row's key: a connection's id, `tool_id` and `issuer` of a client, an authorization's state hash. */
  key: string[];
  values: (string | null)[];
}

/** Every sealed value of connections, registered clients and authorizations, locked until the caller's transaction ends. */
export async function lockConnectionSecrets(conn: SqlConnection): Promise<SealedConnectionSecrets[]> {
  const connections = await conn.query<{ id: string; access_token: string | null; refresh_token: string | null }>(
    `SELECT id, access_token, refresh_token FROM tool_connections
     WHERE access_token IS NOT NULL OR refresh_token IS NOT NULL ORDER BY id FOR UPDATE`,
  );
  const clients = await conn.query<{ tool_id: string; issuer: string; client_secret: string }>(
    `SELECT tool_id, issuer, client_secret FROM tool_oauth_clients WHERE client_secret IS NOT NULL
     ORDER BY tool_id, issuer FOR UPDATE`,
  );
  const authorizations = await conn.query<{ state_hash: string; code_verifier: string }>(
    'SELECT state_hash, code_verifier FROM tool_connection_authorizations ORDER BY state_hash FOR UPDATE',
  );
  return [
    ...connections.map((row) => ({
      table: 'tool_connections' as const,
      key: [row.id],
      values: [row.access_token, row.refresh_token],
    })),
    ...clients.map((row) => ({
      table: 'tool_oauth_clients' as const,
      key: [row.tool_id, row.issuer],
      values: [row.client_secret],
    })),
    ...authorizations.map((row) => ({
      table: 'tool_connection_authorizations' as const,
      key: [row.state_hash],
      values: [row.code_verifier],
    })),
  ];
}

export async function updateConnectionSecrets(conn: SqlConnection, sealed: SealedConnectionSecrets): Promise<void> {
  if (sealed.table === 'tool_connections') {
    await conn.query('UPDATE tool_connections SET access_token = $2, refresh_token = $3 WHERE id = $1', [
      ...sealed.key,
      ...sealed.values,
    ]);
  } else if (sealed.table === 'tool_oauth_clients') {
    await conn.query('UPDATE tool_oauth_clients SET client_secret = $3 WHERE tool_id = $1 AND issuer = $2', [
      ...sealed.key,
      ...sealed.values,
    ]);
  } else {
    await conn.query('UPDATE tool_connection_authorizations SET code_verifier = $2 WHERE state_hash = $1', [
      ...sealed.key,
      ...sealed.values,
    ]);
  }
}
