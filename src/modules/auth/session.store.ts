import { plannedOnce, type SqlConnection } from '../../db/sql.js';
import type { UserRole } from '../../authz/authz.js';

/** The session module's SQL: session families, their refresh tokens, and revoked access tokens. */

/** How a session family began: a password login or a single sign-on exchange. */
export type SignInMethod = 'password' | 'sso';

/**
 * The family `f` of user `u` began with a password, and the user's org now signs in with single
 * sign-on, which only admins (break-glass) may bypass (docs/decisions/0061-operator-single-sign-on.md).
 * Read at every use of the family's tokens, so turning `enforce` on or demoting an admin counts at once.
 */
const SSO_REQUIRED_SQL = `(f.signed_in_with = 'password' AND u.role <> 'admin'
  AND EXISTS (SELECT 1 FROM org_sso s WHERE s.org_id = u.org_id AND s.enforce))`;

export interface NewSessionFamily {
  familyId: string;
  userId: string;
  orgId: string;
  refreshTokenHash: string;
  refreshTokenTtlSeconds: number;
  signedInWith: SignInMethod;
}

/** The family and its first refresh token in one statement; times from the database clock. */
export async function insertFamilyWithRefreshToken(sql: SqlConnection, family: NewSessionFamily): Promise<void> {
  await sql.query(
    `WITH family AS (
       INSERT INTO session_families (id, user_id, org_id, expires_at, signed_in_with)
       VALUES ($1, $2::uuid, $3::uuid, now() + make_interval(secs => $5::int), $6)
       RETURNING id, user_id, org_id, expires_at
     )
     INSERT INTO refresh_tokens (token_hash, family_id, user_id, org_id, expires_at)
     SELECT $4, id, user_id, org_id, expires_at FROM family`,
    [
      family.familyId,
      family.userId,
      family.orgId,
      family.refreshTokenHash,
      family.refreshTokenTtlSeconds,
      family.signedInWith,
    ],
  );
}

/** What the bearer check reads of an access token's user, token and family. */
export interface AccessTokenState {
  role: UserRole;
  email: string;
  org_id: string;
  token_revoked: boolean;
  family_revoked: boolean;
  /** Why the family was revoked (null when it is not, or is gone). */
  revoked_reason: string | null;
  /** A password session of a non-admin in an org that enforces single sign-on. */
  sso_required: boolean;
  /**
   * Where the org's operator count stands once the batch's counted requests were added, and its
   * limit; null when the key counted nothing or its token did not check out.
   */
  operator_count: number | null;
  operator_limit: number | null;
  /**
   * The org's data version as this statement read it (org_data_versions, set anew by triggers on
   * the tables cached answers read; 'initial' before the first write): an answer kept for it is current.
   */
  data_version: string;
}

/**
 * A key of the bearer check whose requests count against its org's operator limit: it asked to be
 * counted and its token checked out. Both the upsert and the answer read it, so that a refused
 * token of an org beside a counted one is neither counted nor told the org's count.
 */
const COUNTED_SQL = '(s.counted > 0 AND NOT s.token_revoked AND NOT s.family_revoked AND NOT s.sso_required)';

/** An access token as the bearer check looks it up: its user, its id and its family. */
export interface AccessTokenKey {
  userId: string;
  jti: string;
  familyId: string;
  /** Operator requests to count against the org's limit if the token checks out (0: none). */
  counted: number;
}

/**
 * One round trip for several tokens: is each revoked, is its family revoked (or gone), does its
 * user still exist (with which role), and does the org now require single sign-on of it? In the
 * order of `keys`; undefined where the user is gone. Every user id must be a UUID.
 *
 * The same statement counts the operator requests of the keys whose token checks out in their
 * org's window starting `windowStart` (`operator_rate_counters`, decision 0074): an operator's
 * request costs one round trip for both, and a refused token counts nothing. Orgs' rows are
 * taken in order, so two batches cannot deadlock on them.
 */
export async function accessTokenStates(
  sql: SqlConnection,
  keys: readonly AccessTokenKey[],
  windowStart: Date,
): Promise<(AccessTokenState | undefined)[]> {
  const rows = await sql.query<AccessTokenState & { ord: string }>(
    `WITH states AS (
       SELECT k.ord, k.counted, u.role, u.email, u.org_id,
              COALESCE((SELECT v.version::text FROM org_data_versions v WHERE v.org_id = u.org_id), 'initial') AS data_version,
              EXISTS (SELECT 1 FROM revoked_tokens WHERE jti = k.jti) AS token_revoked,
              f.id IS NULL OR f.revoked_at IS NOT NULL AS family_revoked, f.revoked_reason,
              COALESCE(${SSO_REQUIRED_SQL}, false) AS sso_required
       FROM unnest($1::uuid[], $2::text[], $3::text[], $4::int[]) WITH ORDINALITY AS k(user_id, jti, family_id, counted, ord)
       JOIN users u ON u.id = k.user_id
       LEFT JOIN session_families f ON f.id = k.family_id AND f.user_id = u.id
     ),
     counts AS (
       INSERT INTO operator_rate_counters AS c (org_id, window_start, count)
       SELECT s.org_id, $5, sum(s.counted) FROM states s
       WHERE ${COUNTED_SQL}
       GROUP BY s.org_id ORDER BY s.org_id
       ON CONFLICT (org_id, window_start) DO UPDATE SET count = c.count + excluded.count
       RETURNING c.org_id, c.count,
                 (SELECT operator_rate_limit_per_minute FROM organizations o WHERE o.id = c.org_id) AS "limit"
     )
     SELECT s.ord::text AS ord, s.role, s.email, s.org_id, s.data_version, s.token_revoked, s.family_revoked, s.revoked_reason,
            s.sso_required, CASE WHEN ${COUNTED_SQL} THEN c.count END AS operator_count,
            CASE WHEN ${COUNTED_SQL} THEN c."limit" END AS operator_limit
     FROM states s LEFT JOIN counts c ON c.org_id = s.org_id`,
    [
      ...plannedOnce([
        keys.map((k) => k.userId),
        keys.map((k) => k.jti),
        keys.map((k) => k.familyId),
        keys.map((k) => k.counted),
      ]),
      windowStart,
    ],
    'access_token_states',
  );
  const byOrdinal = new Map(rows.map(({ ord, ...state }) => [Number(ord), state]));
  return keys.map((_, i) => byOrdinal.get(i + 1));
}

/** Puts an access token on the revocation list until it would have expired anyway. */
export async function insertRevokedToken(tx: SqlConnection, jti: string, expiresAt: Date): Promise<void> {
  await tx.query('INSERT INTO revoked_tokens (jti, expires_at) VALUES ($1, $2) ON CONFLICT (jti) DO NOTHING', [
    jti,
    expiresAt,
  ]);
}

/** True when this call revoked the family (false: it was already revoked or is gone). */
export async function revokeFamilyRow(sql: SqlConnection, familyId: string, reason: string): Promise<boolean> {
  const rows = await sql.query(
    'UPDATE session_families SET revoked_at = now(), revoked_reason = $2 WHERE id = $1 AND revoked_at IS NULL RETURNING id',
    [familyId, reason],
  );
  return rows.length > 0;
}

/**
 * Revokes the unrevoked password sessions of the org's non-admins (the org has just turned
 * `enforce` on): refused from now on by the rule above, they stay ended if it is turned off again.
 * How many it revoked.
 */
export async function revokePasswordFamiliesOfNonAdmins(sql: SqlConnection, orgId: string, reason: string) {
  const rows = await sql.query(
    `UPDATE session_families f SET revoked_at = now(), revoked_reason = $2
     FROM users u
     WHERE f.org_id = $1::uuid AND u.id = f.user_id AND f.signed_in_with = 'password' AND u.role <> 'admin'
       AND f.revoked_at IS NULL
     RETURNING f.id`,
    [orgId, reason],
  );
  return rows.length;
}

/** Keeps the family at least until `until` (never shortens it). */
export async function extendFamily(tx: SqlConnection, familyId: string, until: Date): Promise<void> {
  await tx.query('UPDATE session_families SET expires_at = GREATEST(expires_at, $2) WHERE id = $1', [familyId, until]);
}

/** The presented refresh token's family and user, once claimed. */
export interface ClaimedRefreshToken {
  family_id: string;
  user_id: string;
  org_id: string;
  email: string;
  role: UserRole;
}

/**
 * Marks the refresh token used and names its successor, only while it is unused, unexpired, of an
 * unrevoked family, of a user that still exists and not of a session single sign-on now rules
 * out: of two concurrent claims exactly one wins.
 */
export async function claimRefreshToken(
  tx: SqlConnection,
  tokenHash: string,
  successorHash: string,
): Promise<ClaimedRefreshToken | undefined> {
  const [row] = await tx.query<ClaimedRefreshToken>(
    `UPDATE refresh_tokens r SET used_at = now(), replaced_by = $2
     FROM session_families f, users u
     WHERE r.token_hash = $1 AND r.used_at IS NULL AND r.expires_at > now()
       AND f.id = r.family_id AND f.revoked_at IS NULL
       AND u.id = r.user_id AND u.org_id = r.org_id AND NOT ${SSO_REQUIRED_SQL}
     RETURNING r.family_id, u.id AS user_id, u.org_id, u.email, u.role`,
    [tokenHash, successorHash],
  );
  return row;
}

/** The successor lives `ttlSeconds` from now; its family at least as long (never shortened). */
export async function insertSuccessorRefreshToken(
  tx: SqlConnection,
  tokenHash: string,
  claimed: Pick<ClaimedRefreshToken, 'family_id' | 'user_id' | 'org_id'>,
  ttlSeconds: number,
): Promise<void> {
  await tx.query(
    `WITH successor AS (
       INSERT INTO refresh_tokens (token_hash, family_id, user_id, org_id, expires_at)
       VALUES ($1, $2, $3::uuid, $4::uuid, now() + make_interval(secs => $5::int))
       RETURNING family_id, expires_at
     )
     UPDATE session_families f SET expires_at = GREATEST(f.expires_at, s.expires_at)
     FROM successor s WHERE f.id = s.family_id`,
    [tokenHash, claimed.family_id, claimed.user_id, claimed.org_id, ttlSeconds],
  );
}

/** Why a refresh token was not claimed: whether it was used, expired, or its family revoked. */
export interface RefreshTokenState {
  family_id: string;
  user_id: string;
  used: boolean;
  expired: boolean;
  family_revoked: boolean;
  revoked_reason: string | null;
  sso_required: boolean;
}

export async function refreshTokenState(sql: SqlConnection, tokenHash: string): Promise<RefreshTokenState | undefined> {
  const [row] = await sql.query<RefreshTokenState>(
    `SELECT r.family_id, r.user_id, r.used_at IS NOT NULL AS used, r.expires_at <= now() AS expired,
            f.revoked_at IS NOT NULL AS family_revoked, f.revoked_reason, COALESCE(${SSO_REQUIRED_SQL}, false) AS sso_required
     FROM refresh_tokens r JOIN session_families f ON f.id = r.family_id
     LEFT JOIN users u ON u.id = r.user_id
     WHERE r.token_hash = $1`,
    [tokenHash],
  );
  return row;
}

/** Refresh tokens past their expiry, then families past theirs (their refresh tokens go with them). */
export async function deleteExpiredRefreshTokensAndFamilies(sql: SqlConnection): Promise<void> {
  await sql.query('DELETE FROM refresh_tokens WHERE expires_at < now()');
  await sql.query('DELETE FROM session_families WHERE expires_at < now()');
}

/** Revocations of access tokens that have expired anyway. */
export async function deleteExpiredRevokedTokens(sql: SqlConnection): Promise<void> {
  await sql.query('DELETE FROM revoked_tokens WHERE expires_at < now()');
}
