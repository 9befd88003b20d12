import * as oauth from 'oauth4webapi';
import type { NetworkAccess } from '../../lib/address-policy.js';
import { checkUrl, failed, getMetadata, type OAuthResult, step } from './upstream-oauth-http.js';

/**
 * Finding an upstream's authorization server, as the MCP authorization specification (2025-11-25)
 * asks of clients: the protected resource metadata (RFC 9728) named by the upstream's 401
 * challenge, else at the well-known URI with the upstream's path inserted, else at the origin's;
 * then the first authorization server it names, whose metadata is looked for at the RFC 8414 and
 * OpenID discovery URIs in the specification's order. oauth4webapi checks each answer (status,
 * JSON, `resource` and `issuer` identical to what was asked for); the URLs are ours, because its
 * `discoveryRequest` lacks the OpenID path-insertion form the specification lists.
 */

export interface UpstreamDiscovery {
  /** What `resource` carries in every authorization and token request (RFC 8707): the upstream's URL. */
  resource: string;
  authorizationServer: oauth.AuthorizationServer;
  /** The scopes to ask for when the tool names none: the challenge's `scope`, else the metadata's `scopes_supported`. */
  scopes?: string[];
}

const MAX_URL_LENGTH = 2048;

/** The upstream's URL as a resource indicator: RFC 8707 forbids a fragment. */
export function resourceOf(upstreamUrl: string): URL | undefined {
  const url = upstreamUrl.length <= MAX_URL_LENGTH ? URL.parse(upstreamUrl) : null;
  if (!url || !['http:', 'https:'].includes(url.protocol) || url.username || url.password) return undefined;
  url.hash = '';
  return url;
}

/** The `Bearer` challenge's `resource_metadata` and `scope`, parsed by oauth4webapi. */
export async function readChallenge(header: string): Promise<{ resourceMetadata?: string; scope?: string }> {
  // oauth4webapi parses WWW-Authenticate only in a response it processes; an answer of 401 with
  // the header makes any of its response steps reject with the parsed challenges.
  let challenges: oauth.WWWAuthenticateChallenge[] = [];
  try {
    await oauth.processRevocationResponse(new Response(null, { status: 401, headers: { 'www-authenticate': header } }));
  } catch (error) {
    if (error instanceof oauth.WWWAuthenticateChallengeError) challenges = error.cause;
  }
  const bearer = challenges.find((challenge) => challenge.scheme === 'bearer');
  return { resourceMetadata: bearer?.parameters.resource_metadata, scope: bearer?.parameters.scope };
}

/**
 * The well-known URIs of a resource's metadata, in the order tried, each with the `resource` its
 * document must name: the path inserted (RFC 9728 §3.1), naming the upstream itself; then the
 * origin's, which describes the origin as a whole and so must name the origin.
 */
export function protectedResourceMetadataUrls(resource: URL): { url: URL; expected: URL }[] {
  const inserted = new URL(resource.href);
  const path = resource.pathname === '/' ? '' : resource.pathname;
  inserted.pathname = `/.well-known/oauth-protected-resource${path}`;
  const candidates = [{ url: inserted, expected: resource }];
  if (path || resource.search) {
    const origin = new URL(resource.origin);
    candidates.push({ url: new URL('/.well-known/oauth-protected-resource', origin), expected: origin });
  }
  return candidates;
}

/**
 * The metadata URIs of an authorization server, in the MCP specification's order: with a path,
 * RFC 8414 path insertion, OpenID path insertion, OpenID path appending; without, RFC 8414 then
 * OpenID.
 */
export function authorizationServerMetadataUrls(issuer: URL): URL[] {
  const path = issuer.pathname.replace(/\/$/, '');
  const at = (pathname: string) => Object.assign(new URL(issuer.origin), { pathname });
  if (!path) return [at('/.well-known/oauth-authorization-server'), at('/.well-known/openid-configuration')];
  return [
    at(`/.well-known/oauth-authorization-server${path}`),
    at(`/.well-known/openid-configuration${path}`),
    at(`${path}/.well-known/openid-configuration`),
  ];
}

/** The first candidate whose answer conforms; the first failure that says more than "not here" ends the search. */
async function firstFound<T>(candidates: (() => Promise<OAuthResult<T>>)[], notFound: string): Promise<OAuthResult<T>> {
  for (const candidate of candidates) {
    const result = await candidate();
    if (result.ok) return result;
    // Every candidate is on the same host: an address refused, a host unreachable or an http URL
    // where https is required would be so for the next ones too.
    if (['address_refused', 'unreachable', 'insecure_url', 'redirect_refused'].includes(result.error)) return result;
  }
  return failed('no_metadata', notFound);
}

const fetchResourceMetadata = (url: URL, expected: URL, access: NetworkAccess) =>
  step('The protected resource metadata', async () =>
    oauth.processResourceDiscoveryResponse(expected, await getMetadata(url, access)),
  );

const fetchServerMetadata = (url: URL, issuer: URL, access: NetworkAccess) =>
  step("The authorization server's metadata", async () =>
    oauth.processDiscoveryResponse(issuer, await getMetadata(url, access)),
  );

/** The resource's metadata: from the challenge's URL when there is one (RFC 9728 §5.1), else the well-known URIs. */
function resourceMetadata(resource: URL, metadataUrl: string | undefined, access: NetworkAccess) {
  if (metadataUrl !== undefined) {
    const url = metadataUrl.length <= MAX_URL_LENGTH ? URL.parse(metadataUrl) : null;
    if (!url) return Promise.resolve(failed('invalid_response', 'The challenge names no usable resource_metadata URL'));
    // RFC 9728 §3.3: metadata found through the challenge must name the URL that was requested.
    return fetchResourceMetadata(url, resource, access);
  }
  const candidates = protectedResourceMetadataUrls(resource).map(
    ({ url, expected }) =>
      () =>
        fetchResourceMetadata(url, expected, access),
  );
  return firstFound(candidates, 'The upstream publishes no protected resource metadata (RFC 9728)');
}

/** The authorization server's metadata, from the first URI that answers it for exactly that issuer. */
export function authorizationServerMetadata(issuer: string, access: NetworkAccess) {
  const url = issuer.length <= MAX_URL_LENGTH ? URL.parse(issuer) : null;
  if (!url || !['http:', 'https:'].includes(url.protocol))
    return Promise.resolve(
      failed('invalid_response', 'The protected resource metadata names no usable authorization server'),
    );
  const candidates = authorizationServerMetadataUrls(url).map(
    (candidate) => () => fetchServerMetadata(candidate, url, access),
  );
  return firstFound(candidates, 'The authorization server publishes no metadata (RFC 8414 or OpenID discovery)');
}

const stringsOf = (value: unknown): string[] | undefined =>
  Array.isArray(value) && value.every((item) => typeof item === 'string') ? value : undefined;

/**
 * The upstream's authorization server, and what to ask it for. `challenge` is the
 * `WWW-Authenticate` header of the upstream's 401, when the caller has one.
 */
export async function discoverUpstream(
  upstreamUrl: string,
  access: NetworkAccess,
  options: { challenge?: string } = {},
): Promise<OAuthResult<UpstreamDiscovery>> {
  const resource = resourceOf(upstreamUrl);
  if (!resource) return failed('insecure_url', 'The upstream URL is not an http(s) URL without credentials');
  const checked = await step('The upstream URL', async () => checkUrl(resource, access));
  if (!checked.ok) return checked;
  const challenge = options.challenge ? await readChallenge(options.challenge) : {};
  const found = await resourceMetadata(resource, challenge.resourceMetadata, access);
  if (!found.ok) return found;
  // MCP leaves the choice among several servers to the client: the first, the resource's preference.
  const issuer = stringsOf(found.value.authorization_servers)?.[0];
  if (!issuer) return failed('invalid_response', 'The protected resource metadata names no authorization server');
  const server = await authorizationServerMetadata(issuer, access);
  if (!server.ok) return server;
  const scopes = challenge.scope?.split(' ').filter(Boolean) ?? stringsOf(found.value.scopes_supported);
  return {
    ok: true,
    value: { resource: resource.href, authorizationServer: server.value, ...(scopes?.length ? { scopes } : {}) },
  };
}
