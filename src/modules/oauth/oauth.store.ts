import type { SqlConnection } from '../../db/sql.js';
import type { OAuthGrant, Prisma, PrismaClient } from '../../generated/prisma/client.js';
import type { OAuthGrantSnapshot } from '../audit/audit-events.js';
import type { ClientRegistration } from './oauth-client.js';

/** The OAuth module's raw SQL. */

export interface ClientRow {
  client_id: string;
  metadata: ClientRegistration;
  created_at: Date;
}

export async function insertClient(
  sql: SqlConnection,
  clientId: string,
  registration: ClientRegistration,
  registeredFrom: string,
): Promise<ClientRow> {
  const [row] = await sql.query<ClientRow>(
    `INSERT INTO oauth_clients (client_id, redirect_uris, metadata, registered_from)
     VALUES ($1, $2::text[], $3::jsonb, $4)
     RETURNING client_id, metadata, created_at`,
    [clientId, registration.redirect_uris, JSON.stringify(registration), registeredFrom],
  );
  return row;
}

/** A client that has not expired: used within `unusedDays`. */
export async function findClient(
  sql: SqlConnection,
  clientId: string,
  unusedDays: number,
): Promise<ClientRow | undefined> {
  const [row] = await sql.query<ClientRow>(
    `SELECT client_id, metadata, created_at FROM oauth_clients
     WHERE client_id = $1 AND last_used_at > now() - make_interval(days => $2)`,
    [clientId, unusedDays],
  );
  return row;
}

/** Marks the client used, at most once an hour (a token refresh every few minutes writes nothing). */
export async function touchClient(sql: SqlConnection, clientId: string): Promise<void> {
  await sql.query(
    `UPDATE oauth_clients SET last_used_at = now() WHERE client_id = $1 AND last_used_at < now() - interval '1 hour'`,
    [clientId],
  );
}

/** Deletes the registrations unused for `unusedDays`; how many. */
export async function deleteExpiredClients(sql: SqlConnection, unusedDays: number): Promise<number> {
  const rows = await sql.query(
    `DELETE FROM oauth_clients WHERE last_used_at <= now() - make_interval(days => $1) RETURNING client_id`,
    [unusedDays],
  );
  return rows.length;
}

// ---- Grants, codes and refresh tokens (docs/decisions/0047-mcp-oauth.md) ----

/** What the gateway and the token endpoint need of a grant. */
export interface GrantRow {
  id: string;
  org_id: string;
  svc_id: string;
  client_id: string;
  client_name: string | null;
  redirect_uri: string;
  scope: string;
  /** The user who allowed the grant; null once that user is removed. */
  user_id: string | null;
  revoked: boolean;
}

const grantColumns = `g.id, g.org_id::text AS org_id, g.svc_id, g.client_id, g.client_name, g.redirect_uri, g.scope, g.approved_by_user_id::text AS user_id, g.revoked_at IS NOT NULL AS revoked`;

export async function findGrant(sql: SqlConnection, grantId: string): Promise<GrantRow | undefined> {
  const [row] = await sql.query<GrantRow>(
    `SELECT ${grantColumns} FROM oauth_grants g WHERE g.id = $1`,
    [grantId],
    'oauth_find_grant',
  );
  return row;
}

/** A code's grant and what the exchange checks, claimed: of two exchanges of one code exactly one gets it. */
export interface ClaimedCode extends GrantRow {
  code_redirect_uri: string;
  code_challenge: string;
}

export async function claimCode(sql: SqlConnection, codeHash: string): Promise<ClaimedCode | undefined> {
  const [row] = await sql.query<ClaimedCode>(
    `UPDATE oauth_codes c SET used_at = now()
     FROM oauth_grants g
     WHERE c.code_hash = $1 AND c.used_at IS NULL AND c.expires_at > now() AND g.id = c.grant_id AND g.revoked_at IS NULL
     RETURNING ${grantColumns}, c.redirect_uri AS code_redirect_uri, c.code_challenge`,
    [codeHash],
  );
  return row;
}

/** Why a code or refresh token was not claimed: which grant it belongs to, and whether it was used, expired or revoked. */
export interface SecretState {
  grant_id: string;
  org_id: string;
  used: boolean;
  expired: boolean;
  revoked: boolean;
}

export async function codeState(sql: SqlConnection, codeHash: string): Promise<SecretState | undefined> {
  const [row] = await sql.query<SecretState>(
    `SELECT c.grant_id, g.org_id::text AS org_id, c.used_at IS NOT NULL AS used, c.expires_at <= now() AS expired, g.revoked_at IS NOT NULL AS revoked
     FROM oauth_codes c JOIN oauth_grants g ON g.id = c.grant_id WHERE c.code_hash = $1`,
    [codeHash],
  );
  return row;
}

export async function insertRefreshToken(
  sql: SqlConnection,
  tokenHash: string,
  grantId: string,
  ttlSeconds: number,
): Promise<void> {
  await sql.query(
    `INSERT INTO oauth_refresh_tokens (token_hash, grant_id, expires_at) VALUES ($1, $2, now() + make_interval(secs => $3::int))`,
    [tokenHash, grantId, ttlSeconds],
  );
}

/** Claims an unused, unexpired refresh token of a standing grant; of two rotations of one token exactly one gets it. */
export async function claimRefreshToken(sql: SqlConnection, tokenHash: string): Promise<GrantRow | undefined> {
  const [row] = await sql.query<GrantRow>(
    `UPDATE oauth_refresh_tokens r SET used_at = now()
     FROM oauth_grants g
     WHERE r.token_hash = $1 AND r.used_at IS NULL AND r.expires_at > now() AND g.id = r.grant_id AND g.revoked_at IS NULL
     RETURNING ${grantColumns}`,
    [tokenHash],
  );
  return row;
}

export async function refreshTokenState(sql: SqlConnection, tokenHash: string): Promise<SecretState | undefined> {
  const [row] = await sql.query<SecretState>(
    `SELECT r.grant_id, g.org_id::text AS org_id, r.used_at IS NOT NULL AS used, r.expires_at <= now() AS expired, g.revoked_at IS NOT NULL AS revoked
     FROM oauth_refresh_tokens r JOIN oauth_grants g ON g.id = r.grant_id WHERE r.token_hash = $1`,
    [tokenHash],
  );
  return row;
}

/** Marks the grant used, at most once a minute (several processes together write about that often). */
export async function touchGrant(sql: SqlConnection, grantId: string): Promise<void> {
  await sql.query(
    `UPDATE oauth_grants SET last_used_at = now() WHERE id = $1 AND (last_used_at IS NULL OR last_used_at < now() - interval '1 minute')`,
    [grantId],
  );
}

/** Deletes codes and refresh tokens that can no longer be presented (a day after expiry: reuse is told apart until then). */
export async function deleteExpiredSecrets(sql: SqlConnection): Promise<void> {
  await sql.query(`DELETE FROM oauth_codes WHERE expires_at < now() - interval '1 day'`);
  await sql.query(`DELETE FROM oauth_refresh_tokens WHERE expires_at < now() - interval '1 day'`);
}

// ---- Grant writes, audited by the service in the same transaction ----

type Tx = Prisma.TransactionClient;

export interface NewGrant {
  id: string;
  orgId: string;
  svcId: string;
  clientId: string;
  clientName: string | null;
  redirectUri: string;
  scope: string;
  approvedBy: string;
  approvedByUserId: string | null;
}

/** The grant and its authorization code (valid `codeTtlSeconds`), in the caller's transaction. */
export async function insertGrantWithCode(
  tx: Tx,
  grant: NewGrant,
  code: { hash: string; challenge: string; ttlSeconds: number },
): Promise<OAuthGrant> {
  const created = await tx.oAuthGrant.create({ data: grant });
  await tx.oAuthCode.create({
    data: {
      codeHash: code.hash,
      grantId: grant.id,
      redirectUri: grant.redirectUri,
      codeChallenge: code.challenge,
      expiresAt: new Date(created.createdAt.getTime() + code.ttlSeconds * 1000),
    },
  });
  return created;
}

/** Whether the org has allowed this client before (any grant, standing or revoked). */
export async function orgKnowsClient(tx: Tx, orgId: string, clientId: string): Promise<boolean> {
  return (await tx.oAuthGrant.count({ where: { orgId, clientId }, take: 1 })) > 0;
}

/** A grant as it was when revoked: its id, and what its audit event records. */
export type RevokedGrant = OAuthGrantSnapshot & { id: string };

/**
 * Revokes the standing grants that `where` selects (one grant, or every grant of an agent) and
 * returns them as they were: one statement, so of two concurrent revocations of a grant exactly
 * one returns it.
 */
export async function revokeGrants(
  tx: Tx,
  where: { grantId: string; orgId?: string; svcId?: string } | { orgId: string; svcId: string },
  revokedBy: string,
  reason: string,
): Promise<RevokedGrant[]> {
  const grantId = 'grantId' in where ? where.grantId : null;
  const orgId = where.orgId ?? null;
  const svcId = where.svcId ?? null;
  return tx.$queryRaw<RevokedGrant[]>`
    UPDATE oauth_grants SET revoked_at = now(), revoked_by = ${revokedBy}, revoked_reason = ${reason}
    WHERE revoked_at IS NULL
      AND (${grantId}::text IS NULL OR id = ${grantId}::text)
      AND (${orgId}::uuid IS NULL OR org_id = ${orgId}::uuid)
      AND (${svcId}::text IS NULL OR svc_id = ${svcId}::text)
    RETURNING id, svc_id, client_id, client_name, redirect_uri, scope, approved_by`;
}

/** The agent's standing grants, newest first. */
export async function standingGrants(prisma: PrismaClient, orgId: string, svcId: string): Promise<OAuthGrant[]> {
  return prisma.oAuthGrant.findMany({
    where: { orgId, svcId, revokedAt: null },
    orderBy: [{ createdAt: 'desc' }, { id: 'asc' }],
  });
}

/** The grant a refresh token belongs to, whatever the token's state (RFC 7009 revokes with any of them). */
export async function grantOfRefreshToken(sql: SqlConnection, tokenHash: string): Promise<GrantRow | undefined> {
  const [row] = await sql.query<GrantRow>(
    `SELECT ${grantColumns} FROM oauth_refresh_tokens r JOIN oauth_grants g ON g.id = r.grant_id WHERE r.token_hash = $1`,
    [tokenHash],
  );
  return row;
}
