import type { Deps } from '../../deps.js';
import { countAttempt } from '../../lib/attempt-throttle.js';
import { randomId } from '../../lib/ids.js';
import { fixedWindow, unhit } from '../../lib/rate-counter.js';
import { sha256Hex } from '../../lib/hash.js';
import type { Actor } from '../audit/audit-events.js';
import { actorOf } from '../audit/audit-events.js';
import { grantPrincipal, type Grants } from './grants.js';
import { MCP_SCOPE, mcpResourceUrl } from './oauth-metadata.js';
import {
  codePattern,
  isWellFormedVerifier,
  kidOf,
  newSecret,
  REFRESH_TOKEN_PREFIX,
  REFRESH_TOKEN_TTL_SECONDS,
  refreshTokenPattern,
  signAccessToken,
  verifierMatches,
  verifyAccessToken,
} from './oauth-tokens.js';
import {
  claimCode,
  claimRefreshToken,
  codeState,
  grantOfRefreshToken,
  insertRefreshToken,
  refreshTokenState,
  touchGrant,
  type GrantRow,
  type SecretState,
} from './oauth.store.js';

/**
 * The token endpoint (RFC 6749 §3.2, OAuth 2.1) and revocation (RFC 7009) of the MCP clients'
 * authorization server (docs/decisions/0047-mcp-oauth.md). Public clients: the code is bound to
 * the PKCE challenge, the client and the redirect URI; refresh tokens rotate and are used once.
 * A code or refresh token presented after it was used means two parties hold it, so the grant,
 * and with it every token it issued, is revoked (RFC 9700 §4.14.2 and §2.1.1).
 *
 * Answers are data: a token response, or an OAuth error with the status it is answered with.
 */

/** The form fields either grant type reads. */
export interface TokenForm {
  grant_type?: string;
  code?: string;
  redirect_uri?: string;
  client_id?: string;
  code_verifier?: string;
  resource?: string;
  refresh_token?: string;
  scope?: string;
}

export const TOKEN_FORM_FIELDS = [
  'grant_type',
  'code',
  'redirect_uri',
  'client_id',
  'code_verifier',
  'resource',
  'refresh_token',
  'scope',
] as const satisfies readonly (keyof TokenForm)[];

export interface TokenResponse {
  access_token: string;
  token_type: 'Bearer';
  expires_in: number;
  refresh_token: string;
  scope: string;
}

export type TokenErrorCode =
  | 'invalid_request'
  | 'invalid_grant'
  | 'unsupported_grant_type'
  | 'invalid_scope'
  | 'invalid_target';

export interface TokenError {
  error: TokenErrorCode;
  error_description: string;
}

export const isTokenError = (answer: object | null): answer is TokenError => answer !== null && 'error' in answer;

const refused = (error: TokenErrorCode, error_description: string): TokenError => ({ error, error_description });

/** Who revokes a grant when its tokens show it leaked. */
const SYSTEM: Actor = { type: 'system', id: null, label: 'agent-gateway' };

export function createTokenEndpoint(
  { env, db, keys, logger }: Pick<Deps, 'env' | 'db' | 'keys' | 'logger'>,
  { grants, touchClient }: { grants: Grants; touchClient(clientId: string): Promise<void> },
) {
  const window = () => fixedWindow(env.loginWindowSeconds);
  const bucketOf = (clientAddress: string) => `oauth-token-failures:address:${clientAddress}`;

  /**
   * Counted per client address before any lookup, as refreshes of operator sessions are
   * (REFRESH_MAX_FAILURES_PER_ADDRESS a window); a success gives its count back, so only failures add up.
   */
  const countAttemptOf = (clientAddress: string) =>
    countAttempt(db.sql, [{ bucket: bucketOf(clientAddress), limit: env.refreshMaxFailuresPerAddress }], window(), {
      message: 'Too many failed token requests from this address; try again later',
      period: `${env.loginWindowSeconds / 60}m`,
    });

  /** A new access token and refresh token for a standing grant. */
  async function issue(grant: GrantRow): Promise<TokenResponse> {
    const refresh = newSecret(REFRESH_TOKEN_PREFIX);
    await insertRefreshToken(db.sql, refresh.hash, grant.id, REFRESH_TOKEN_TTL_SECONDS);
    return { ...(await accessTokenFor(grant)), refresh_token: refresh.token };
  }

  async function accessTokenFor(grant: GrantRow): Promise<Omit<TokenResponse, 'refresh_token'>> {
    const key = await keys.activeKey('oauth');
    const signed = await signAccessToken(
      key,
      env.publicUrl,
      {
        aud: mcpResourceUrl(env.publicUrl, grant.svc_id),
        sub: grant.svc_id,
        org_id: grant.org_id,
        client_id: grant.client_id,
        scope: grant.scope,
        grant_id: grant.id,
      },
      randomId('oat', 16),
    );
    await touchGrant(db.sql, grant.id);
    return { access_token: signed.token, token_type: 'Bearer', expires_in: signed.expiresIn, scope: grant.scope };
  }

  /** Why a code or refresh token was not claimed; revokes its grant when the reason is a second use. */
  async function refusalOf(
    state: SecretState | undefined,
    what: 'authorization code' | 'refresh token',
  ): Promise<TokenError> {
    if (!state) return refused('invalid_grant', `The ${what} is unknown`);
    if (state.used) {
      if (await grants.revokeForTokens({ id: state.grant_id, org_id: state.org_id }, SYSTEM, `${what} used twice`)) {
        logger.warn({ grant_id: state.grant_id }, `OAuth ${what} used twice: its grant is revoked`);
      }
      return refused(
        'invalid_grant',
        `The ${what} was already used; the grant and every token it issued have been revoked`,
      );
    }
    if (state.revoked) return refused('invalid_grant', `The grant of this ${what} has been revoked`);
    if (state.expired) return refused('invalid_grant', `The ${what} has expired`);
    return refused('invalid_grant', `The ${what} is no longer valid`);
  }

  /** A `resource` the client names must be the grant's (RFC 8707 §2.2); absent, it is the grant's. */
  const resourceProblem = (form: TokenForm, grant: GrantRow): TokenError | null =>
    form.resource !== undefined && form.resource !== mcpResourceUrl(env.publicUrl, grant.svc_id)
      ? refused('invalid_target', 'resource is not the MCP endpoint this grant is for')
      : null;

  async function exchangeCode(form: TokenForm, clientAddress: string): Promise<TokenResponse | TokenError> {
    for (const field of ['code', 'redirect_uri', 'client_id', 'code_verifier'] as const) {
      if (!form[field]) return refused('invalid_request', `${field} is required`);
    }
    if (!isWellFormedVerifier(form.code_verifier!))
      return refused('invalid_request', 'code_verifier must be 43 to 128 unreserved characters (RFC 7636)');
    if (!codePattern.test(form.code!))
      return refused('invalid_grant', 'The authorization code is malformed: it is not one this server issued');
    await countAttemptOf(clientAddress);
    const codeHash = sha256Hex(form.code!);
    const claimed = await claimCode(db.sql, codeHash);
    if (!claimed) return refusalOf(await codeState(db.sql, codeHash), 'authorization code');
    // The code is used up from here: a failed check below leaves it used, so a thief who has the
    // code but not the verifier gets no second try.
    if (claimed.client_id !== form.client_id)
      return refused('invalid_grant', 'The authorization code was issued to another client');
    if (claimed.code_redirect_uri !== form.redirect_uri)
      return refused('invalid_grant', 'redirect_uri is not the one of the authorization request');
    const target = resourceProblem(form, claimed);
    if (target) return target;
    if (!verifierMatches(form.code_verifier!, claimed.code_challenge))
      return refused('invalid_grant', 'code_verifier does not match the code_challenge');
    const answer = await issue(claimed);
    await Promise.all([unhit(db.sql, bucketOf(clientAddress), window()), touchClient(claimed.client_id)]);
    return answer;
  }

  async function rotateRefreshToken(form: TokenForm, clientAddress: string): Promise<TokenResponse | TokenError> {
    if (!form.refresh_token) return refused('invalid_request', 'refresh_token is required');
    if (!form.client_id) return refused('invalid_request', 'client_id is required');
    if (!refreshTokenPattern.test(form.refresh_token))
      return refused('invalid_grant', 'The refresh token is malformed: it is not one this server issued');
    if (form.scope?.split(' ').some((s) => s && s !== MCP_SCOPE)) {
      return refused('invalid_scope', `The only scope is "${MCP_SCOPE}"`);
    }
    await countAttemptOf(clientAddress);
    const presented = sha256Hex(form.refresh_token);
    const successor = newSecret(REFRESH_TOKEN_PREFIX);
    // The claim and its successor commit together, and only when the token is this client's and
    // for this resource: a refusal leaves the token as it was.
    const outcome = await db.sql.transactionIf<GrantRow | TokenError | null>(async (tx) => {
      const grant = await claimRefreshToken(tx, presented);
      if (!grant) return { commit: false, value: null };
      const problem =
        grant.client_id !== form.client_id
          ? refused('invalid_grant', 'The refresh token was issued to another client')
          : resourceProblem(form, grant);
      if (problem) return { commit: false, value: problem };
      await insertRefreshToken(tx, successor.hash, grant.id, REFRESH_TOKEN_TTL_SECONDS);
      return { commit: true, value: grant };
    });
    if (outcome === null) return refusalOf(await refreshTokenState(db.sql, presented), 'refresh token');
    if (isTokenError(outcome)) return outcome;
    const access = await accessTokenFor(outcome);
    await unhit(db.sql, bucketOf(clientAddress), window());
    return { ...access, refresh_token: successor.token };
  }

  /** The grant a presented access or refresh token belongs to, whatever its state; null when it names none. */
  async function grantOfToken(token: string): Promise<GrantRow | null> {
    if (refreshTokenPattern.test(token)) return (await grantOfRefreshToken(db.sql, sha256Hex(token))) ?? null;
    const kid = kidOf(token);
    const key = kid ? await keys.byId(kid) : undefined;
    if (key?.purpose !== 'oauth') return null;
    const check = await verifyAccessToken(token, key.publicKey, env.publicUrl);
    if (!check.ok) return null;
    return (await grants.standing(check.claims.grant_id)) ?? null;
  }

  return {
    /** `POST /oauth/token`. */
    async token(form: TokenForm, clientAddress: string): Promise<TokenResponse | TokenError> {
      if (form.grant_type === 'authorization_code') return exchangeCode(form, clientAddress);
      if (form.grant_type === 'refresh_token') return rotateRefreshToken(form, clientAddress);
      if (!form.grant_type) return refused('invalid_request', 'grant_type is required');
      return refused('unsupported_grant_type', 'grant_type must be "authorization_code" or "refresh_token"');
    },

    /**
     * `POST /oauth/revoke` (RFC 7009): an access or refresh token revokes its whole grant. A token
     * that names no grant (unknown, malformed, expired) is answered like a revoked one (§2.2); one
     * issued to another client than the `client_id` sent is refused.
     */
    async revoke(form: { token?: string; client_id?: string }): Promise<TokenError | null> {
      if (!form.token) return refused('invalid_request', 'token is required');
      const grant = await grantOfToken(form.token);
      if (!grant || grant.revoked) return null;
      if (form.client_id !== undefined && form.client_id !== grant.client_id) {
        return refused('invalid_request', 'The token was not issued to this client');
      }
      await grants.revokeForTokens(grant, actorOf(grantPrincipal(grant)), 'revoked by the client (RFC 7009)');
      return null;
    },
  };
}
