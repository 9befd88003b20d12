import { randomBytes } from 'node:crypto';
import { SignJWT, decodeProtectedHeader, jwtVerify, errors as joseErrors, type JWTPayload } from 'jose';
import type { Deps } from '../../deps.js';
import type { SqlConnection } from '../../db/sql.js';
import { AppError } from '../../errors.js';
import { countAttempt } from '../../lib/attempt-throttle.js';
import { fixedWindow, OPERATOR_WINDOW_SECONDS, reset, unhit, type Window } from '../../lib/rate-counter.js';
import { sha256Hex } from '../../lib/hash.js';
import type { UserRole, UserPrincipal } from '../../authz/authz.js';
import { createPasswords } from './password.js';
import { isUuid, randomId } from '../../lib/ids.js';
import { keyBatcher } from '../../lib/key-batcher.js';
import type { UserService } from '../user/user.service.js';
import {
  type AccessTokenKey,
  type AccessTokenState,
  accessTokenStates,
  claimRefreshToken,
  deleteExpiredRefreshTokensAndFamilies,
  deleteExpiredRevokedTokens,
  extendFamily,
  insertFamilyWithRefreshToken,
  insertRevokedToken,
  insertSuccessorRefreshToken,
  refreshTokenState,
  revokeFamilyRow,
  revokePasswordFamiliesOfNonAdmins,
  type SignInMethod,
} from './session.store.js';

/**
 * Operator sessions (docs/decisions/0011-sign-up-and-sessions.md, docs/decisions/0012-rotating-refresh-tokens.md).
 *
 * A login starts a session *family*. Access tokens are EdDSA-signed JWTs with their own `typ` and
 * audience (so a session token is never accepted where a capability token is expected and vice
 * versa) that name their family in `sid`. Refresh tokens are opaque (`agr_` + 32 random bytes),
 * stored only as SHA-256, valid 30 days and used once: rotation marks the presented one used and
 * hands out its successor in the same family. Following RFC 9700 §4.14.2, presenting a used refresh
 * token again means two parties hold it, and which is the legitimate one cannot be told, so the
 * whole family is revoked: its refresh tokens and its access tokens. Revocation lives in the
 * database, so it holds across every process on it; the bearer check of every request reads it in
 * its one query.
 */

export const SESSION_TOKEN_TYPE = 'session+jwt';
export const SESSION_AUDIENCE = 'agent-gateway:session';
const ISSUER = 'agent-gateway';

export const REFRESH_TOKEN_PREFIX = 'agr_';
/** `agr_` + base64url (no padding) of 32 bytes: anything else was not issued here and is refused unread. */
const refreshTokenPattern = /^agr_[A-Za-z0-9_-]{43}$/;

/** Why a family was revoked (stored in `session_families.revoked_reason`). */
export type FamilyRevocationReason = 'logout' | 'refresh_token_reused' | 'sso_enforced';

export interface SessionUser {
  id: string;
  orgId: string;
  email: string;
  role: UserRole;
}

/** A bearer access token as `/api/v1/auth/login` and `/api/v1/auth/refresh` answer it. */
export interface IssuedSession {
  access_token: string;
  token_type: 'bearer';
  expires_in: number;
}

interface AccessToken extends IssuedSession {
  /** When the access token expires (its `exp`). */
  expires: Date;
}

/** A new session family: its first access token and its first refresh token. */
export interface StartedSession extends AccessToken {
  refresh_token: string;
  familyId: string;
}

/** What a rotation answers (`refresh_session`): a new access token and the refresh token that replaces the presented one. */
export interface RotatedSession {
  token: string;
  refresh_token: string;
  expires: Date;
}

/** Why a password session of a non-admin stops working once the org enforces single sign-on. */
const SSO_REQUIRED = 'This organization now signs in with single sign-on: sign in again through it';

/** How a revoked session's refusal ends: why it was revoked (`session_families.revoked_reason`). */
const SESSION_ENDED: Record<FamilyRevocationReason, string> = {
  logout: 'has ended (logout)',
  refresh_token_reused: 'has been revoked: one of its refresh tokens was used twice',
  sso_enforced: 'ended when the organization turned single sign-on on; sign in again through it',
};
const endedBecause = (reason: string | null) => SESSION_ENDED[reason as FamilyRevocationReason] ?? 'has been revoked';

/** Where the org's operator count stands once a request was counted, its limit, and the window counted in. */
export interface OperatorCount {
  count: number;
  limit: number | null;
  window: Window;
}

/** A bearer token that checked out: its principal, and its org's operator count when the request was counted. */
export interface VerifiedSession {
  principal: UserPrincipal;
  operatorCount?: OperatorCount;
}

/** What the batched check answers a key: the token's state (undefined: its user is gone), and its count. */
interface CheckedToken {
  state: AccessTokenState | undefined;
  operatorCount?: OperatorCount;
}

const invalidToken = (message = 'The bearer token is invalid or expired') => new AppError('INVALID_TOKEN', message);

/** A fresh refresh token and the hash it is stored under. */
function newRefreshToken(): { token: string; hash: string } {
  // Straight from the CSPRNG rather than the id pool (src/lib/ids.ts): a secret should not sit in a
  // shared buffer that outlives the request.
  const token = `${REFRESH_TOKEN_PREFIX}${randomBytes(32).toString('base64url')}`;
  return { token, hash: sha256Hex(token) };
}

interface Collaborators {
  /** Login reads the user by email through the user module. */
  users: Pick<UserService, 'findByEmail'>;
  /** Why the org refuses this user a password login (single sign-on enforced), or undefined. */
  passwordLoginRefusal(user: { orgId: string; role: UserRole }): Promise<string | undefined>;
}

export function createSessionService(
  { env, db, keys, logger, telemetry }: Deps,
  { users, passwordLoginRefusal }: Collaborators,
) {
  const passwords = createPasswords(telemetry);
  /** Login and refresh attempts are counted in the same fixed window (LOGIN_WINDOW_SECONDS). */
  const attemptPeriod = `${env.loginWindowSeconds / 60}m`;
  /** Signs an access token of `familyId`; no database write. */
  async function signAccessToken(
    user: SessionUser,
    familyId: string,
    ttlSeconds = env.sessionTtlSeconds,
  ): Promise<AccessToken> {
    const key = await keys.activeKey('session');
    const now = Math.floor(Date.now() / 1000);
    const token = await new SignJWT({ org_id: user.orgId, role: user.role, email: user.email, sid: familyId })
      .setProtectedHeader({ alg: 'EdDSA', typ: SESSION_TOKEN_TYPE, kid: key.kid })
      .setIssuer(ISSUER)
      .setAudience(SESSION_AUDIENCE)
      .setSubject(user.id)
      .setJti(randomId('ses', 16))
      .setIssuedAt(now)
      .setExpirationTime(now + ttlSeconds)
      .sign(key.privateKey);
    return {
      access_token: token,
      token_type: 'bearer',
      expires_in: ttlSeconds,
      expires: new Date((now + ttlSeconds) * 1000),
    };
  }

  /**
   * Starts a session family for `user`: the family and its first refresh token in one statement,
   * then an access token in it. Times come from the database clock, which every process shares.
   */
  async function startSession(
    user: SessionUser,
    signedInWith: SignInMethod,
    ttlSeconds = env.sessionTtlSeconds,
  ): Promise<StartedSession> {
    const familyId = randomId('sfm', 16);
    const refresh = newRefreshToken();
    await insertFamilyWithRefreshToken(db.sql, {
      familyId,
      userId: user.id,
      orgId: user.orgId,
      refreshTokenHash: refresh.hash,
      refreshTokenTtlSeconds: env.refreshTokenTtlSeconds,
      signedInWith,
    });
    const access = await signAccessToken(user, familyId, ttlSeconds);
    return { ...access, refresh_token: refresh.token, familyId };
  }

  /**
   * Tokens whose signature and claims checked out, so that a client sending the same bearer token
   * again pays for no second Ed25519 verification; its expiry and revocation are still checked on
   * every request. Dropped whole when full: a bound on memory, not an eviction policy.
   */
  const verifiedTokens = new Map<string, JWTPayload>();
  const VERIFIED_TOKENS_MAX = 10_000;

  async function verifiedClaims(token: string): Promise<JWTPayload> {
    const cached = verifiedTokens.get(token);
    if (cached) {
      if (cached.exp! * 1000 <= Date.now()) throw invalidToken('The bearer token has expired');
      return cached;
    }
    let kid: string | undefined;
    try {
      kid = decodeProtectedHeader(token).kid;
    } catch {
      throw invalidToken();
    }
    const key = kid ? await keys.byId(kid) : undefined;
    if (key?.purpose !== 'session') throw invalidToken();
    let payload: JWTPayload;
    try {
      ({ payload } = await jwtVerify(token, key.publicKey, {
        algorithms: ['EdDSA'],
        typ: SESSION_TOKEN_TYPE,
        audience: SESSION_AUDIENCE,
        issuer: ISSUER,
        // Every session token names its family; one without (issued before families existed) could
        // not be revoked with it, so it is refused rather than trusted.
        requiredClaims: ['sub', 'jti', 'exp', 'sid'],
      }));
    } catch (error) {
      if (error instanceof joseErrors.JWTExpired) throw invalidToken('The bearer token has expired');
      throw invalidToken();
    }
    if (verifiedTokens.size >= VERIFIED_TOKENS_MAX) verifiedTokens.clear();
    verifiedTokens.set(token, payload);
    return payload;
  }

  /**
   * The bearer check's read of revocations, family and role, on every request, and the count of
   * the operator requests among them (`counted`). Checks that arrive while one is in flight go
   * together in the next statement: under load a read per round trip rather than one per request,
   * and each still reads after its request arrived. A counted check gets its own place among the
   * batch's counts of its org, so a limit checked against it stays exact.
   */
  const checkAccessToken = keyBatcher<AccessTokenKey, CheckedToken>(async (_, batch) => {
    const window = fixedWindow(OPERATOR_WINDOW_SECONDS);
    const states = await accessTokenStates(
      db.sql,
      batch.map((queued) => queued.item),
      window.start,
    );
    // The batch's counted requests of each org, so far: the org's count before them is its total less all of them.
    const countedOfOrg = new Map<string, number>();
    states.forEach((state, i) => {
      if (state?.operator_count != null) {
        countedOfOrg.set(state.org_id, (countedOfOrg.get(state.org_id) ?? 0) + batch[i].item.counted);
      }
    });
    const placed = new Map<string, number>();
    batch.forEach((queued, i) => {
      const state = states[i];
      if (state?.operator_count == null) return queued.resolve({ state });
      const before = state.operator_count - countedOfOrg.get(state.org_id)!;
      const count = before + (placed.get(state.org_id) ?? 0) + queued.item.counted;
      placed.set(state.org_id, count - before);
      queued.resolve({ state, operatorCount: { count, limit: state.operator_limit, window } });
    });
  });

  /**
   * Checks signature, type, audience and expiry, then revocation (token and family) and the user's
   * current role; with `counted`, counts that many operator requests of the org once the token
   * checked out, in the same statement.
   */
  async function check(token: string, counted: number): Promise<VerifiedSession> {
    const payload = await verifiedClaims(token);
    if (typeof payload.sid !== 'string') throw invalidToken();
    // A family is deleted only after every token of it expired, so a missing family is as good as
    // a revoked one.
    if (!isUuid(payload.sub ?? '') || typeof payload.jti !== 'string') throw invalidToken();
    const { state: row, operatorCount } = await checkAccessToken('tokens', {
      userId: payload.sub!,
      jti: payload.jti,
      familyId: payload.sid,
      counted,
    });
    if (!row || row.token_revoked) throw invalidToken('The bearer token has been revoked');
    if (row.sso_required) throw invalidToken(SSO_REQUIRED);
    if (row.family_revoked) throw invalidToken(`The session of this bearer token ${endedBecause(row.revoked_reason)}`);
    const principal: UserPrincipal = {
      type: 'user',
      userId: payload.sub!,
      orgId: row.org_id,
      email: row.email,
      role: row.role,
      tokenId: payload.jti!,
      tokenExpiresAt: new Date(payload.exp! * 1000),
      sessionFamilyId: payload.sid,
      orgDataVersion: row.data_version,
    };
    return { principal, operatorCount };
  }

  /** The bearer token's principal (checkAccessToken's checks), counting nothing. */
  const verify = async (token: string): Promise<UserPrincipal> => (await check(token, 0)).principal;

  /**
   * The bearer token's principal and where its org's operator count stands once this request was
   * counted, for the org's rate limit to judge (src/modules/org/operator-rate-limit.ts).
   */
  const verifyCounted = (token: string): Promise<Required<VerifiedSession>> =>
    check(token, 1) as Promise<Required<VerifiedSession>>;

  /** Puts the access token on the revocation list, kept until it would have expired anyway. */
  const revokeAccessToken = (tx: SqlConnection, principal: UserPrincipal) =>
    insertRevokedToken(tx, principal.tokenId, principal.tokenExpiresAt);

  /**
   * Revokes a whole family: its refresh tokens stop rotating and its access tokens stop
   * authenticating. True when this call revoked it (false: it was already revoked or is gone).
   */
  async function revokeFamily(
    familyId: string,
    reason: FamilyRevocationReason,
    tx: SqlConnection = db.sql,
  ): Promise<boolean> {
    return revokeFamilyRow(tx, familyId, reason);
  }

  /** Logout: the presented access token and its whole family (every refresh and access token of that login). */
  async function logout(principal: UserPrincipal): Promise<void> {
    await db.sql.transaction(async (tx) => {
      await revokeAccessToken(tx, principal);
      await revokeFamily(principal.sessionFamilyId, 'logout', tx);
    });
  }

  /**
   * A new access token for the same user in the same family (the bearer `refresh`); the presented
   * one stops working. The family is kept at least as long as the new token lives.
   */
  async function refresh(principal: UserPrincipal): Promise<IssuedSession> {
    const user = { id: principal.userId, orgId: principal.orgId, email: principal.email, role: principal.role };
    const access = await signAccessToken(user, principal.sessionFamilyId);
    await db.sql.transaction(async (tx) => {
      await revokeAccessToken(tx, principal);
      await extendFamily(tx, principal.sessionFamilyId, access.expires);
    });
    return { access_token: access.access_token, token_type: access.token_type, expires_in: access.expires_in };
  }

  /**
   * Exchanges a refresh token for a new access token and a new refresh token of the same family.
   * One conditional UPDATE claims the presented token (only while unused, unexpired, of an
   * unrevoked family and of a user that still exists) and its successor is inserted in the same
   * transaction: of two concurrent rotations with one token exactly one wins. Any refusal is
   * 401 INVALID_TOKEN; a refusal because the token was already used revokes the family.
   *
   * Attempts are counted per client address before the token is looked up, as logins are: past
   * REFRESH_MAX_FAILURES_PER_ADDRESS in the window every attempt is refused (429) without touching
   * the tokens, and a successful rotation gives its attempt back, so only failures add up.
   */
  async function rotate(presented: string, clientAddress: string): Promise<RotatedSession> {
    // Checked before any hashing or database work, counting included: a megabyte of text is
    // refused as cheaply as a typo.
    if (!refreshTokenPattern.test(presented))
      throw invalidToken('The refresh token is malformed: it is not one this service issued');
    const window = fixedWindow(env.loginWindowSeconds);
    const addressBucket = `refresh-failures:address:${clientAddress}`;
    await countAttempt(db.sql, [{ bucket: addressBucket, limit: env.refreshMaxFailuresPerAddress }], window, {
      message: 'Too many failed refreshes from this address; try again later',
      period: attemptPeriod,
    });
    const presentedHash = sha256Hex(presented);
    const successor = newRefreshToken();
    const claimed = await db.sql.transaction(async (tx) => {
      const row = await claimRefreshToken(tx, presentedHash, successor.hash);
      if (!row) return undefined;
      // The successor lives 30 days from now; the family at least as long (never shortened).
      await insertSuccessorRefreshToken(tx, successor.hash, row, env.refreshTokenTtlSeconds);
      return row;
    });
    if (!claimed) throw await refusal(presentedHash);
    await unhit(db.sql, addressBucket, window);
    const access = await signAccessToken(
      { id: claimed.user_id, orgId: claimed.org_id, email: claimed.email, role: claimed.role },
      claimed.family_id,
    );
    return { token: access.access_token, refresh_token: successor.token, expires: access.expires };
  }

  /** Why a refresh token was refused; revokes its family when the reason is reuse. */
  async function refusal(tokenHash: string): Promise<AppError> {
    const row = await refreshTokenState(db.sql, tokenHash);
    // Never issued, pruned after it expired, or deleted with its user or org (the family cascades).
    if (!row) return invalidToken('The refresh token is unknown');
    if (row.used) {
      // RFC 9700 §4.14.2: a used token presented again means it leaked (or a client raced itself);
      // the legitimate holder cannot be told from the other, so the whole family goes.
      if (await revokeFamily(row.family_id, 'refresh_token_reused')) {
        logger.warn(
          { familyId: row.family_id, userId: row.user_id },
          'refresh token reused: its session family is revoked',
        );
      }
      return invalidToken('The refresh token was already used; every token of its session has been revoked');
    }
    if (row.sso_required) return invalidToken(SSO_REQUIRED);
    if (row.family_revoked)
      return invalidToken(`The session of this refresh token ${endedBecause(row.revoked_reason)}`);
    if (row.expired) return invalidToken('The refresh token has expired');
    // Unused, unexpired, unrevoked, yet not claimed: its user no longer matches it.
    return invalidToken('The refresh token is no longer valid');
  }

  /**
   * Counts the attempt per email and per client address before the password is checked (see
   * countAttempt): past either limit the attempt is refused without argon2 work, however many
   * arrive at once. A wrong password and an unknown email stay counted and cost the same argon2
   * verification. A successful login gives back what it took: the email's count is cleared (its
   * owner got in) and the address's count loses this one attempt, so the address keeps counting
   * only failures; clearing it too would let one known account launder guesses at others.
   */
  async function login(email: string, password: string, clientAddress: string) {
    const normalized = email.trim().toLowerCase();
    const window = fixedWindow(env.loginWindowSeconds);
    const emailBucket = `login-failures:email:${sha256Hex(normalized)}`;
    const addressBucket = `login-failures:address:${clientAddress}`;
    await countAttempt(
      db.sql,
      [
        { bucket: emailBucket, limit: env.loginMaxFailuresPerEmail },
        { bucket: addressBucket, limit: env.loginMaxFailuresPerAddress },
      ],
      window,
      { message: 'Too many failed logins; try again later', period: attemptPeriod },
    );
    const user = await users.findByEmail(normalized);
    if (!(await passwords.verify(user?.passwordHash ?? undefined, password)) || !user)
      throw invalidToken('Email or password is wrong');
    await Promise.all([reset(db.sql, emailBucket, window), unhit(db.sql, addressBucket, window)]);
    // Asked only once the password matched: a refusal tells nothing to someone without it.
    const refused = await passwordLoginRefusal(user);
    if (refused) throw new AppError('FORBIDDEN', refused);
    const session = await startSession(
      { id: user.id, orgId: user.orgId, email: user.email, role: user.role },
      'password',
    );
    return { ...session, user };
  }

  /**
   * Ends the password sessions of the org's non-admins, once the org enforces single sign-on. The
   * bearer check already refuses them from that moment on every process; revoked, they also stay
   * ended if `enforce` is turned off again. `within` is the transaction that turns `enforce` on, so
   * that it never commits without them ended. How many it ended.
   */
  const endPasswordSessionsOfNonAdmins = (orgId: string, within: SqlConnection): Promise<number> =>
    revokePasswordFamiliesOfNonAdmins(within, orgId, 'sso_enforced' satisfies FamilyRevocationReason);

  /**
   * Deletes what can no longer be presented: refresh tokens past their expiry, and families past
   * theirs (every token of them has expired; their refresh tokens go with them).
   */
  const prune = (): Promise<void> => deleteExpiredRefreshTokensAndFamilies(db.sql);

  /** Forgets revoked access tokens past their expiry: they no longer verify anyway. */
  const pruneRevokedTokens = (): Promise<void> => deleteExpiredRevokedTokens(db.sql);

  return {
    startSession,
    verify,
    verifyCounted,
    logout,
    refresh,
    rotate,
    login,
    endPasswordSessionsOfNonAdmins,
    prune,
    pruneRevokedTokens,
  };
}

export type SessionService = ReturnType<typeof createSessionService>;
