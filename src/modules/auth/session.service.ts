import { SignJWT, decodeProtectedHeader, jwtVerify, errors as joseErrors } from 'jose';
import type { Deps } from '../../deps.js';
import { AppError } from '../../errors.js';
import { fixedWindow, hit, peek, reset } from '../../lib/rate-counter.js';
import { sha256Hex } from '../../lib/hash.js';
import type { UserRole, UserPrincipal } from './authz.js';
import { verifyPassword } from './password.js';
import { randomId } from '../../lib/ids.js';

/**
 * Operator sessions: EdDSA-signed JWTs with their own `typ` and audience, so a session token is
 * never accepted where a capability token is expected and vice versa. Refresh and logout put the
 * token's `jti` on a revocation list that every request checks.
 */

export const SESSION_TOKEN_TYPE = 'session+jwt';
export const SESSION_AUDIENCE = 'agent-gateway:session';
const ISSUER = 'agent-gateway';

export interface SessionUser {
  id: string;
  orgId: string;
  email: string;
  role: UserRole;
}

export interface IssuedSession {
  access_token: string;
  token_type: 'bearer';
  expires_in: number;
}

const invalidToken = (message = 'The bearer token is invalid or expired') => new AppError('INVALID_TOKEN', message);

export function createSessionService({ env, db, keys }: Deps) {
  async function issue(user: SessionUser, ttlSeconds = env.sessionTtlSeconds): Promise<IssuedSession> {
    const key = await keys.activeKey('session');
    const now = Math.floor(Date.now() / 1000);
    const token = await new SignJWT({ org_id: user.orgId, role: user.role, email: user.email })
      .setProtectedHeader({ alg: 'EdDSA', typ: SESSION_TOKEN_TYPE, kid: key.kid })
      .setIssuer(ISSUER)
      .setAudience(SESSION_AUDIENCE)
      .setSubject(user.id)
      .setJti(randomId('ses', 16))
      .setIssuedAt(now)
      .setExpirationTime(now + ttlSeconds)
      .sign(key.privateKey);
    return { access_token: token, token_type: 'bearer', expires_in: ttlSeconds };
  }

  /** Checks signature, type, audience and expiry, then revocation and the user's current role. */
  async function verify(token: string): Promise<UserPrincipal> {
    let kid: string | undefined;
    try {
      kid = decodeProtectedHeader(token).kid;
    } catch {
      throw invalidToken();
    }
    const key = kid ? await keys.byId(kid) : undefined;
    if (!key || key.purpose !== 'session') throw invalidToken();
    let payload;
    try {
      ({ payload } = await jwtVerify(token, key.publicKey, {
        algorithms: ['EdDSA'],
        typ: SESSION_TOKEN_TYPE,
        audience: SESSION_AUDIENCE,
        issuer: ISSUER,
        requiredClaims: ['sub', 'jti', 'exp'],
      }));
    } catch (error) {
      if (error instanceof joseErrors.JWTExpired) throw invalidToken('The bearer token has expired');
      throw invalidToken();
    }
    // One round trip: is the token revoked, and does the user still exist (with which role)?
    const [row] = await db.sql.query<{ role: UserRole; email: string; org_id: string; revoked: boolean }>(
      `SELECT u.role, u.email, u.org_id, EXISTS (SELECT 1 FROM revoked_tokens WHERE jti = $2) AS revoked
       FROM users u WHERE u.id = $1::uuid`,
      [payload.sub, payload.jti],
    );
    if (!row || row.revoked) throw invalidToken('The bearer token has been revoked');
    return {
      type: 'user',
      userId: payload.sub!,
      orgId: row.org_id,
      email: row.email,
      role: row.role,
      tokenId: payload.jti!,
      tokenExpiresAt: new Date(payload.exp! * 1000),
    };
  }

  async function revoke(principal: UserPrincipal): Promise<void> {
    await db.prisma.revokedToken.upsert({
      where: { jti: principal.tokenId },
      create: { jti: principal.tokenId, expiresAt: principal.tokenExpiresAt },
      update: {},
    });
  }

  /** A new token for the same user; the presented one stops working. */
  async function refresh(principal: UserPrincipal): Promise<IssuedSession> {
    await revoke(principal);
    return issue({ id: principal.userId, orgId: principal.orgId, email: principal.email, role: principal.role });
  }

  /**
   * Counts failed logins per email and per client address in a fixed window; past the limit
   * every attempt is refused before the password is even checked.
   */
  async function login(email: string, password: string, clientAddress: string) {
    const normalized = email.trim().toLowerCase();
    const window = fixedWindow(env.loginWindowSeconds);
    const emailBucket = `login-failures:email:${sha256Hex(normalized)}`;
    const addressBucket = `login-failures:address:${clientAddress}`;
    const counts = await peek(db.sql, [emailBucket, addressBucket], window);
    const limits: [string, number][] = [
      [emailBucket, env.loginMaxFailuresPerEmail],
      [addressBucket, env.loginMaxFailuresPerAddress],
    ];
    for (const [bucket, limit] of limits) {
      const current = counts.get(bucket) ?? 0;
      if (current >= limit) {
        const retryAfter = Math.max(1, Math.ceil(window.resetAt - Date.now() / 1000));
        throw new AppError('POLICY_VIOLATION', 'Too many failed logins; try again later', {
          details: { limit, period: `${env.loginWindowSeconds / 60}m`, current },
          headers: { 'Retry-After': String(retryAfter) },
        });
      }
    }
    const user = await db.prisma.user.findUnique({ where: { email: normalized } });
    if (!(await verifyPassword(user?.passwordHash, password)) || !user) {
      await Promise.all([hit(db.sql, emailBucket, window), hit(db.sql, addressBucket, window)]);
      throw invalidToken('Email or password is wrong');
    }
    await reset(db.sql, emailBucket, window);
    const session = await issue({ id: user.id, orgId: user.orgId, email: user.email, role: user.role });
    return { ...session, user };
  }

  return { issue, verify, revoke, refresh, login };
}

export type SessionService = ReturnType<typeof createSessionService>;
