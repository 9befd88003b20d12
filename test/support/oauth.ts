import { createHash, randomBytes } from 'node:crypto';
import type { TestClient, TestResponse } from './app.js';

/**
 * The OAuth code flow of an MCP client against the gateway, step by step over HTTP, with the
 * operator's consent given through the GraphQL fields the console's consent page calls
 * (docs/decisions/0047-mcp-oauth.md). Browser-driven and SDK-driven flows are in their own tests;
 * this one lets a test stop at any step and tamper with it.
 */

export interface Pkce {
  verifier: string;
  challenge: string;
}

export function pkce(): Pkce {
  const verifier = randomBytes(32).toString('base64url');
  return { verifier, challenge: createHash('sha256').update(verifier).digest('base64url') };
}

export const REDIRECT_URI = 'http://127.0.0.1:33418/callback';

/** A client registered with Dynamic Client Registration. */
export async function registerClient(
  t: TestClient,
  redirectUris: string[] = [REDIRECT_URI],
  name = 'Test MCP client',
): Promise<string> {
  const response = await t.request('POST', '/oauth/register', {
    body: { redirect_uris: redirectUris, client_name: name, token_endpoint_auth_method: 'none' },
  });
  if (response.status !== 201) throw new Error(`registration failed: ${response.status} ${response.text}`);
  return response.body.client_id;
}

// A type, not an interface: it is passed where GraphQL variables (a record) are expected.
export type AuthorizationRequestParams = {
  response_type: string;
  client_id: string;
  redirect_uri: string;
  code_challenge: string;
  code_challenge_method: string;
  state: string;
  resource: string;
  scope?: string;
};

export function authorizationParams(
  publicUrl: string,
  clientId: string,
  svcId: string,
  challenge: string,
  overrides: Partial<AuthorizationRequestParams> = {},
): AuthorizationRequestParams {
  return {
    response_type: 'code',
    client_id: clientId,
    redirect_uri: REDIRECT_URI,
    code_challenge: challenge,
    code_challenge_method: 'S256',
    state: randomBytes(8).toString('hex'),
    resource: `${publicUrl}/mcp/${svcId}`,
    scope: 'mcp:tools',
    ...overrides,
  };
}

export const authorizeUrl = (params: Partial<AuthorizationRequestParams>) =>
  `/oauth/authorize?${new URLSearchParams(Object.entries(params).filter((e): e is [string, string] => e[1] !== undefined))}`;

const DECIDE = `mutation Decide($response_type: String, $client_id: String, $redirect_uri: String, $code_challenge: String,
  $code_challenge_method: String, $state: String, $resource: String, $scope: String, $allow: Boolean!) {
  decide_oauth_authorization(response_type: $response_type, client_id: $client_id, redirect_uri: $redirect_uri,
    code_challenge: $code_challenge, code_challenge_method: $code_challenge_method, state: $state, resource: $resource,
    scope: $scope, allow: $allow) { redirect_to }
}`;

export const DESCRIBE = `query Describe($response_type: String, $client_id: String, $redirect_uri: String, $code_challenge: String,
  $code_challenge_method: String, $state: String, $resource: String, $scope: String) {
  oauth_authorization_request(response_type: $response_type, client_id: $client_id, redirect_uri: $redirect_uri,
    code_challenge: $code_challenge, code_challenge_method: $code_challenge_method, state: $state, resource: $resource,
    scope: $scope) {
    client { client_id name kind client_uri redirect_uri redirect_host }
    agent { agent_id name status }
    agent_id resource scope can_allow refusal
  }
}`;

/** The operator's answer on the consent page, as the console sends it. */
export function decide(
  t: TestClient,
  token: string,
  params: Partial<AuthorizationRequestParams>,
  allow: boolean,
): Promise<TestResponse> {
  return t.request('POST', '/graphql', { token, body: { query: DECIDE, variables: { ...params, allow } } });
}

/** The code (and the rest of the answer) in a redirect to the client. */
export function redirectAnswer(location: string): Record<string, string> {
  return Object.fromEntries(new URL(location).searchParams);
}

export const form = (fields: Record<string, string | undefined>) =>
  new URLSearchParams(Object.entries(fields).filter((e): e is [string, string] => e[1] !== undefined)).toString();

/** `POST /oauth/token` with form fields. */
export const tokenRequest = (t: TestClient, fields: Record<string, string | undefined>, clientAddress?: string) =>
  t.request('POST', '/oauth/token', {
    body: form(fields),
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    clientAddress,
  });

/** The whole flow for one agent: registration, consent by `operatorToken`, the code exchanged for tokens. */
export async function connectClient(
  t: TestClient,
  publicUrl: string,
  operatorToken: string,
  svcId: string,
): Promise<{ clientId: string; grantId: string; accessToken: string; refreshToken: string }> {
  const clientId = await registerClient(t);
  const { verifier, challenge } = pkce();
  const params = authorizationParams(publicUrl, clientId, svcId, challenge);
  const decided = await decide(t, operatorToken, params, true);
  const location = decided.body?.data?.decide_oauth_authorization?.redirect_to;
  if (!location) throw new Error(`consent failed: ${decided.text}`);
  const { code } = redirectAnswer(location);
  const tokens = await tokenRequest(t, {
    grant_type: 'authorization_code',
    code,
    redirect_uri: params.redirect_uri,
    client_id: clientId,
    code_verifier: verifier,
    resource: params.resource,
  });
  if (tokens.status !== 200) throw new Error(`token exchange failed: ${tokens.status} ${tokens.text}`);
  const claims = JSON.parse(Buffer.from(tokens.body.access_token.split('.')[1], 'base64url').toString());
  return {
    clientId,
    grantId: claims.grant_id,
    accessToken: tokens.body.access_token,
    refreshToken: tokens.body.refresh_token,
  };
}

/** A JSON-RPC request to an agent's MCP endpoint with a bearer credential (an access token). */
export function mcpRequest(
  t: TestClient,
  svcId: string,
  token: string,
  body: Record<string, unknown> = { jsonrpc: '2.0', id: 1, method: 'tools/list', params: {} },
) {
  return t.request('POST', `/mcp/${svcId}`, {
    body,
    headers: {
      accept: 'application/json, text/event-stream',
      'mcp-protocol-version': '2025-06-18',
      authorization: `Bearer ${token}`,
    },
  });
}
