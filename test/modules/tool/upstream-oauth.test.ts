/**
 * The gateway as an OAuth client of a tool's upstream (docs/decisions/0067-upstream-oauth-client.md),
 * against real components on loopback: panva's `oidc-provider` as the authorization server, its
 * login and consent forms driven over HTTP, and an MCP server of the official SDK that takes only
 * the provider's tokens for itself (test/support/oauth-upstream.ts). Every request the library
 * makes goes through the address policy, which opens 127.0.0.1 only: servers on 127.0.0.2 stand
 * for addresses it must not reach.
 */
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { PrivateNetworks } from '../../../src/lib/address-policy.js';
import {
  type AuthorizationServer,
  authorizationServerMetadata,
  authorizationServerMetadataUrls,
  clientCredentialsToken,
  discoverUpstream,
  finishAuthorization,
  needsRefresh,
  type OAuthResult,
  protectedResourceMetadataUrls,
  type RegisteredClient,
  refreshTokens,
  registerClient,
  registrationChoice,
  revokeToken,
  startAuthorization,
  type UpstreamTokens,
  upstreamClientId,
  upstreamClientMetadataDocument,
  upstreamRedirectUri,
} from '../../../src/modules/tool/upstream-oauth.js';
import {
  type ProtectedMcpServer,
  startAuthorizationServer,
  startProtectedMcpServer,
  type TestAuthorizationServer,
  TOOLS_SCOPE,
} from '../../support/oauth-upstream.js';
import { signInAtProvider } from '../../support/oidc-provider.js';
import { type Hit, type RecordingServer, startRecordingServer } from '../../support/recording-server.js';

const PUBLIC_URL = 'https://gateway.test';
const REDIRECT_URI = upstreamRedirectUri(PUBLIC_URL);
/** What a tool with `allow_private_network` gets on a deployment that opened 127.0.0.1 alone. */
const access = { privateNetworks: PrivateNetworks.parse('127.0.0.1/32'), allowPrivateNetwork: true };
const NOW = 1_700_000_000_000;
const now = () => NOW;

/** Every secret the tests saw, and every failure: no failure may quote one (the last test). */
const secrets = new Set<string>();
const failures: unknown[] = [];

let as: TestAuthorizationServer;
/** A second authorization server, for the mix-up attack. */
let otherAs: TestAuthorizationServer;
let upstream: ProtectedMcpServer;
/** Serves the gateway's Client ID Metadata Document where the provider fetches `https://gateway.test/…`. */
let gateway: RecordingServer;
const gatewayHits: Hit[] = [];
let asMetadata: AuthorizationServer;
/** A server on 127.0.0.2, which the access does not open: nothing may ever reach it. */
let forbidden: RecordingServer;
const forbiddenHits: Hit[] = [];
const closers: (() => Promise<void>)[] = [];
const resources: string[] = [];

beforeAll(async () => {
  gateway = await startRecordingServer(gatewayHits, (_hit, res) =>
    res
      .writeHead(200, { 'content-type': 'application/json' })
      .end(JSON.stringify(upstreamClientMetadataDocument(PUBLIC_URL))),
  );
  as = await startAuthorizationServer({
    resources: () => resources,
    redirectUri: REDIRECT_URI,
    // The provider refuses loopback on its own fetch; the document is the gateway's, served here.
    fetchClientDocument: (url) => fetch(String(url).replace(PUBLIC_URL, gateway.base)),
  });
  otherAs = await startAuthorizationServer({ resources: () => resources, redirectUri: REDIRECT_URI });
  upstream = await startProtectedMcpServer({ issuer: as.issuer });
  resources.push(upstream.url);
  forbidden = await startRecordingServer(forbiddenHits, (_hit, res) => res.writeHead(200).end('{}'), 0, '127.0.0.2');
  closers.push(gateway.close, as.close, otherAs.close, upstream.close, forbidden.close);
  for (const value of [as.machine.client_secret, as.given.client_secret, otherAs.given.client_secret])
    secrets.add(value);
  asMetadata = settled(await discoverUpstream(upstream.url, access)).authorizationServer;
});

afterAll(async () => {
  await Promise.all(closers.map((close) => close()));
});

/** The value of a result that must have succeeded. */
function settled<T>(result: OAuthResult<T>): T {
  if (!result.ok) throw new Error(`expected success, got ${result.error}: ${result.message}`);
  return result.value;
}

/** The failure of a result that must have failed, kept for the last test's search. */
function refused<T>(result: OAuthResult<T>) {
  if (result.ok) throw new Error('expected a failure');
  failures.push(result);
  return result;
}

function keep(tokens: UpstreamTokens): UpstreamTokens {
  secrets.add(tokens.access_token);
  if (tokens.refresh_token) secrets.add(tokens.refresh_token);
  return tokens;
}

const dynamicClient = async (server = asMetadata) =>
  settled(await registerClient(server, { redirectUri: REDIRECT_URI, clientName: 'Agent Gateway' }, access));

/** The browser's part: the provider's login and consent, back at the redirect URI with the code; what the callback is held to. */
async function authorize(client: RegisteredClient, server = asMetadata, login = 'alice') {
  const started = settled(
    await startAuthorization(
      server,
      client,
      { redirectUri: REDIRECT_URI, resource: upstream.url, scopes: [TOOLS_SCOPE] },
      access,
    ),
  );
  secrets.add(started.codeVerifier);
  const callback = await signInAtProvider(started.authorizationUrl, login, REDIRECT_URI);
  secrets.add(callback.searchParams.get('code') ?? '');
  const check = {
    callbackUrl: callback.href,
    expectedState: started.state,
    codeVerifier: started.codeVerifier,
    redirectUri: REDIRECT_URI,
    resource: upstream.url,
  };
  return { started, callback, check };
}

/** The whole code flow: the tokens the gateway keeps. */
async function connect(client: RegisteredClient, login = 'alice') {
  const { check } = await authorize(client, asMetadata, login);
  return keep(settled(await finishAuthorization(asMetadata, client, check, access, now)));
}

/** The upstream's tool, called with the MCP SDK's client and the token. */
async function whoami(accessToken: string) {
  const client = new Client({ name: 'test', version: '1' });
  const transport = new StreamableHTTPClientTransport(new URL(upstream.url), {
    authProvider: { token: async () => accessToken },
  });
  await client.connect(transport);
  try {
    return (await client.callTool({ name: 'whoami', arguments: {} })).structuredContent as Record<string, unknown>;
  } finally {
    await client.close();
  }
}

/** A server of fixed answers (metadata pointing where a test wants, endpoints that misbehave). */
async function fixture(
  routes: Record<string, (base: string) => { status: number; body?: unknown; headers?: Record<string, string> }>,
) {
  const hits: Hit[] = [];
  let base = '';
  const server = await startRecordingServer(hits, (hit, res) => {
    const route = routes[hit.path.split('?')[0]];
    const answer = route ? route(base) : { status: 404, body: { error: 'not_found' } };
    res
      .writeHead(answer.status, { 'content-type': 'application/json', ...answer.headers })
      .end(JSON.stringify(answer.body ?? {}));
  });
  base = server.base;
  closers.push(server.close);
  return { base, hits };
}

const count = (server: TestAuthorizationServer, path: string) => server.hits.get(path) ?? 0;

describe('discovery', () => {
  test("from the upstream's 401 challenge: its resource_metadata URL, then the authorization server's metadata", async () => {
    const answer = await fetch(upstream.url, {
      method: 'POST',
      body: '{}',
      headers: { 'content-type': 'application/json' },
    });
    expect(answer.status).toBe(401);
    const challenge = answer.headers.get('www-authenticate')!;
    const before = upstream.hits.length;
    const found = settled(await discoverUpstream(upstream.url, access, { challenge }));
    expect(found.resource).toBe(upstream.url);
    expect(found.authorizationServer.issuer).toBe(as.issuer);
    expect(found.scopes).toEqual([TOOLS_SCOPE]);
    expect(upstream.hits.slice(before).map((hit) => hit.path)).toEqual(['/resource-metadata']);
  });

  test('without a challenge: the well-known URI with the path inserted, then RFC 8414 metadata', async () => {
    const before = upstream.hits.length;
    const [oauthBefore, oidcBefore] = [
      count(as, '/.well-known/oauth-authorization-server'),
      count(as, '/.well-known/openid-configuration'),
    ];
    const found = settled(await discoverUpstream(upstream.url, access));
    expect(found.authorizationServer.token_endpoint).toBe(`${as.issuer}/token`);
    expect(upstream.hits.slice(before).map((hit) => hit.path)).toEqual(['/.well-known/oauth-protected-resource/mcp']);
    expect(count(as, '/.well-known/oauth-authorization-server')).toBe(oauthBefore + 1);
    expect(count(as, '/.well-known/openid-configuration')).toBe(oidcBefore);
  });

  test("an issuer with a path: each metadata URI in the MCP specification's order until one answers", async () => {
    // Only the last form (OpenID discovery, path appended) answers.
    const server = await fixture({
      '/.well-known/oauth-protected-resource/mcp': (base) => ({
        status: 200,
        body: { resource: `${base}/mcp`, authorization_servers: [`${base}/tenant1`] },
      }),
      '/tenant1/.well-known/openid-configuration': (base) => ({
        status: 200,
        body: { issuer: `${base}/tenant1`, authorization_endpoint: `${base}/a`, token_endpoint: `${base}/t` },
      }),
    });
    const found = settled(await discoverUpstream(`${server.base}/mcp`, access));
    expect(found.authorizationServer.token_endpoint).toBe(`${server.base}/t`);
    expect(found.scopes).toBeUndefined();
    expect(server.hits.map((hit) => hit.path)).toEqual([
      '/.well-known/oauth-protected-resource/mcp',
      '/.well-known/oauth-authorization-server/tenant1',
      '/.well-known/openid-configuration/tenant1',
      '/tenant1/.well-known/openid-configuration',
    ]);
  });

  test("the origin's well-known metadata, naming the origin, when the path's is missing", async () => {
    const atOrigin = await startProtectedMcpServer({ issuer: as.issuer, wellKnown: 'origin' });
    closers.push(atOrigin.close);
    const found = settled(await discoverUpstream(atOrigin.url, access));
    expect(found.resource).toBe(atOrigin.url);
    expect(atOrigin.hits.map((hit) => hit.path)).toEqual([
      '/.well-known/oauth-protected-resource/mcp',
      '/.well-known/oauth-protected-resource',
    ]);
  });

  test('no metadata anywhere, or metadata naming another resource, is a failure that says so', async () => {
    const bare = await startProtectedMcpServer({ issuer: as.issuer, wellKnown: 'none' });
    closers.push(bare.close);
    expect(refused(await discoverUpstream(bare.url, access)).error).toBe('no_metadata');
    // The challenge's metadata must name the URL that was asked (RFC 9728 §3.3): another upstream's is refused.
    const challenge = `Bearer resource_metadata="${bare.metadataUrl}"`;
    expect(refused(await discoverUpstream(upstream.url, access, { challenge })).error).toBe('invalid_response');
  });

  test("the URIs tried, in the MCP specification's order", () => {
    const hrefs = (urls: URL[]) => urls.map((url) => url.href);
    expect(hrefs(authorizationServerMetadataUrls(new URL('https://auth.example/tenant1')))).toEqual([
      'https://auth.example/.well-known/oauth-authorization-server/tenant1',
      'https://auth.example/.well-known/openid-configuration/tenant1',
      'https://auth.example/tenant1/.well-known/openid-configuration',
    ]);
    expect(hrefs(authorizationServerMetadataUrls(new URL('https://auth.example')))).toEqual([
      'https://auth.example/.well-known/oauth-authorization-server',
      'https://auth.example/.well-known/openid-configuration',
    ]);
    const candidates = protectedResourceMetadataUrls(new URL('https://api.example/public/mcp'));
    expect(candidates.map(({ url, expected }) => [url.href, expected.href])).toEqual([
      ['https://api.example/.well-known/oauth-protected-resource/public/mcp', 'https://api.example/public/mcp'],
      ['https://api.example/.well-known/oauth-protected-resource', 'https://api.example/'],
    ]);
  });
});

describe('registration', () => {
  test('dynamic registration (RFC 7591) as a confidential client', async () => {
    const client = await dynamicClient();
    secrets.add(client.client_secret!);
    expect(client).toMatchObject({ registration: 'dynamic', token_endpoint_auth_method: 'client_secret_basic' });
    expect(client.client_secret).toEqual(expect.any(String));
  });

  test("the client the tool's config gives comes first", async () => {
    const client = settled(
      await registerClient(
        asMetadata,
        {
          given: as.given,
          clientMetadataUrl: upstreamClientId(PUBLIC_URL),
          redirectUri: REDIRECT_URI,
          clientName: 'x',
        },
        access,
      ),
    );
    expect(client).toEqual({ ...as.given, token_endpoint_auth_method: 'client_secret_basic', registration: 'given' });
    const tokens = await connect(client, 'grace');
    expect((await whoami(tokens.access_token)).client_id).toBe('given');
  });

  test('a Client ID Metadata Document when the server supports them: the provider fetches the gateway’s', async () => {
    expect(asMetadata.client_id_metadata_document_supported).toBe(true);
    const client = settled(
      await registerClient(
        asMetadata,
        { clientMetadataUrl: upstreamClientId(PUBLIC_URL), redirectUri: REDIRECT_URI, clientName: 'x' },
        access,
      ),
    );
    expect(client).toEqual({
      client_id: 'https://gateway.test/oauth/upstream-client.json',
      token_endpoint_auth_method: 'none',
      registration: 'metadata_document',
    });
    const tokens = await connect(client, 'carol');
    expect(gatewayHits.map((hit) => hit.path)).toContain('/oauth/upstream-client.json');
    expect(await whoami(tokens.access_token)).toMatchObject({ sub: 'carol', client_id: client.client_id });
  });

  test('the document the gateway serves, and the order of choice', () => {
    expect(upstreamClientMetadataDocument('https://gw.example/')).toEqual({
      client_id: 'https://gw.example/oauth/upstream-client.json',
      client_name: 'Agent Gateway',
      redirect_uris: ['https://gw.example/oauth/upstream/callback'],
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      token_endpoint_auth_method: 'none',
    });
    const server = { issuer: 'https://as.example', registration_endpoint: 'https://as.example/reg' };
    const url = 'https://gw.example/oauth/upstream-client.json';
    expect(
      registrationChoice({ ...server, client_id_metadata_document_supported: true }, { clientMetadataUrl: url }),
    ).toBe('metadata_document');
    expect(registrationChoice(server, { clientMetadataUrl: url })).toBe('dynamic');
    expect(registrationChoice({ issuer: 'https://as.example' }, { clientMetadataUrl: url })).toBeUndefined();
  });

  test('a server that offers no way to register is a clear failure', async () => {
    const failure = refused(
      await registerClient({ issuer: 'https://as.example' }, { redirectUri: REDIRECT_URI, clientName: 'x' }, access),
    );
    expect(failure).toMatchObject({ error: 'no_registration', transient: false });
    expect(failure.message).toContain('offers no way to register');
  });
});

describe('the authorization code flow', () => {
  test('PKCE S256, state and resource; the token is bound to the upstream, which accepts it', async () => {
    const client = await dynamicClient();
    secrets.add(client.client_secret!);
    const { started, callback, check } = await authorize(client);
    const request = new URL(started.authorizationUrl).searchParams;
    expect(request.get('code_challenge_method')).toBe('S256');
    expect(request.get('resource')).toBe(upstream.url);
    expect(request.get('state')).toBe(started.state);
    expect(started.authorizationUrl).not.toContain(started.codeVerifier);
    expect(callback.searchParams.get('iss')).toBe(as.issuer);
    const tokens = keep(settled(await finishAuthorization(asMetadata, client, check, access, now)));
    expect(tokens).toMatchObject({ token_type: 'bearer', scope: TOOLS_SCOPE, expires_at: NOW + 600_000 });
    expect(tokens.refresh_token).toEqual(expect.any(String));
    expect(await whoami(tokens.access_token)).toMatchObject({ sub: 'alice', aud: upstream.url });
    expect(needsRefresh(tokens, NOW)).toBe(false);
    expect(needsRefresh(tokens, NOW + 600_000 - 30_000)).toBe(true);
  });

  test('a server that does not list S256 is refused before anything starts', async () => {
    const { code_challenge_methods_supported: _, ...withoutPkce } = asMetadata;
    const client = { client_id: 'x' };
    const request = { redirectUri: REDIRECT_URI, resource: upstream.url };
    expect(refused(await startAuthorization(withoutPkce, client, request, access)).error).toBe('pkce_unsupported');
    const plainOnly = { ...asMetadata, code_challenge_methods_supported: ['plain'] };
    expect(refused(await startAuthorization(plainOnly, client, request, access)).error).toBe('pkce_unsupported');
  });
});

describe('refresh, revocation, client credentials', () => {
  test('refresh rotates the refresh token; the old one is refused afterwards as invalid_grant, and ends the grant', async () => {
    const client = await dynamicClient();
    const first = await connect(client);
    const request = { refreshToken: first.refresh_token!, resource: upstream.url };
    const second = keep(settled(await refreshTokens(asMetadata, client, request, access, now)));
    expect(second.refresh_token).not.toBe(first.refresh_token);
    expect(second.access_token).not.toBe(first.access_token);
    expect(await whoami(second.access_token)).toMatchObject({ sub: 'alice' });
    const again = refused(await refreshTokens(asMetadata, client, request, access, now));
    expect(again).toMatchObject({ error: 'invalid_grant', transient: false, oauth_error: 'invalid_grant' });
    // The provider takes a used refresh token presented again for a replay and revokes the grant: the
    // successor is refused too. Two processes refreshing one connection at once would end it.
    const successor = { refreshToken: second.refresh_token!, resource: upstream.url };
    expect(refused(await refreshTokens(asMetadata, client, successor, access)).error).toBe('invalid_grant');
  });

  test('a revoked refresh token (RFC 7009) is invalid_grant: the connection needs authorizing again', async () => {
    const client = await dynamicClient();
    const tokens = await connect(client);
    const revoked = settled(
      await revokeToken(asMetadata, client, { token: tokens.refresh_token!, tokenTypeHint: 'refresh_token' }, access),
    );
    expect(revoked).toEqual({ revoked: true });
    const refresh = await refreshTokens(
      asMetadata,
      client,
      { refreshToken: tokens.refresh_token!, resource: upstream.url },
      access,
    );
    expect(refused(refresh)).toMatchObject({ error: 'invalid_grant', transient: false });
  });

  test('a 5xx or an unreachable token endpoint is transient, not invalid_grant', async () => {
    const down = await fixture({ '/token': () => ({ status: 503, body: { error: 'temporarily_unavailable' } }) });
    const client: RegisteredClient = {
      client_id: 'c',
      client_secret: 'fixture-secret-value',
      token_endpoint_auth_method: 'client_secret_basic',
      registration: 'given',
    };
    secrets.add('fixture-secret-value');
    const request = { refreshToken: 'fixture-refresh-token', resource: upstream.url };
    secrets.add('fixture-refresh-token');
    const busy = refused(
      await refreshTokens({ issuer: down.base, token_endpoint: `${down.base}/token` }, client, request, access),
    );
    expect(busy).toMatchObject({ error: 'server_error', transient: true });
    const closed = await startRecordingServer([], () => undefined);
    await closed.close();
    const gone = refused(
      await refreshTokens({ issuer: closed.base, token_endpoint: `${closed.base}/token` }, client, request, access),
    );
    expect(gone).toMatchObject({ error: 'unreachable', transient: true });
  });

  test('client credentials: a token for a machine API, bound to the resource', async () => {
    const config = {
      token_url: asMetadata.token_endpoint!,
      ...as.machine,
      scopes: [TOOLS_SCOPE],
    };
    const tokens = keep(settled(await clientCredentialsToken(config, access, { resource: upstream.url, now })));
    expect(tokens).toMatchObject({ token_type: 'bearer', expires_at: NOW + 600_000 });
    expect(tokens.refresh_token).toBeUndefined();
    expect(await whoami(tokens.access_token)).toMatchObject({ client_id: 'machine', aud: upstream.url });
    const wrong = refused(await clientCredentialsToken({ ...config, client_secret: 'not-the-secret' }, access));
    expect(wrong).toMatchObject({ error: 'oauth_error', oauth_error: 'invalid_client', transient: false });
    secrets.add('not-the-secret');
  });

  test('revocation is a no-op where the server offers none', async () => {
    const { revocation_endpoint: _, ...without } = asMetadata;
    const client = await dynamicClient();
    expect(settled(await revokeToken(without, client, { token: 'anything' }, access))).toEqual({ revoked: false });
  });
});

describe('hostile servers and callbacks', () => {
  /** An authorization started at `as`, and the check its callback will be held to. */
  async function pending() {
    const client = await dynamicClient();
    const { callback, check } = await authorize(client);
    return { client, callback, check };
  }

  test('a callback with another state is refused before the code is sent anywhere', async () => {
    const { client, callback, check } = await pending();
    const tokenRequests = count(as, '/token');
    const forged = new URL(callback);
    forged.searchParams.set('state', 'another-state');
    const failure = refused(
      await finishAuthorization(asMetadata, client, { ...check, callbackUrl: forged.href }, access),
    );
    expect(failure.error).toBe('state_mismatch');
    expect(count(as, '/token')).toBe(tokenRequests);
  });

  test('mix-up: a code from another server, with its iss or without any, is refused before it is sent anywhere', async () => {
    const { client, check } = await pending();
    // The other server's own flow: its code, and `iss` naming it.
    const otherMetadata = settled(await authorizationServerMetadata(otherAs.issuer, access));
    const { callback: otherCallback } = await authorize(await dynamicClient(otherMetadata), otherMetadata);
    // It sends the browser to the gateway's callback with the state it saw in the request sent to it.
    const mixed = new URL(otherCallback);
    mixed.searchParams.set('state', check.expectedState);
    const tokenRequests = [count(as, '/token'), count(otherAs, '/token')];
    const withIss = await finishAuthorization(asMetadata, client, { ...check, callbackUrl: mixed.href }, access);
    expect(refused(withIss).error).toBe('issuer_mismatch');
    mixed.searchParams.delete('iss');
    const withoutIss = await finishAuthorization(asMetadata, client, { ...check, callbackUrl: mixed.href }, access);
    expect(refused(withoutIss).error).toBe('issuer_mismatch');
    expect([count(as, '/token'), count(otherAs, '/token')]).toEqual(tokenRequests);
  });

  test('an error in the callback is the server’s refusal, with its code only', async () => {
    const { client, check } = await pending();
    const denied = new URL(REDIRECT_URI);
    denied.search = new URLSearchParams({
      error: 'access_denied',
      error_description: 'free text a server wrote',
      state: check.expectedState,
      iss: as.issuer,
    }).toString();
    const failure = refused(
      await finishAuthorization(asMetadata, client, { ...check, callbackUrl: denied.href }, access),
    );
    expect(failure).toMatchObject({ error: 'authorization_error', oauth_error: 'access_denied' });
    expect(failure.message).not.toContain('free text');
  });

  test('metadata pointing at an address the access does not open: refused before any byte is sent', async () => {
    // An upstream whose resource metadata names an authorization server on 127.0.0.2.
    const elsewhere = await fixture({
      '/.well-known/oauth-protected-resource/mcp': (base) => ({
        status: 200,
        body: { resource: `${base}/mcp`, authorization_servers: [forbidden.base] },
      }),
    });
    const discovery = refused(await discoverUpstream(`${elsewhere.base}/mcp`, access));
    expect(discovery.error).toBe('address_refused');
    expect(discovery.message).toContain('OUTBOUND_PRIVATE_NETWORKS');
    // An authorization server on 127.0.0.1 whose endpoints are on 127.0.0.2, or link-local.
    const server = await fixture({
      '/.well-known/oauth-protected-resource/mcp': (base) => ({
        status: 200,
        body: { resource: `${base}/mcp`, authorization_servers: [base] },
      }),
      '/.well-known/oauth-authorization-server': (base) => ({
        status: 200,
        body: {
          issuer: base,
          authorization_endpoint: `${base}/authorize`,
          token_endpoint: `${forbidden.base}/token`,
          registration_endpoint: `${forbidden.base}/register`,
          revocation_endpoint: 'http://169.254.169.254/revoke',
          code_challenge_methods_supported: ['S256'],
        },
      }),
    });
    const found = settled(await discoverUpstream(`${server.base}/mcp`, access)).authorizationServer;
    const client: RegisteredClient = { client_id: 'c', token_endpoint_auth_method: 'none', registration: 'dynamic' };
    const outcomes: OAuthResult<unknown>[] = [
      await registerClient(found, { redirectUri: REDIRECT_URI, clientName: 'x' }, access),
      await refreshTokens(found, client, { refreshToken: 'fixture-refresh-token' }, access),
      await revokeToken(found, client, { token: 'fixture-refresh-token' }, access),
      await clientCredentialsToken(
        { token_url: `${forbidden.base}/token`, client_id: 'c', client_secret: 's' },
        access,
      ),
    ];
    expect(outcomes.map((outcome) => refused(outcome).error)).toEqual(Array(4).fill('address_refused'));
    expect(forbiddenHits).toEqual([]);
  });

  test('http to a public name is refused: https is required where the address is not a permitted private one', async () => {
    const server = { ...asMetadata, token_endpoint: 'http://as.example/token' };
    const client: RegisteredClient = { client_id: 'c', token_endpoint_auth_method: 'none', registration: 'dynamic' };
    const outcome = await refreshTokens(server, client, { refreshToken: 'fixture-refresh-token' }, access);
    expect(refused(outcome).error).toBe('insecure_url');
    const pageAtHttp = { ...asMetadata, authorization_endpoint: 'http://as.example/authorize' };
    const start = await startAuthorization(
      pageAtHttp,
      client,
      { redirectUri: REDIRECT_URI, resource: upstream.url },
      access,
    );
    expect(refused(start).error).toBe('insecure_url');
  });

  test('a token endpoint answering a redirect to another origin: not followed', async () => {
    const targetHits: Hit[] = [];
    const target = await startRecordingServer(targetHits, (_hit, res) => res.writeHead(200).end('{}'));
    closers.push(target.close);
    const redirecting = await fixture({
      '/token': () => ({ status: 307, headers: { location: `${target.base}/token` } }),
    });
    const server = { issuer: redirecting.base, token_endpoint: `${redirecting.base}/token` };
    const client: RegisteredClient = {
      client_id: 'c',
      client_secret: 'fixture-secret-value',
      token_endpoint_auth_method: 'client_secret_basic',
      registration: 'given',
    };
    const outcome = await refreshTokens(server, client, { refreshToken: 'fixture-refresh-token' }, access);
    expect(refused(outcome)).toMatchObject({ error: 'redirect_refused', transient: false });
    expect(redirecting.hits).toHaveLength(1);
    expect(targetHits).toEqual([]);
  });

  test('what no step does: throw, or quote a token, code, verifier or secret in a failure', async () => {
    const client: RegisteredClient = { client_id: 'c', token_endpoint_auth_method: 'none', registration: 'dynamic' };
    const broken = { callbackUrl: 'not a url', expectedState: 's', codeVerifier: 'v', redirectUri: 'r', resource: 'x' };
    expect(refused(await finishAuthorization(asMetadata, client, broken, access)).error).toBe('invalid_response');
    expect(refused(await refreshTokens({ issuer: 'x' }, client, { refreshToken: 'r' }, access)).error).toBe(
      'invalid_response',
    );
    expect(refused(await discoverUpstream('javascript:alert(1)', access)).error).toBe('insecure_url');
    expect(failures.length).toBeGreaterThan(20);
    expect(secrets.size).toBeGreaterThan(20);
    const text = JSON.stringify(failures);
    for (const secret of secrets) if (secret) expect(text).not.toContain(secret);
  });
});
