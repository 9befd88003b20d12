import { agentIdPattern } from '../manifest/manifest-document.js';
import { redirectUriMatches } from './oauth-client.js';
import { MCP_SCOPE } from './oauth-metadata.js';

/**
 * The rules of an authorization request (`GET /oauth/authorize`, and the console's consent page
 * that shows it again), pure (docs/decisions/0047-mcp-oauth.md): OAuth 2.1's code flow with PKCE
 * S256, a `state`, and a `resource` (RFC 8707) naming one agent's MCP endpoint of this gateway.
 *
 * Which problems are told to the client and which only to the person in the browser follows
 * RFC 6749 §4.1.2.1: while the client or its redirect URI is not known to be right, the browser
 * must never be sent there (that would make the gateway an open redirector); once they are,
 * every other problem goes back to the client at its redirect URI.
 */

/** The query parameters of an authorization request, as strings (absent: undefined). */
export interface AuthorizationParams {
  response_type?: string;
  client_id?: string;
  redirect_uri?: string;
  code_challenge?: string;
  code_challenge_method?: string;
  state?: string;
  resource?: string;
  scope?: string;
}

export const AUTHORIZATION_PARAM_NAMES = [
  'response_type',
  'client_id',
  'redirect_uri',
  'code_challenge',
  'code_challenge_method',
  'state',
  'resource',
  'scope',
] as const satisfies readonly (keyof AuthorizationParams)[];

/** A request every rule accepted: what the consent page shows and what a grant is made of. */
export interface AuthorizationRequest {
  clientId: string;
  redirectUri: string;
  codeChallenge: string;
  state: string;
  /** The agent whose MCP endpoint is the resource. */
  svcId: string;
  resource: string;
  scope: string;
}

export type AuthorizationErrorCode =
  | 'invalid_request'
  | 'unsupported_response_type'
  | 'invalid_scope'
  | 'invalid_target'
  | 'access_denied';

/** A problem to tell the client at its redirect URI (RFC 6749 §4.1.2.1). */
export interface RedirectedError {
  redirectUri: string;
  state: string | undefined;
  error: AuthorizationErrorCode;
  description: string;
}

export type AuthorizationCheck =
  | { ok: true; request: AuthorizationRequest }
  /** Neither the client nor its redirect URI can be trusted: shown to the person, never redirected. */
  | { ok: false; shown: string }
  | { ok: false; redirected: RedirectedError };

/** S256 of a 32-byte verifier is 43 base64url characters; RFC 7636 §4.2 allows no other length for it. */
const S256_CHALLENGE = /^[A-Za-z0-9_-]{43}$/;
const MAX_STATE_LENGTH = 1024;
const CONTROL_CHARACTERS = /[\u0000-\u001f\u007f]/;

/** The agent id of an MCP resource of this gateway (`<PUBLIC_URL>/mcp/<svc_id>`), or undefined. */
export function svcIdOfResource(publicUrl: string, resource: string): string | undefined {
  const prefix = `${publicUrl}/mcp/`;
  if (!resource.startsWith(prefix)) return undefined;
  const svcId = resource.slice(prefix.length);
  return agentIdPattern.test(svcId) ? svcId : undefined;
}

/** The scope asked for, or why it cannot be given: the one scope there is, `mcp:tools`; absent means it. */
function scopeOf(scope: string | undefined): string | undefined {
  if (scope === undefined || scope.trim() === '') return MCP_SCOPE;
  const asked = scope.split(' ').filter(Boolean);
  return asked.every((s) => s === MCP_SCOPE) ? MCP_SCOPE : undefined;
}

/**
 * Checks a request against a client already resolved (its registered redirect URIs), or against
 * the reason the client is unknown. `publicUrl` is the issuer: resources are its MCP endpoints.
 */
export function checkAuthorizationRequest(
  params: AuthorizationParams,
  client: { redirect_uris: readonly string[] } | { unknown: string },
  publicUrl: string,
): AuthorizationCheck {
  if (!params.client_id) return { ok: false, shown: 'The request names no client (client_id is missing).' };
  if ('unknown' in client) return { ok: false, shown: `The client is not known: ${client.unknown}.` };
  if (!params.redirect_uri) return { ok: false, shown: 'The request has no redirect_uri.' };
  if (!redirectUriMatches(client.redirect_uris, params.redirect_uri)) {
    return { ok: false, shown: 'The redirect_uri is not one the client registered; the browser is not sent there.' };
  }
  const redirectUri = params.redirect_uri;
  const state = params.state;
  const refuse = (error: AuthorizationErrorCode, description: string): AuthorizationCheck => ({
    ok: false,
    redirected: { redirectUri, state, error, description },
  });
  if (params.response_type !== 'code') {
    return refuse(
      'unsupported_response_type',
      'response_type must be "code": the authorization code flow is the only one',
    );
  }
  if (!state) return refuse('invalid_request', 'state is required');
  if (state.length > MAX_STATE_LENGTH || CONTROL_CHARACTERS.test(state)) {
    return refuse('invalid_request', `state may have at most ${MAX_STATE_LENGTH} characters and no control characters`);
  }
  if (params.code_challenge_method !== 'S256')
    return refuse('invalid_request', 'code_challenge_method must be "S256" (PKCE is required)');
  if (!params.code_challenge || !S256_CHALLENGE.test(params.code_challenge)) {
    return refuse(
      'invalid_request',
      'code_challenge must be the S256 challenge of the code verifier: 43 base64url characters',
    );
  }
  if (!params.resource)
    return refuse('invalid_target', `resource is required (RFC 8707): the MCP endpoint, ${publicUrl}/mcp/{svc_id}`);
  const svcId = svcIdOfResource(publicUrl, params.resource);
  if (!svcId)
    return refuse(
      'invalid_target',
      `resource must be an agent's MCP endpoint of this gateway: ${publicUrl}/mcp/{svc_id}`,
    );
  const scope = scopeOf(params.scope);
  if (!scope) return refuse('invalid_scope', `The only scope is "${MCP_SCOPE}"`);
  return {
    ok: true,
    request: {
      clientId: params.client_id,
      redirectUri,
      codeChallenge: params.code_challenge,
      state,
      svcId,
      resource: params.resource,
      scope,
    },
  };
}

/**
 * The redirect URI with the answer's parameters added to its query (RFC 6749 §4.1.2: keeping the
 * query it has), and `iss` always (RFC 9207), so the client can tell which server answered.
 */
export function authorizationRedirect(
  redirectUri: string,
  answer: Record<string, string | undefined>,
  issuer: string,
): string {
  const url = new URL(redirectUri);
  for (const [name, value] of Object.entries({ ...answer, iss: issuer })) {
    if (value !== undefined) url.searchParams.set(name, value);
  }
  return url.toString();
}

/** Where a refused request sends the browser: the client's redirect URI with the error, the state and the issuer. */
export const errorRedirect = (refusal: RedirectedError, issuer: string) =>
  authorizationRedirect(
    refusal.redirectUri,
    { error: refusal.error, error_description: refusal.description, state: refusal.state },
    issuer,
  );
