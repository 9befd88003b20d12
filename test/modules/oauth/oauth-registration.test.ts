/**
 * The gateway as the authorization server of its MCP endpoints, first part
 * (docs/decisions/0047-mcp-oauth.md): RFC 8414 and RFC 9728 metadata, and Dynamic Client
 * Registration (RFC 7591) with its rules and its throttle, on the real app and database. The
 * MCP SDK's own client-side discovery and registration run against it over a real port.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { discoverOAuthServerInfo, registerClient } from '@modelcontextprotocol/sdk/client/auth.js';
import { startTestApp, type TestApp } from '../../support/app.js';

let t: TestApp;
let server: http.Server;
let base: string;

beforeAll(async () => {
  // The issuer is PUBLIC_URL, which must be where clients reach the service: listen first.
  let handler: http.RequestListener = (_req, res) => res.writeHead(503).end();
  server = http.createServer((req, res) => handler(req, res));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  t = await startTestApp({ PUBLIC_URL: base, OAUTH_REGISTRATIONS_PER_ADDRESS: '1000' });
  handler = t.app.yoga as unknown as http.RequestListener;
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
  await t?.close();
});

const register = (body: unknown, clientAddress?: string) =>
  t.request('POST', '/oauth/register', { body, clientAddress });

const clientCount = async () =>
  Number((await t.database.db.sql.query<{ n: string }>('SELECT count(*) AS n FROM oauth_clients'))[0].n);

describe('metadata', () => {
  test('authorization-server metadata (RFC 8414) names PUBLIC_URL as the issuer and the endpoints as decided', async () => {
    const response = await t.request('GET', '/.well-known/oauth-authorization-server');
    expect(response.status).toBe(200);
    expect(response.body).toEqual({
      issuer: base,
      authorization_endpoint: `${base}/oauth/authorize`,
      token_endpoint: `${base}/oauth/token`,
      registration_endpoint: `${base}/oauth/register`,
      revocation_endpoint: `${base}/oauth/revoke`,
      jwks_uri: `${base}/.well-known/jwks.json`,
      response_types_supported: ['code'],
      grant_types_supported: ['authorization_code', 'refresh_token'],
      code_challenge_methods_supported: ['S256'],
      token_endpoint_auth_methods_supported: ['none'],
      revocation_endpoint_auth_methods_supported: ['none'],
      client_id_metadata_document_supported: true,
      authorization_response_iss_parameter_supported: true,
      scopes_supported: ['mcp:tools'],
    });
    expect(response.headers.get('access-control-allow-origin')).toBe('*');
    expect(response.headers.get('cache-control')).toBe('public, max-age=300');
  });

  test("protected-resource metadata (RFC 9728) per agent: the agent's MCP endpoint and this issuer, whether or not the agent exists", async () => {
    const response = await t.request('GET', '/.well-known/oauth-protected-resource/mcp/support-bot');
    expect(response.status).toBe(200);
    expect(response.body).toEqual({
      resource: `${base}/mcp/support-bot`,
      authorization_servers: [base],
      scopes_supported: ['mcp:tools'],
      bearer_methods_supported: ['header'],
      resource_name: 'Agent Gateway: the tools of agent support-bot',
    });
  });

  test('a path that names no agent is 404 in OAuth’s error format; another method is 405; a preflight is answered for any origin', async () => {
    for (const path of [
      '/.well-known/oauth-protected-resource',
      '/.well-known/oauth-protected-resource/mcp/',
      '/.well-known/oauth-protected-resource/mcp/Not%20An%20Id',
      '/.well-known/oauth-protected-resource/api/v1',
    ]) {
      const response = await t.request('GET', path);
      expect({ path, status: response.status, error: response.body?.error }).toEqual({
        path,
        status: 404,
        error: 'not_found',
      });
    }
    const post = await t.request('POST', '/.well-known/oauth-authorization-server', { body: {} });
    expect(post.status).toBe(405);
    expect(post.headers.get('allow')).toBe('GET, HEAD, OPTIONS');
    const preflight = await t.request('OPTIONS', '/oauth/register', {
      headers: { origin: 'http://localhost:6274', 'access-control-request-method': 'POST' },
    });
    expect(preflight.status).toBe(204);
    expect(preflight.headers.get('access-control-allow-origin')).toBe('*');
    expect(preflight.headers.get('access-control-allow-headers')).toContain('Content-Type');
  });

  test("the MCP SDK's client discovers the agent's authorization server from its MCP endpoint", async () => {
    const info = await discoverOAuthServerInfo(`${base}/mcp/support-bot`);
    expect(info.authorizationServerUrl.replace(/\/$/, '')).toBe(base);
    expect(info.authorizationServerMetadata?.registration_endpoint).toBe(`${base}/oauth/register`);
    expect(info.resourceMetadata?.resource).toBe(`${base}/mcp/support-bot`);
  });
});

describe('Dynamic Client Registration', () => {
  test('a public client registers with loopback and https redirect URIs, as mcp-remote and hosted clients do', async () => {
    const before = await clientCount();
    const response = await register({
      client_name: 'mcp-remote test',
      redirect_uris: [
        'http://localhost:3334/oauth/callback',
        'http://127.0.0.1:6274/callback',
        'https://client.example/cb',
      ],
      token_endpoint_auth_method: 'none',
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      client_uri: 'https://client.example',
      unknown_field: 'ignored',
    });
    expect(response.status).toBe(201);
    expect(response.headers.get('cache-control')).toBe('no-store');
    expect(response.body).toEqual({
      client_id: expect.stringMatching(/^agc_[A-Za-z0-9_-]{22}$/),
      client_id_issued_at: expect.any(Number),
      client_name: 'mcp-remote test',
      client_uri: 'https://client.example',
      redirect_uris: [
        'http://localhost:3334/oauth/callback',
        'http://127.0.0.1:6274/callback',
        'https://client.example/cb',
      ],
      token_endpoint_auth_method: 'none',
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
    });
    expect(Math.abs(response.body.client_id_issued_at - Date.now() / 1000)).toBeLessThan(60);
    expect(await clientCount()).toBe(before + 1);
    // What was stored is what was answered: the client resolves to the same registration.
    expect(await t.app.services.oauth.resolveClient(response.body.client_id)).toEqual({
      client: {
        client_id: response.body.client_id,
        kind: 'registered',
        registration: {
          client_name: response.body.client_name,
          client_uri: response.body.client_uri,
          redirect_uris: response.body.redirect_uris,
        },
      },
    });
  });

  test("the MCP SDK's registerClient registers against the discovered metadata", async () => {
    const info = await discoverOAuthServerInfo(`${base}/mcp/support-bot`);
    const client = await registerClient(info.authorizationServerUrl, {
      metadata: info.authorizationServerMetadata,
      clientMetadata: {
        client_name: 'sdk client',
        redirect_uris: ['http://localhost:8090/callback'],
        token_endpoint_auth_method: 'none',
      },
    });
    expect(client.client_id).toMatch(/^agc_/);
    expect(client.redirect_uris).toEqual(['http://localhost:8090/callback']);
  });

  test.each([
    [{}, 'invalid_redirect_uri', /redirect_uris is required/],
    [{ redirect_uris: [] }, 'invalid_redirect_uri', /redirect_uris is required/],
    [
      { redirect_uris: ['http://client.example/cb'] },
      'invalid_redirect_uri',
      /plain http on a host other than the loopback/,
    ],
    [{ redirect_uris: ['https://client.example/cb#frag'] }, 'invalid_redirect_uri', /fragment/],
    [{ redirect_uris: ['javascript:alert(1)'] }, 'invalid_redirect_uri', /scheme javascript/],
    [{ redirect_uris: ['/relative'] }, 'invalid_redirect_uri', /not an absolute URL/],
    [{ redirect_uris: ['https://user:pw@client.example/cb'] }, 'invalid_redirect_uri', /user information/],
    [{ redirect_uris: ['https://client.example/\u0000cb'] }, 'invalid_redirect_uri', /control characters/],
    [
      { redirect_uris: ['https://client.example/cb'], client_name: 'nul\u0000' },
      'invalid_client_metadata',
      /control characters/,
    ],
    [
      { redirect_uris: Array.from({ length: 11 }, (_, i) => `https://client.example/${i}`) },
      'invalid_redirect_uri',
      /At most 10/,
    ],
    [
      { redirect_uris: ['https://client.example/cb'], token_endpoint_auth_method: 'client_secret_basic' },
      'invalid_client_metadata',
      /public/,
    ],
    [
      { redirect_uris: ['https://client.example/cb'], grant_types: ['client_credentials'] },
      'invalid_client_metadata',
      /grant_types/,
    ],
    [
      { redirect_uris: ['https://client.example/cb'], response_types: ['token'] },
      'invalid_client_metadata',
      /response_types/,
    ],
    [
      { redirect_uris: ['https://client.example/cb'], client_name: 'x'.repeat(201) },
      'invalid_client_metadata',
      /at most 200/,
    ],
    [
      { redirect_uris: ['https://client.example/cb'], client_name: 'bad\u0007name' },
      'invalid_client_metadata',
      /control characters/,
    ],
    [
      { redirect_uris: ['https://client.example/cb'], logo_uri: 'http://client.example/logo.png' },
      'invalid_client_metadata',
      /https URL/,
    ],
    [[], 'invalid_client_metadata', /JSON object/],
  ])('refused, nothing stored: %j', async (body, error, description) => {
    const before = await clientCount();
    const response = await register(body);
    expect(response.status).toBe(400);
    expect(response.body).toEqual({ error, error_description: expect.stringMatching(description) });
    expect(await clientCount()).toBe(before);
  });

  test('a body that is not JSON, or not sent as JSON, is refused; GET is 405', async () => {
    const text = await t.request('POST', '/oauth/register', {
      body: 'redirect_uris=https://x',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
    });
    expect(text.status).toBe(400);
    expect(text.body.error).toBe('invalid_client_metadata');
    const broken = await t.request('POST', '/oauth/register', {
      body: '{"redirect_uris": [',
      headers: { 'content-type': 'application/json' },
    });
    expect(broken.status).toBe(400);
    expect(broken.body.error_description).toMatch(/not valid JSON/);
    const get = await t.request('GET', '/oauth/register');
    expect(get.status).toBe(405);
  });
});

describe('throttling and expiry', () => {
  let limited: TestApp;
  beforeAll(async () => {
    limited = await startTestApp({ OAUTH_REGISTRATIONS_PER_ADDRESS: '3' }, { db: t.database.db });
  });
  afterAll(() => limited?.app.stop());

  test('concurrent registrations from one address past the limit: exactly the limit registered, the rest 429 with Retry-After; another address is not held up', async () => {
    const valid = { redirect_uris: ['http://localhost:9999/cb'] };
    // A refused registration costs no count.
    expect((await limited.request('POST', '/oauth/register', { body: {}, clientAddress: '198.51.100.7' })).status).toBe(
      400,
    );
    const answers = await Promise.all(
      Array.from({ length: 8 }, () =>
        limited.request('POST', '/oauth/register', { body: valid, clientAddress: '198.51.100.7' }),
      ),
    );
    const statuses = answers.map((a) => a.status).sort();
    expect(statuses).toEqual([201, 201, 201, 429, 429, 429, 429, 429]);
    const refused = answers.find((a) => a.status === 429)!;
    expect(refused.body).toEqual({
      error: 'temporarily_unavailable',
      error_description: expect.stringMatching(/Too many client registrations/),
    });
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(
      (await limited.request('POST', '/oauth/register', { body: valid, clientAddress: '198.51.100.8' })).status,
    ).toBe(201);
  });

  test('a registration unused for 30 days is unknown, and maintenance deletes it; a used one lives on', async () => {
    const oauth = t.app.services.oauth;
    const stale = (await register({ redirect_uris: ['https://stale.example/cb'] })).body.client_id;
    const used = (await register({ redirect_uris: ['https://used.example/cb'] })).body.client_id;
    await t.database.db.sql.query(
      `UPDATE oauth_clients SET last_used_at = now() - interval '31 days' WHERE client_id = ANY($1::text[])`,
      [[stale, used]],
    );
    // What a grant or a token of the client does (test/oauth-flow.test.ts checks that they do).
    await t.database.db.sql.query(`UPDATE oauth_clients SET last_used_at = now() WHERE client_id = $1`, [used]);
    expect(await oauth.resolveClient(stale)).toEqual({ unknown: expect.stringMatching(/expired/) });
    expect(await oauth.resolveClient(used)).toMatchObject({ client: { client_id: used } });
    await oauth.prune();
    const left = await t.database.db.sql.query<{ client_id: string }>(
      'SELECT client_id FROM oauth_clients WHERE client_id = ANY($1::text[])',
      [[stale, used]],
    );
    expect(left.map((r) => r.client_id)).toEqual([used]);
  });
});

test('with the database gone: registration is 503 temporarily_unavailable with Retry-After and nothing of the cause; the metadata, which needs no database, is still served', async () => {
  const broken = await startTestApp({ PUBLIC_URL: base });
  await broken.database.db.close();
  try {
    const response = await broken.request('POST', '/oauth/register', {
      body: { redirect_uris: ['https://client.example/cb'] },
    });
    expect(response.status).toBe(503);
    expect(response.headers.get('retry-after')).toBe('2');
    expect(response.body).toEqual({
      error: 'temporarily_unavailable',
      error_description: expect.stringMatching(/cannot reach its database/),
    });
    expect(response.text).not.toMatch(/select|insert|pglite|pg\b|stack|at \w+ \(/i);
    expect((await broken.request('GET', '/.well-known/oauth-authorization-server')).status).toBe(200);
    // A refused registration is refused before the database is asked, outage or not.
    expect((await broken.request('POST', '/oauth/register', { body: {} })).status).toBe(400);
  } finally {
    await broken.app.stop();
    await broken.database.close().catch(() => undefined);
  }
});
