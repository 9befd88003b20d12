import * as oauth from 'oauth4webapi';
import type { NetworkAccess } from '../../lib/address-policy.js';
import { checkUrl, failed, failureOf, type OAuthResult, oauthOptions, step } from './upstream-oauth-http.js';
import { type AuthorizationServer, clientOf, type RegisteredClient } from './upstream-oauth-registration.js';

export {
  authorizationServerMetadata,
  authorizationServerMetadataUrls,
  discoverUpstream,
  protectedResourceMetadataUrls,
  readChallenge,
  type UpstreamDiscovery,
} from './upstream-oauth-discovery.js';
export type { OAuthFailure, OAuthFailureCode, OAuthResult } from './upstream-oauth-http.js';
export {
  type AuthorizationServer,
  type RegisteredClient,
  type RegistrationRequest,
  registerClient,
  registrationChoice,
  type TokenEndpointAuthMethod,
  UPSTREAM_CALLBACK_PATH,
  UPSTREAM_CLIENT_DOCUMENT_PATH,
  UPSTREAM_CLIENT_NAME,
  upstreamClientId,
  upstreamClientMetadataDocument,
  upstreamRedirectUri,
} from './upstream-oauth-registration.js';

/**
 * The gateway as an OAuth 2.1 client of a tool's upstream (docs/decisions/0067-upstream-oauth-client.md),
 * as the MCP authorization specification (2025-11-25) describes clients: discovery
 * (upstream-oauth-discovery.ts), registration (upstream-oauth-registration.ts), the authorization
 * code flow with PKCE S256, `state` and `resource` (RFC 8707), the callback's `iss` (RFC 9207),
 * refresh, client credentials and revocation (RFC 7009). Built on oauth4webapi; every request goes
 * through the deployment's address policy (upstream-oauth-http.ts). Each step returns a result and
 * never throws; a failure's message quotes no token, code, verifier or secret, and nothing a
 * server wrote. This file is the surface the connections and the connectors use.
 */

export interface UpstreamTokens {
  access_token: string;
  /** Only Bearer tokens are accepted (DPoP-bound ones are refused). */
  token_type: 'bearer';
  refresh_token?: string;
  /** When the access token expires, in milliseconds since the epoch, when the server said. */
  expires_at?: number;
  scope?: string;
}

/** A token this close to its expiry is refreshed before it is used. */
export const REFRESH_AHEAD_MS = 60_000;

export interface AuthorizationStart {
  /** Where to send the browser. */
  authorizationUrl: string;
  /** Kept with the pending authorization: the callback must bring it back. */
  state: string;
  /** Kept server-side, never sent to the browser. */
  codeVerifier: string;
}

/** MCP: a server whose metadata does not list S256 in `code_challenge_methods_supported` is refused. */
export const supportsPkceS256 = (as: AuthorizationServer) =>
  Array.isArray(as.code_challenge_methods_supported) && as.code_challenge_methods_supported.includes('S256');

/** The authorization request (OAuth 2.1 §4.1.1): code, PKCE S256, `state`, `resource`, the scopes. */
export async function startAuthorization(
  as: AuthorizationServer,
  client: Pick<RegisteredClient, 'client_id'>,
  request: { redirectUri: string; resource: string; scopes?: string[] },
  access: NetworkAccess,
): Promise<OAuthResult<AuthorizationStart>> {
  if (!supportsPkceS256(as))
    return failed('pkce_unsupported', 'The authorization server does not list PKCE with S256, which MCP requires');
  const endpoint = typeof as.authorization_endpoint === 'string' ? URL.parse(as.authorization_endpoint) : null;
  if (!endpoint)
    return failed('invalid_response', "The authorization server's metadata has no usable authorization_endpoint");
  // The browser goes there, not the gateway; the rule on its scheme is the same as for requests.
  const checked = await step("The authorization server's authorization_endpoint", async () =>
    checkUrl(endpoint, access),
  );
  if (!checked.ok) return checked;
  const codeVerifier = oauth.generateRandomCodeVerifier();
  const state = oauth.generateRandomState();
  const parameters = {
    response_type: 'code',
    client_id: client.client_id,
    redirect_uri: request.redirectUri,
    state,
    code_challenge: await oauth.calculatePKCECodeChallenge(codeVerifier),
    code_challenge_method: 'S256',
    resource: request.resource,
    ...(request.scopes?.length ? { scope: request.scopes.join(' ') } : {}),
  };
  for (const [name, value] of Object.entries(parameters)) endpoint.searchParams.set(name, value);
  return { ok: true, value: { authorizationUrl: endpoint.href, state, codeVerifier } };
}

/** The token endpoint's answer as the tokens kept; `refreshToken` stays when no new one came (no rotation). */
function tokensOf(
  answer: oauth.TokenEndpointResponse,
  now: number,
  refreshToken?: string,
): OAuthResult<UpstreamTokens> {
  if (answer.token_type !== 'bearer')
    return failed('invalid_response', 'The token endpoint issued a token that is not a Bearer token');
  const refresh = answer.refresh_token ?? refreshToken;
  return {
    ok: true,
    value: {
      access_token: answer.access_token,
      token_type: 'bearer',
      ...(refresh ? { refresh_token: refresh } : {}),
      ...(answer.expires_in !== undefined ? { expires_at: now + answer.expires_in * 1000 } : {}),
      ...(answer.scope !== undefined ? { scope: answer.scope } : {}),
    },
  };
}

/** Whether tokens are to be refreshed before use: they expire within REFRESH_AHEAD_MS. */
export const needsRefresh = (tokens: Pick<UpstreamTokens, 'expires_at'>, now: number) =>
  tokens.expires_at !== undefined && tokens.expires_at - REFRESH_AHEAD_MS <= now;

export interface CallbackCheck {
  /** The URL the browser came back to, with `code`, `state` and `iss` (or `error`). */
  callbackUrl: string;
  expectedState: string;
  codeVerifier: string;
  redirectUri: string;
  resource: string;
}

/**
 * The callback's parameters once they are for this authorization: at the redirect URI, with its
 * `state`, from this server (`iss`, RFC 9207: required when the server says it sends it, and never
 * another server's). A code another server issued (the mix-up attack) is refused here, before it
 * is sent anywhere.
 */
export function checkCallback(
  as: AuthorizationServer,
  client: oauth.Client,
  check: CallbackCheck,
): OAuthResult<URLSearchParams> {
  const url = URL.parse(check.callbackUrl);
  const redirect = URL.parse(check.redirectUri);
  if (!url || !redirect || url.origin + url.pathname !== redirect.origin + redirect.pathname)
    return failed('invalid_response', 'The callback is not at the redirect URI');
  const parameters = url.searchParams;
  if (parameters.getAll('state').length !== 1 || parameters.get('state') !== check.expectedState)
    return failed('state_mismatch', 'The callback does not carry the state of this authorization');
  const iss = parameters.getAll('iss');
  if (iss.length > 1 || (iss.length === 1 && iss[0] !== as.issuer))
    return failed('issuer_mismatch', 'The callback comes from another authorization server than the one asked');
  if (iss.length === 0 && as.authorization_response_iss_parameter_supported === true)
    return failed(
      'issuer_mismatch',
      'The callback names no issuer although the authorization server sends one (RFC 9207)',
    );
  try {
    return { ok: true, value: oauth.validateAuthResponse(as, client, parameters, check.expectedState) };
  } catch (error) {
    return failureOf(error, 'The callback');
  }
}

/** The callback's code for tokens (OAuth 2.1 §4.1.3), with the verifier and the resource. */
export async function finishAuthorization(
  as: AuthorizationServer,
  client: RegisteredClient,
  check: CallbackCheck,
  access: NetworkAccess,
  now: () => number = Date.now,
): Promise<OAuthResult<UpstreamTokens>> {
  const { described, authentication } = clientOf(client);
  const callback = checkCallback(as, described, check);
  if (!callback.ok) return callback;
  const answer = await step('The token endpoint', async () => {
    const options = oauthOptions(as.token_endpoint, access, { resource: check.resource });
    const { redirectUri, codeVerifier } = check;
    return oauth.processAuthorizationCodeResponse(
      as,
      described,
      await oauth.authorizationCodeGrantRequest(
        as,
        described,
        authentication,
        callback.value,
        redirectUri,
        codeVerifier,
        options,
      ),
    );
  });
  return answer.ok ? tokensOf(answer.value, now()) : answer;
}

/**
 * New tokens for a refresh token, with the resource again (RFC 8707 §2.2). `invalid_grant` (the
 * refresh token was revoked, expired or already used) means the connection needs authorizing
 * again; `transient` failures (the network, 5xx) leave it as it is. Rotation: the new refresh
 * token replaces the old, which the server no longer takes.
 */
export async function refreshTokens(
  as: AuthorizationServer,
  client: RegisteredClient,
  request: { refreshToken: string; resource?: string; scopes?: string[] },
  access: NetworkAccess,
  now: () => number = Date.now,
): Promise<OAuthResult<UpstreamTokens>> {
  const { described, authentication } = clientOf(client);
  const additionalParameters = {
    ...(request.resource ? { resource: request.resource } : {}),
    ...(request.scopes?.length ? { scope: request.scopes.join(' ') } : {}),
  };
  const answer = await step('The token endpoint', async () => {
    const options = oauthOptions(as.token_endpoint, access, additionalParameters);
    return oauth.processRefreshTokenResponse(
      as,
      described,
      await oauth.refreshTokenGrantRequest(as, described, authentication, request.refreshToken, options),
    );
  });
  return answer.ok ? tokensOf(answer.value, now(), request.refreshToken) : answer;
}

/** A tool's `config.auth` of type client_credentials. */
export interface ClientCredentialsConfig {
  token_url: string;
  client_id: string;
  client_secret: string;
  scopes?: string[];
  /** Sent as `audience`, the parameter Auth0 and others use to name the API. */
  audience?: string;
}

/**
 * A token for a machine API (OAuth 2.1 §4.2): no user, no refresh token to keep; asked again when
 * it expires. The secret goes in Basic (RFC 6749 §2.3.1 says servers must support it).
 * `resource` (RFC 8707), when given, names the upstream.
 */
export async function clientCredentialsToken(
  config: ClientCredentialsConfig,
  access: NetworkAccess,
  options: { resource?: string; now?: () => number } = {},
): Promise<OAuthResult<UpstreamTokens>> {
  const tokenUrl = URL.parse(config.token_url);
  if (!tokenUrl) return failed('insecure_url', 'token_url is not an http(s) URL');
  // No discovery: the token URL is all the tool gives, and no issuer is checked against anything.
  const as: AuthorizationServer = { issuer: tokenUrl.origin, token_endpoint: tokenUrl.href };
  const { described, authentication } = clientOf({ ...config, token_endpoint_auth_method: 'client_secret_basic' });
  const parameters = {
    ...(config.scopes?.length ? { scope: config.scopes.join(' ') } : {}),
    ...(config.audience ? { audience: config.audience } : {}),
    ...(options.resource ? { resource: options.resource } : {}),
  };
  const answer = await step('The token endpoint', async () => {
    const http = oauthOptions(as.token_endpoint, access);
    return oauth.processClientCredentialsResponse(
      as,
      described,
      await oauth.clientCredentialsGrantRequest(as, described, authentication, parameters, http),
    );
  });
  return answer.ok ? tokensOf(answer.value, (options.now ?? Date.now)()) : answer;
}

/**
 * Revokes a token (RFC 7009) when the server has a revocation endpoint; `revoked: false` when it
 * has none (nothing to do: the gateway forgets the token either way).
 */
export async function revokeToken(
  as: AuthorizationServer,
  client: RegisteredClient,
  request: { token: string; tokenTypeHint?: 'refresh_token' | 'access_token' },
  access: NetworkAccess,
): Promise<OAuthResult<{ revoked: boolean }>> {
  if (typeof as.revocation_endpoint !== 'string') return { ok: true, value: { revoked: false } };
  const { described, authentication } = clientOf(client);
  const additionalParameters = request.tokenTypeHint ? { token_type_hint: request.tokenTypeHint } : undefined;
  const answer = await step('The revocation endpoint', async () => {
    const options = oauthOptions(as.revocation_endpoint, access, additionalParameters);
    return oauth.processRevocationResponse(
      await oauth.revocationRequest(as, described, authentication, request.token, options),
    );
  });
  return answer.ok ? { ok: true, value: { revoked: true } } : answer;
}
