import { sqlConnectionOf } from '../../db/prisma-sql.js';
import type { SqlConnection, SqlDriver } from '../../db/sql.js';
import type { OrgSso, Prisma } from '../../generated/prisma/client.js';
import type { UserRole } from '../../authz/authz.js';

/** The single sign-on module's statements: org configurations, sign-ins under way, one-time codes. */

type Client = Prisma.TransactionClient;

export type SsoColumns = Omit<OrgSso, 'orgId' | 'createdAt' | 'updatedAt' | 'roleMap'> & {
  roleMap: Prisma.InputJsonValue | typeof Prisma.DbNull;
};

export function findSso(prisma: Client, orgId: string): Promise<OrgSso | null> {
  return prisma.orgSso.findUnique({ where: { orgId } });
}

/** The configuration of the org with `slug`, with its slug; null when there is none. */
export function findSsoBySlug(prisma: Client, slug: string) {
  return prisma.organization.findUnique({ where: { slug }, select: { id: true, slug: true, sso: true } });
}

/** The org's slug, for the sign-in address its configuration shows. */
export async function slugOfOrg(prisma: Client, orgId: string): Promise<string | null> {
  return (await prisma.organization.findUnique({ where: { id: orgId }, select: { slug: true } }))?.slug ?? null;
}

/** Locks the org's configuration row (if any) for a replace, so two concurrent PUTs audit in order. */
export async function lockSso(tx: Client, orgId: string): Promise<OrgSso | null> {
  const rows = await sqlConnectionOf(tx).query<{ org_id: string }>(
    'SELECT org_id FROM org_sso WHERE org_id = $1::uuid FOR UPDATE',
    [orgId],
  );
  return rows.length ? findSso(tx, orgId) : null;
}

export function upsertSso(tx: Client, orgId: string, columns: SsoColumns): Promise<OrgSso> {
  return tx.orgSso.upsert({ where: { orgId }, create: { orgId, ...columns }, update: columns });
}

export async function deleteSso(tx: Client, orgId: string): Promise<OrgSso | null> {
  const [row] = await tx.orgSso.findMany({ where: { orgId } });
  if (!row) return null;
  const { count } = await tx.orgSso.deleteMany({ where: { orgId } });
  return count ? row : null;
}

/** Whether the org refuses password logins of non-admins. */
export async function ssoEnforced(prisma: Client, orgId: string): Promise<boolean> {
  const row = await prisma.orgSso.findUnique({ where: { orgId }, select: { enforce: true } });
  return row?.enforce ?? false;
}

export interface NewSsoLogin {
  stateHash: string;
  orgId: string;
  browserHash: string;
  nonce: string;
  codeVerifier: string;
  ttlSeconds: number;
}

export async function insertSsoLogin(sql: SqlDriver, login: NewSsoLogin): Promise<void> {
  await sql.query(
    `INSERT INTO sso_logins (state_hash, org_id, browser_hash, nonce, code_verifier, expires_at)
     VALUES ($1, $2::uuid, $3, $4, $5, now() + make_interval(secs => $6::int))`,
    [login.stateHash, login.orgId, login.browserHash, login.nonce, login.codeVerifier, login.ttlSeconds],
  );
}

export interface TakenSsoLogin {
  org_id: string;
  browser_hash: string;
  nonce: string;
  code_verifier: string;
  live: boolean;
}

/** Deletes the sign-in and answers it: of two callbacks with one state exactly one gets it. */
export async function takeSsoLogin(sql: SqlDriver, stateHash: string): Promise<TakenSsoLogin | undefined> {
  const [row] = await sql.query<TakenSsoLogin>(
    `DELETE FROM sso_logins WHERE state_hash = $1
     RETURNING org_id, browser_hash, nonce, code_verifier, expires_at > now() AS live`,
    [stateHash],
  );
  return row;
}

export async function insertSsoCode(
  tx: Client,
  code: { codeHash: string; userId: string; orgId: string; ttlSeconds: number },
): Promise<void> {
  await sqlConnectionOf(tx).query(
    `INSERT INTO sso_codes (code_hash, user_id, org_id, expires_at)
     VALUES ($1, $2::uuid, $3::uuid, now() + make_interval(secs => $4::int))`,
    [code.codeHash, code.userId, code.orgId, code.ttlSeconds],
  );
}

/** Deletes the code and answers its user (null when gone since): used once, whoever presents it first. */
export async function takeSsoCode(tx: Client, codeHash: string) {
  const [row] = await sqlConnectionOf(tx).query<{
    live: boolean;
    id: string | null;
    orgId: string;
    email: string;
    role: UserRole;
    createdAt: Date;
  }>(
    `WITH taken AS (
       DELETE FROM sso_codes WHERE code_hash = $1 RETURNING user_id, expires_at > now() AS live
     )
     SELECT t.live, u.id, u.org_id AS "orgId", u.email, u.role, u.created_at AS "createdAt"
     FROM taken t LEFT JOIN users u ON u.id = t.user_id`,
    [codeHash],
  );
  if (!row) return undefined;
  const { live, id, ...user } = row;
  return { live, user: id ? { id, ...user } : null };
}

/** Sign-ins and codes past their expiry. */
export async function deleteExpiredSsoHandoffs(sql: SqlDriver): Promise<void> {
  await sql.query('DELETE FROM sso_logins WHERE expires_at < now()');
  await sql.query('DELETE FROM sso_codes WHERE expires_at < now()');
}

/** Every org's client secret as stored, for `agent-gateway reencrypt`. */
export function lockSsoSecrets(conn: SqlConnection) {
  return conn.query<{ org_id: string; client_secret: string }>('SELECT org_id, client_secret FROM org_sso FOR UPDATE');
}

export async function updateSsoSecret(conn: SqlConnection, orgId: string, secret: string): Promise<void> {
  await conn.query('UPDATE org_sso SET client_secret = $2 WHERE org_id = $1::uuid', [orgId, secret]);
}
