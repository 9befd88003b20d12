import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { SignJWT, decodeProtectedHeader, errors as joseErrors, jwtVerify, type JWTPayload, type KeyObject } from 'jose';
import { sha256Hex } from '../../lib/hash.js';

/**
 * What the authorization server hands out (docs/decisions/0047-mcp-oauth.md): single-use
 * authorization codes and rotating refresh tokens, both opaque and stored only as their SHA-256,
 * and access tokens that are EdDSA-signed JWTs (RFC 9068, `typ: at+jwt`) whose audience is one
 * agent's MCP endpoint. Pure apart from the clock and the random source.
 */

export const ACCESS_TOKEN_TYPE = 'at+jwt';
export const ACCESS_TOKEN_TTL_SECONDS = 3600;
export const CODE_TTL_SECONDS = 60;
export const REFRESH_TOKEN_TTL_SECONDS = 30 * 86_400;

export const CODE_PREFIX = 'oac_';
export const REFRESH_TOKEN_PREFIX = 'ort_';
/** Prefix + base64url of 32 bytes: anything else was not issued here and is refused before any lookup. */
export const codePattern = /^oac_[A-Za-z0-9_-]{43}$/;
export const refreshTokenPattern = /^ort_[A-Za-z0-9_-]{43}$/;
/** RFC 7636 §4.1: 43 to 128 unreserved characters. */
const verifierPattern = /^[A-Za-z0-9._~-]{43,128}$/;

/** A fresh opaque secret with its prefix, and the hash it is stored under. */
export function newSecret(prefix: typeof CODE_PREFIX | typeof REFRESH_TOKEN_PREFIX): { token: string; hash: string } {
  const token = `${prefix}${randomBytes(32).toString('base64url')}`;
  return { token, hash: sha256Hex(token) };
}

export const isWellFormedVerifier = (verifier: string) => verifierPattern.test(verifier);

/** PKCE S256 (RFC 7636 §4.6): the challenge is base64url(SHA-256(verifier)); compared in constant time. */
export function verifierMatches(verifier: string, challenge: string): boolean {
  const computed = Buffer.from(createHash('sha256').update(verifier).digest('base64url'));
  const expected = Buffer.from(challenge);
  return computed.length === expected.length && timingSafeEqual(computed, expected);
}

/** The claims of an access token besides the registered ones. */
export interface AccessTokenClaims {
  /** The resource, `<PUBLIC_URL>/mcp/<svc_id>`: the only place the token is accepted. */
  aud: string;
  /** The agent's svc_id. */
  sub: string;
  org_id: string;
  client_id: string;
  scope: string;
  /** The grant it was issued under: revoking the grant ends the token. */
  grant_id: string;
}

export interface SignedAccessToken {
  token: string;
  expiresIn: number;
  /** Unix seconds. */
  exp: number;
}

export async function signAccessToken(
  key: { kid: string; privateKey: KeyObject },
  issuer: string,
  claims: AccessTokenClaims,
  jti: string,
  now = Date.now(),
): Promise<SignedAccessToken> {
  const iat = Math.floor(now / 1000);
  const exp = iat + ACCESS_TOKEN_TTL_SECONDS;
  const { aud, sub, ...rest } = claims;
  const token = await new SignJWT({ ...rest })
    .setProtectedHeader({ alg: 'EdDSA', typ: ACCESS_TOKEN_TYPE, kid: key.kid })
    .setIssuer(issuer)
    .setAudience(aud)
    .setSubject(sub)
    .setJti(jti)
    .setIssuedAt(iat)
    .setExpirationTime(exp)
    .sign(key.privateKey);
  return { token, expiresIn: ACCESS_TOKEN_TTL_SECONDS, exp };
}

/** A verified access token's claims, with its expiry. */
export interface VerifiedAccessToken extends AccessTokenClaims {
  jti: string;
  exp: number;
}

export type AccessTokenCheck = { ok: true; claims: VerifiedAccessToken } | { ok: false; reason: string };

/** The `kid` of a JWT's header, or undefined when the text is not a JWT at all. */
export function kidOf(token: string): string | undefined {
  try {
    return decodeProtectedHeader(token).kid;
  } catch {
    return undefined;
  }
}

/**
 * Checks signature, `typ`, issuer and expiry. Where the token may be used (its `aud`) and whether
 * its grant still stands are the caller's questions.
 */
export async function verifyAccessToken(
  token: string,
  publicKey: KeyObject,
  issuer: string,
): Promise<AccessTokenCheck> {
  let payload: JWTPayload;
  try {
    ({ payload } = await jwtVerify(token, publicKey, {
      algorithms: ['EdDSA'],
      typ: ACCESS_TOKEN_TYPE,
      issuer,
      requiredClaims: ['sub', 'jti', 'exp', 'aud'],
    }));
  } catch (error) {
    if (error instanceof joseErrors.JWTExpired) return { ok: false, reason: 'The access token has expired' };
    return { ok: false, reason: 'The access token is invalid' };
  }
  const { org_id, client_id, scope, grant_id } = payload;
  const { aud } = payload;
  if (
    typeof aud !== 'string' ||
    typeof org_id !== 'string' ||
    typeof client_id !== 'string' ||
    typeof scope !== 'string' ||
    typeof grant_id !== 'string'
  ) {
    return { ok: false, reason: 'The access token is invalid' };
  }
  return {
    ok: true,
    claims: { aud, sub: payload.sub!, org_id, client_id, scope, grant_id, jti: payload.jti!, exp: payload.exp! },
  };
}
