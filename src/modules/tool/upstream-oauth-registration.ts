import * as oauth from 'oauth4webapi';
import type { NetworkAccess } from '../../lib/address-policy.js';
import { failed, type OAuthResult, oauthOptions, step } from './upstream-oauth-http.js';

/**
 * How the gateway becomes a client of an upstream's authorization server
 * (docs/decisions/0067-upstream-oauth-client.md), in the MCP specification's (2025-11-25) order:
 * the client the tool's config gives, else the gateway's Client ID Metadata Document, else dynamic
 * registration (RFC 7591); and how it then authenticates at the token endpoint.
 */

export type AuthorizationServer = oauth.AuthorizationServer;

/** How the gateway authenticates at the token endpoint: the methods it can hold the means for. */
export type TokenEndpointAuthMethod = 'none' | 'client_secret_basic' | 'client_secret_post';

/** The gateway's registration at one authorization server. */
export interface RegisteredClient {
  client_id: string;
  client_secret?: string;
  /** When a dynamically registered secret expires (seconds since the epoch); 0 or absent: never. */
  client_secret_expires_at?: number;
  token_endpoint_auth_method: TokenEndpointAuthMethod;
  /** How it came to be: given in the tool's config, a Client ID Metadata Document, or RFC 7591. */
  registration: 'given' | 'metadata_document' | 'dynamic';
}

/** Where the gateway serves its Client ID Metadata Document, and where browsers come back. */
export const UPSTREAM_CLIENT_DOCUMENT_PATH = '/oauth/upstream-client.json';
export const UPSTREAM_CALLBACK_PATH = '/oauth/upstream/callback';
export const UPSTREAM_CLIENT_NAME = 'Agent Gateway';
const base = (publicUrl: string) => publicUrl.replace(/\/+$/, '');
export const upstreamRedirectUri = (publicUrl: string) => `${base(publicUrl)}${UPSTREAM_CALLBACK_PATH}`;
export const upstreamClientId = (publicUrl: string) => `${base(publicUrl)}${UPSTREAM_CLIENT_DOCUMENT_PATH}`;

/**
 * The Client ID Metadata Document the gateway serves at `<PUBLIC_URL>/oauth/upstream-client.json`:
 * its `client_id` is its own URL. A public client (`none`): a document is public, so it can name
 * no secret, and servers refuse shared-secret methods for it.
 */
export function upstreamClientMetadataDocument(publicUrl: string) {
  return {
    client_id: upstreamClientId(publicUrl),
    client_name: UPSTREAM_CLIENT_NAME,
    redirect_uris: [upstreamRedirectUri(publicUrl)],
    grant_types: ['authorization_code', 'refresh_token'],
    response_types: ['code'],
    token_endpoint_auth_method: 'none' as const,
  };
}

export interface RegistrationRequest {
  /** A client registered by hand at the server, from the tool's config. */
  given?: { client_id: string; client_secret?: string };
  /** The gateway's Client ID Metadata Document URL, when the deployment serves one (https PUBLIC_URL). */
  clientMetadataUrl?: string;
  redirectUri: string;
  clientName: string;
}

/** RFC 8414 §2: a server that does not list its methods supports client_secret_basic. */
const authMethodsOf = (as: AuthorizationServer): string[] =>
  as.token_endpoint_auth_methods_supported ?? ['client_secret_basic'];

/** With a secret: Basic unless the server takes only client_secret_post (RFC 6749 prefers Basic). */
function secretMethod(as: AuthorizationServer): TokenEndpointAuthMethod {
  const methods = authMethodsOf(as);
  return !methods.includes('client_secret_basic') && methods.includes('client_secret_post')
    ? 'client_secret_post'
    : 'client_secret_basic';
}

/**
 * How the gateway will register, in the MCP specification's order: the client the tool's config
 * gives, else a Client ID Metadata Document when the server supports them and the gateway serves
 * one, else dynamic registration (RFC 7591) when the server has an endpoint for it. Undefined: the
 * server offers no way.
 */
export function registrationChoice(
  as: AuthorizationServer,
  request: Pick<RegistrationRequest, 'given' | 'clientMetadataUrl'>,
): RegisteredClient['registration'] | undefined {
  if (request.given) return 'given';
  if (request.clientMetadataUrl && as.client_id_metadata_document_supported === true) return 'metadata_document';
  if (typeof as.registration_endpoint === 'string') return 'dynamic';
  return undefined;
}

/**
 * The method the gateway asks for when it registers: one holding a secret where the server
 * supports one (the gateway keeps secrets at rest, and a confidential client's refresh token is
 * useless without its secret), else `none`.
 */
function dynamicAuthMethod(as: AuthorizationServer): TokenEndpointAuthMethod | undefined {
  const methods = authMethodsOf(as);
  if (methods.includes('client_secret_basic') || methods.includes('client_secret_post')) return secretMethod(as);
  return methods.includes('none') ? 'none' : undefined;
}

const AUTH_METHODS: readonly string[] = ['none', 'client_secret_basic', 'client_secret_post'];

/** RFC 7591: the server's answer decides; a secret without a method is client_secret_basic's. */
function registeredClientOf(answer: Record<string, unknown>): RegisteredClient | undefined {
  const method = answer.token_endpoint_auth_method ?? (answer.client_secret ? 'client_secret_basic' : 'none');
  if (typeof method !== 'string' || !AUTH_METHODS.includes(method)) return undefined;
  if (method !== 'none' && typeof answer.client_secret !== 'string') return undefined;
  return {
    client_id: answer.client_id as string,
    ...(method === 'none' ? {} : { client_secret: answer.client_secret as string }),
    ...(typeof answer.client_secret_expires_at === 'number'
      ? { client_secret_expires_at: answer.client_secret_expires_at }
      : {}),
    token_endpoint_auth_method: method as TokenEndpointAuthMethod,
    registration: 'dynamic',
  };
}

async function registerDynamically(
  as: AuthorizationServer,
  request: RegistrationRequest,
  access: NetworkAccess,
): Promise<OAuthResult<RegisteredClient>> {
  const method = dynamicAuthMethod(as);
  if (!method)
    return failed('no_registration', 'The authorization server supports no client authentication the gateway can use');
  const metadata = {
    client_name: request.clientName,
    redirect_uris: [request.redirectUri],
    grant_types: ['authorization_code', 'refresh_token'],
    response_types: ['code'],
    token_endpoint_auth_method: method,
  };
  const answer = await step('The registration endpoint', async () =>
    oauth.processDynamicClientRegistrationResponse(
      await oauth.dynamicClientRegistrationRequest(as, metadata, oauthOptions(as.registration_endpoint, access)),
    ),
  );
  if (!answer.ok) return answer;
  const client = registeredClientOf(answer.value);
  if (!client)
    return failed(
      'invalid_response',
      'The registration endpoint registered a client the gateway cannot authenticate as',
    );
  return { ok: true, value: client };
}

/** The gateway's client at the authorization server: given, else its metadata document, else registered (RFC 7591). */
export async function registerClient(
  as: AuthorizationServer,
  request: RegistrationRequest,
  access: NetworkAccess,
): Promise<OAuthResult<RegisteredClient>> {
  const choice = registrationChoice(as, request);
  if (choice === 'given' && request.given) {
    const { client_id, client_secret } = request.given;
    const method = client_secret ? secretMethod(as) : 'none';
    return {
      ok: true,
      value: {
        client_id,
        ...(client_secret ? { client_secret } : {}),
        token_endpoint_auth_method: method,
        registration: 'given',
      },
    };
  }
  if (choice === 'metadata_document' && request.clientMetadataUrl) {
    const value = {
      client_id: request.clientMetadataUrl,
      token_endpoint_auth_method: 'none',
      registration: choice,
    } as const;
    return { ok: true, value };
  }
  if (choice === 'dynamic') return registerDynamically(as, request, access);
  return failed(
    'no_registration',
    "The authorization server offers no way to register: give client_id (and client_secret) in the tool's auth",
  );
}

/** The client as oauth4webapi describes it, and how it authenticates at the token endpoint. */
export function clientOf(client: Pick<RegisteredClient, 'client_id' | 'client_secret' | 'token_endpoint_auth_method'>) {
  const described: oauth.Client = {
    client_id: client.client_id,
    token_endpoint_auth_method: client.token_endpoint_auth_method,
  };
  const secret = client.client_secret ?? '';
  const authentication =
    client.token_endpoint_auth_method === 'client_secret_basic'
      ? oauth.ClientSecretBasic(secret)
      : client.token_endpoint_auth_method === 'client_secret_post'
        ? oauth.ClientSecretPost(secret)
        : oauth.None();
  return { described, authentication };
}
