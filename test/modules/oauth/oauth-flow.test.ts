/**
 * The gateway as the OAuth 2.1 authorization server of its MCP endpoints
 * (docs/decisions/0047-mcp-oauth.md), step by step on the real app and database: the
 * authorization endpoint and what it never redirects, the consent fields the console calls, the
 * token endpoint (PKCE, single-use codes, rotating refresh tokens, reuse revoking the grant),
 * access tokens accepted only at their agent's MCP endpoint, grants listed and revoked (API,
 * RFC 7009, the agent's deactivation) with their audit events. Real clients (the SDK's OAuth
 * client, mcp-remote, a browser on the consent page) are in test/oauth-clients.e2e.test.ts.
 */
import { decodeJwt, decodeProtectedHeader } from 'jose';
import { LOOPBACK_UPSTREAMS, startTestApp, type TestApp } from '../../support/app.js';
import { createMcpHandler, McpServer } from '@modelcontextprotocol/server';
import { startRecordingServer, type Hit } from '../../support/recording-server.js';
import { serveWithWebHandler } from '../../support/web-handler.js';
import { signAccessToken } from '../../../src/modules/oauth/oauth-tokens.js';
import { addUser, signUp, type OrgFixture } from '../../support/fixtures.js';
import { readyAgent, type AgentFixture } from '../../support/gateway.js';
import {
  authorizationParams,
  authorizeUrl,
  connectClient,
  decide,
  DESCRIBE,
  form,
  mcpRequest,
  pkce,
  REDIRECT_URI,
  redirectAnswer,
  registerClient,
  tokenRequest,
} from '../../support/oauth.js';

let t: TestApp;
let publicUrl: string;
let org: OrgFixture;
let agent: AgentFixture;

beforeAll(async () => {
  t = await startTestApp({ ...LOOPBACK_UPSTREAMS, OAUTH_REGISTRATIONS_PER_ADDRESS: '10000' });
  publicUrl = t.app.env.publicUrl;
  org = await signUp(t, 'oauth');
  agent = await readyAgent(t, org);
});

afterAll(async () => {
  await t?.close();
});

const MCP_HEADERS = { accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-06-18' };
const mcp = (svcId: string, token: string, body?: Record<string, unknown>) => mcpRequest(t, svcId, token, body);

const callTool = (
  svcId: string,
  token: string,
  name = 'billing__read',
  args: Record<string, unknown> = { invoice: 'inv-1' },
) => mcp(svcId, token, { jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name, arguments: args } });

const grantsOf = (svcId: string, token = org.adminToken) =>
  t.request('GET', `/api/v1/agents/${svcId}/grants`, { token });

async function auditOf(action: string) {
  const response = await t.request('GET', `/api/v1/orgs/${org.orgId}/audit-logs?action=${action}&limit=200`, {
    token: org.adminToken,
  });
  expect(response.status).toBe(200);
  return response.body.items as Array<{
    actor: { type: string; id: string | null; label: string };
    target: { type: string; id: string };
    before: any;
    after: any;
    reason: string | null;
  }>;
}

describe('the authorization endpoint', () => {
  let clientId: string;
  beforeAll(async () => {
    clientId = await registerClient(t);
  });

  test('a valid request goes to the console’s consent page with its parameters, never framed and without a referrer', async () => {
    const params = authorizationParams(publicUrl, clientId, agent.svcId, pkce().challenge);
    const response = await t.request('GET', authorizeUrl(params));
    expect(response.status).toBe(302);
    const location = new URL(response.headers.get('location')!, 'http://gateway.test');
    expect(location.pathname).toBe('/console/authorize');
    expect(Object.fromEntries(location.searchParams)).toEqual(params);
    expect(response.headers.get('x-frame-options')).toBe('DENY');
    expect(response.headers.get('content-security-policy')).toContain("frame-ancestors 'none'");
    expect(response.headers.get('referrer-policy')).toBe('no-referrer');
  });

  test('an unknown client, a missing or unregistered redirect URI (an open redirect attempt) or a repeated parameter: a page, never a redirect', async () => {
    const valid = authorizationParams(publicUrl, clientId, agent.svcId, pkce().challenge);
    const cases: Array<[string, Partial<typeof valid> | string, RegExp]> = [
      ['unknown client', { ...valid, client_id: 'agc_unknown' }, /not known/],
      ['a NUL in the client id', { ...valid, client_id: 'agc_\u0000' }, /not known/],
      ['a client id of 100,000 characters', { ...valid, client_id: `agc_${'a'.repeat(100_000)}` }, /not known/],
      [
        'a metadata document URL with a control character',
        { ...valid, client_id: 'https://client.example/doc\u0001.json' },
        /control characters/,
      ],
      ['no client', { ...valid, client_id: undefined }, /client_id is missing/],
      ['no redirect_uri', { ...valid, redirect_uri: undefined }, /no redirect_uri/],
      ['open redirect', { ...valid, redirect_uri: 'https://evil.example/steal' }, /not one the client registered/],
      [
        'another path on the same host',
        { ...valid, redirect_uri: 'http://127.0.0.1:33418/other' },
        /not one the client registered/,
      ],
      [
        'repeated',
        `${authorizeUrl(valid)}&redirect_uri=${encodeURIComponent('https://evil.example/')}`,
        /redirect_uri is repeated/,
      ],
    ];
    for (const [name, params, message] of cases) {
      const url = typeof params === 'string' ? params : authorizeUrl(params);
      const page = await t.request('GET', url, { headers: { accept: 'text/html' } });
      expect({ name, status: page.status, location: page.headers.get('location') }).toEqual({
        name,
        status: 400,
        location: null,
      });
      expect({ name, type: page.headers.get('content-type') }).toEqual({ name, type: 'text/html; charset=utf-8' });
      expect(page.text).toMatch(message);
      const program = await t.request('GET', url);
      expect({ name, body: program.body }).toEqual({
        name,
        body: { error: 'invalid_request', error_description: expect.stringMatching(message) },
      });
    }
  });

  test('a loopback redirect URI may use any port (RFC 8252 §7.3); the answer goes to the port asked for', async () => {
    const params = authorizationParams(publicUrl, clientId, agent.svcId, pkce().challenge, {
      redirect_uri: 'http://127.0.0.1:51234/callback',
    });
    expect((await t.request('GET', authorizeUrl(params))).headers.get('location')).toMatch(/^\/console\/authorize\?/);
    const decided = await decide(t, org.adminToken, params, false);
    expect(decided.body.data.decide_oauth_authorization.redirect_to).toMatch(
      /^http:\/\/127\.0\.0\.1:51234\/callback\?/,
    );
  });

  test('once client and redirect URI are known, every other problem goes back to the client with state and iss (RFC 9207)', async () => {
    const valid = authorizationParams(publicUrl, clientId, agent.svcId, pkce().challenge);
    const cases: Array<[Partial<typeof valid>, string]> = [
      [{ response_type: 'token' }, 'unsupported_response_type'],
      [{ code_challenge: undefined }, 'invalid_request'],
      [{ code_challenge_method: 'plain' }, 'invalid_request'],
      [{ code_challenge: 'short' }, 'invalid_request'],
      [{ state: undefined }, 'invalid_request'],
      [{ resource: undefined }, 'invalid_target'],
      [{ resource: `${publicUrl}/api/v1/orgs` }, 'invalid_target'],
      [{ resource: `https://elsewhere.example/mcp/${agent.svcId}` }, 'invalid_target'],
      [{ scope: 'mcp:tools admin' }, 'invalid_scope'],
    ];
    for (const [override, error] of cases) {
      const response = await t.request('GET', authorizeUrl({ ...valid, ...override }));
      expect(response.status).toBe(302);
      const location = response.headers.get('location')!;
      expect(location.startsWith(`${REDIRECT_URI}?`)).toBe(true);
      const answer = redirectAnswer(location);
      expect({ override, error: answer.error, iss: answer.iss, state: answer.state }).toEqual({
        override,
        error,
        iss: publicUrl,
        state: override.state === undefined && 'state' in override ? undefined : valid.state,
      });
      expect(answer.error_description).toBeTruthy();
    }
  });

  test('a client metadata document URL on a private address is never fetched: the request is refused on the page', async () => {
    const params = authorizationParams(publicUrl, 'https://10.0.0.1/client.json', agent.svcId, pkce().challenge);
    const response = await t.request('GET', authorizeUrl(params));
    expect(response.status).toBe(400);
    expect(response.headers.get('location')).toBeNull();
    expect(response.body.error_description).toMatch(/not known.*(private|not allowed|address)/i);
  });
});

describe('consent', () => {
  let clientId: string;
  beforeAll(async () => {
    clientId = await registerClient(t, [REDIRECT_URI], 'Claude (test)');
  });

  test('the page shows the client, its redirect host, the agent of the operator’s org and the scope; an admin may allow', async () => {
    const params = authorizationParams(publicUrl, clientId, agent.svcId, pkce().challenge);
    const response = await t.graphql(DESCRIBE, params, { token: org.adminToken });
    expect(response.body.errors).toBeUndefined();
    expect(response.body.data.oauth_authorization_request).toEqual({
      client: {
        client_id: clientId,
        name: 'Claude (test)',
        kind: 'registered',
        client_uri: null,
        redirect_uri: REDIRECT_URI,
        redirect_host: '127.0.0.1:33418',
      },
      agent: { agent_id: agent.svcId, name: 'Test agent', status: 'active' },
      agent_id: agent.svcId,
      resource: `${publicUrl}/mcp/${agent.svcId}`,
      scope: 'mcp:tools',
      can_allow: true,
      refusal: null,
    });
  });

  test('a viewer sees the request but cannot allow it (403); they can deny', async () => {
    const viewer = await addUser(t, org, 'viewer');
    const params = authorizationParams(publicUrl, clientId, agent.svcId, pkce().challenge);
    const view = await t.graphql(DESCRIBE, params, { token: viewer.token });
    expect(view.body.data.oauth_authorization_request).toMatchObject({
      can_allow: false,
      refusal: expect.stringMatching(/viewer/),
    });
    const allowed = await decide(t, viewer.token, params, true);
    expect(allowed.body.errors[0].extensions.code).toBe('FORBIDDEN');
    expect(allowed.status).toBe(403);
    const denied = await decide(t, viewer.token, params, false);
    expect(redirectAnswer(denied.body.data.decide_oauth_authorization.redirect_to)).toMatchObject({
      error: 'access_denied',
      state: params.state,
      iss: publicUrl,
    });
  });

  test('an org without that agent cannot allow; nothing of the other org’s agent is shown', async () => {
    const other = await signUp(t, 'oauth-other');
    const params = authorizationParams(publicUrl, clientId, agent.svcId, pkce().challenge);
    const view = await t.graphql(DESCRIBE, params, { token: other.adminToken });
    expect(view.body.data.oauth_authorization_request).toMatchObject({
      agent: null,
      can_allow: false,
      refusal: expect.stringMatching(/no agent/),
    });
    const allowed = await decide(t, other.adminToken, params, true);
    expect(allowed.body.errors[0].extensions.code).toBe('FORBIDDEN');
  });

  test('Deny sends the client access_denied with its state and the issuer; no grant is made', async () => {
    const before = (await grantsOf(agent.svcId)).body.total;
    const params = authorizationParams(publicUrl, clientId, agent.svcId, pkce().challenge);
    const denied = await decide(t, org.adminToken, params, false);
    const location = denied.body.data.decide_oauth_authorization.redirect_to;
    expect(location.startsWith(`${REDIRECT_URI}?`)).toBe(true);
    expect(redirectAnswer(location)).toEqual({
      error: 'access_denied',
      error_description: expect.any(String),
      state: params.state,
      iss: publicUrl,
    });
    expect((await grantsOf(agent.svcId)).body.total).toBe(before);
  });

  test('the consent fields need a signed-in operator: no token, an API key, or a tampered request are refused', async () => {
    const params = authorizationParams(publicUrl, clientId, agent.svcId, pkce().challenge);
    const anonymous = await t.graphql(DESCRIBE, params);
    expect(anonymous.body.errors[0].extensions.code).toBe('AUTHENTICATION_REQUIRED');
    const withKey = await t.request('POST', '/graphql', {
      apiKey: agent.key,
      body: { query: DESCRIBE, variables: params },
    });
    expect(withKey.body.errors[0].extensions.code).toBe('FORBIDDEN');
    const tampered = await decide(t, org.adminToken, { ...params, redirect_uri: 'https://evil.example/' }, true);
    expect(tampered.body.errors[0]).toMatchObject({
      extensions: { code: 'BAD_REQUEST' },
      message: expect.stringMatching(/not one the client registered/),
    });
  });
});

describe('tokens', () => {
  let clientId: string;
  beforeAll(async () => {
    clientId = await registerClient(t);
  });

  async function codeFor(svcId = agent.svcId) {
    const { verifier, challenge } = pkce();
    const params = authorizationParams(publicUrl, clientId, svcId, challenge);
    const decided = await decide(t, org.adminToken, params, true);
    const answer = redirectAnswer(decided.body.data.decide_oauth_authorization.redirect_to);
    expect(answer).toEqual({ code: expect.stringMatching(/^oac_/), state: params.state, iss: publicUrl });
    return { code: answer.code, verifier, params };
  }

  const exchange = (code: string, verifier: string | undefined, overrides: Record<string, string | undefined> = {}) =>
    tokenRequest(t, {
      grant_type: 'authorization_code',
      code,
      redirect_uri: REDIRECT_URI,
      client_id: clientId,
      code_verifier: verifier,
      resource: `${publicUrl}/mcp/${agent.svcId}`,
      ...overrides,
    });

  test('a code and its verifier give an RFC 9068 access token for the agent’s endpoint and a refresh token; never cached', async () => {
    const { code, verifier } = await codeFor();
    const response = await exchange(code, verifier);
    expect(response.status).toBe(200);
    expect(response.body).toEqual({
      access_token: expect.any(String),
      token_type: 'Bearer',
      expires_in: 3600,
      refresh_token: expect.stringMatching(/^ort_[A-Za-z0-9_-]{43}$/),
      scope: 'mcp:tools',
    });
    expect(response.headers.get('cache-control')).toBe('no-store');
    expect(response.headers.get('access-control-allow-origin')).toBe('*');
    const header = decodeProtectedHeader(response.body.access_token);
    expect(header).toMatchObject({ alg: 'EdDSA', typ: 'at+jwt', kid: expect.stringMatching(/^oauth_/) });
    const claims = decodeJwt(response.body.access_token);
    expect(claims).toEqual({
      iss: publicUrl,
      aud: `${publicUrl}/mcp/${agent.svcId}`,
      sub: agent.svcId,
      org_id: org.orgId,
      client_id: clientId,
      scope: 'mcp:tools',
      grant_id: expect.stringMatching(/^ogr_/),
      jti: expect.any(String),
      iat: expect.any(Number),
      exp: (claims.iat as number) + 3600,
    });
    // The key is published for anyone who wants to check a token offline.
    const jwks = await t.request('GET', '/.well-known/jwks.json');
    expect(jwks.body.keys.map((k: { kid: string }) => k.kid)).toContain(header.kid);
  });

  test('PKCE: a missing verifier is invalid_request; a wrong one is invalid_grant and uses the code up', async () => {
    const { code, verifier } = await codeFor();
    const missing = await exchange(code, undefined);
    expect(missing.body).toEqual({ error: 'invalid_request', error_description: 'code_verifier is required' });
    const wrong = await exchange(code, pkce().verifier);
    expect(wrong.status).toBe(400);
    expect(wrong.body).toEqual({
      error: 'invalid_grant',
      error_description: 'code_verifier does not match the code_challenge',
    });
    const afterwards = await exchange(code, verifier);
    expect(afterwards.body.error).toBe('invalid_grant');
  });

  test('the redirect URI, the client and the resource must be the authorization request’s', async () => {
    const other = await registerClient(t);
    const cases: Array<[Record<string, string>, string, RegExp]> = [
      [{ redirect_uri: 'http://127.0.0.1:33418/elsewhere' }, 'invalid_grant', /redirect_uri/],
      [{ client_id: other }, 'invalid_grant', /another client/],
      [{ resource: `${publicUrl}/mcp/another-agent` }, 'invalid_target', /resource/],
    ];
    for (const [override, error, message] of cases) {
      const { code, verifier } = await codeFor();
      const response = await exchange(code, verifier, override);
      expect({ override, body: response.body }).toEqual({
        override,
        body: { error, error_description: expect.stringMatching(message) },
      });
    }
  });

  test('a code used twice: the second is refused and the grant, with the tokens the first got, is revoked', async () => {
    const { code, verifier } = await codeFor();
    const first = await exchange(code, verifier);
    expect(first.status).toBe(200);
    expect((await callTool(agent.svcId, first.body.access_token)).status).toBe(200);
    const second = await exchange(code, verifier);
    expect(second.body).toEqual({
      error: 'invalid_grant',
      error_description: expect.stringMatching(/already used.*revoked/),
    });
    const refused = await callTool(agent.svcId, first.body.access_token);
    expect(refused.status).toBe(401);
    expect(refused.headers.get('www-authenticate')).toMatch(
      /error="invalid_token", error_description="The grant of this access token has been revoked"/,
    );
    const refresh = await tokenRequest(t, {
      grant_type: 'refresh_token',
      refresh_token: first.body.refresh_token,
      client_id: clientId,
    });
    expect(refresh.body.error).toBe('invalid_grant');
    const { grant_id } = decodeJwt(first.body.access_token);
    const revoked = (await auditOf('oauth.grant_revoked')).find((e) => e.target.id === grant_id);
    expect(revoked).toMatchObject({ actor: { type: 'system' }, reason: 'authorization code used twice' });
  });

  test('five exchanges of one code at once: exactly one gets tokens, and the others, being second uses, revoke its grant', async () => {
    const { code, verifier } = await codeFor();
    const answers = await Promise.all(Array.from({ length: 5 }, () => exchange(code, verifier)));
    expect(answers.map((a) => a.status).sort()).toEqual([200, 400, 400, 400, 400]);
    const winner = answers.find((a) => a.status === 200)!;
    expect(answers.filter((a) => a.status === 400).every((a) => a.body.error === 'invalid_grant')).toBe(true);
    expect((await callTool(agent.svcId, winner.body.access_token)).status).toBe(401);
  });

  test('five rotations of one refresh token at once: exactly one succeeds, and the reuse revokes the grant', async () => {
    const { code, verifier } = await codeFor();
    const first = (await exchange(code, verifier)).body;
    const answers = await Promise.all(
      Array.from({ length: 5 }, () =>
        tokenRequest(t, { grant_type: 'refresh_token', refresh_token: first.refresh_token, client_id: clientId }),
      ),
    );
    expect(answers.map((a) => a.status).sort()).toEqual([200, 400, 400, 400, 400]);
    const winner = answers.find((a) => a.status === 200)!;
    const next = await tokenRequest(t, {
      grant_type: 'refresh_token',
      refresh_token: winner.body.refresh_token,
      client_id: clientId,
    });
    expect(next.body).toEqual({ error: 'invalid_grant', error_description: expect.stringMatching(/revoked/) });
  });

  test('an expired code is refused', async () => {
    const { code, verifier } = await codeFor();
    await t.database.db.sql.query(`UPDATE oauth_codes SET expires_at = now() - interval '1 second'`);
    expect((await exchange(code, verifier)).body).toEqual({
      error: 'invalid_grant',
      error_description: 'The authorization code has expired',
    });
  });

  test('refresh tokens rotate; presenting a used one revokes the grant and every token of it', async () => {
    const { code, verifier } = await codeFor();
    const first = (await exchange(code, verifier)).body;
    const rotated = await tokenRequest(t, {
      grant_type: 'refresh_token',
      refresh_token: first.refresh_token,
      client_id: clientId,
    });
    expect(rotated.status).toBe(200);
    expect(rotated.body.refresh_token).not.toBe(first.refresh_token);
    expect(decodeJwt(rotated.body.access_token).grant_id).toBe(decodeJwt(first.access_token).grant_id);
    expect((await callTool(agent.svcId, rotated.body.access_token)).status).toBe(200);
    const reused = await tokenRequest(t, {
      grant_type: 'refresh_token',
      refresh_token: first.refresh_token,
      client_id: clientId,
    });
    expect(reused.body).toEqual({
      error: 'invalid_grant',
      error_description: expect.stringMatching(/already used.*revoked/),
    });
    expect((await callTool(agent.svcId, rotated.body.access_token)).status).toBe(401);
    const next = await tokenRequest(t, {
      grant_type: 'refresh_token',
      refresh_token: rotated.body.refresh_token,
      client_id: clientId,
    });
    expect(next.body).toEqual({ error: 'invalid_grant', error_description: expect.stringMatching(/revoked/) });
  });

  test('a refresh token of another client is refused and left as it was', async () => {
    const { code, verifier } = await codeFor();
    const first = (await exchange(code, verifier)).body;
    const other = await registerClient(t);
    const refused = await tokenRequest(t, {
      grant_type: 'refresh_token',
      refresh_token: first.refresh_token,
      client_id: other,
    });
    expect(refused.body).toEqual({
      error: 'invalid_grant',
      error_description: 'The refresh token was issued to another client',
    });
    expect(
      (await tokenRequest(t, { grant_type: 'refresh_token', refresh_token: first.refresh_token, client_id: clientId }))
        .status,
    ).toBe(200);
  });

  test('malformed requests get OAuth errors: wrong media type, repeated or missing fields, unknown grant types', async () => {
    const asJson = await t.request('POST', '/oauth/token', { body: { grant_type: 'authorization_code' } });
    expect(asJson.body.error).toBe('invalid_request');
    const repeated = await t.request('POST', '/oauth/token', {
      body: 'grant_type=refresh_token&refresh_token=a&refresh_token=b&client_id=x',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
    });
    expect(repeated.body).toEqual({
      error: 'invalid_request',
      error_description: 'The parameter refresh_token is repeated',
    });
    expect((await tokenRequest(t, { grant_type: 'password' })).body.error).toBe('unsupported_grant_type');
    expect((await tokenRequest(t, {})).body.error).toBe('invalid_request');
    expect(
      (
        await tokenRequest(t, {
          grant_type: 'authorization_code',
          code: 'x',
          redirect_uri: REDIRECT_URI,
          client_id: clientId,
          code_verifier: pkce().verifier,
        })
      ).body,
    ).toEqual({
      error: 'invalid_grant',
      error_description: expect.stringMatching(/malformed/),
    });
    const get = await t.request('GET', '/oauth/token');
    expect(get.status).toBe(405);
  });
});

describe('access tokens at the MCP endpoint', () => {
  let connected: Awaited<ReturnType<typeof connectClient>>;
  beforeAll(async () => {
    connected = await connectClient(t, publicUrl, org.adminToken, agent.svcId);
  });

  test('list and call the agent’s tools; the call is decided and recorded like any other, naming the grant where a key would be', async () => {
    const listed = await mcp(agent.svcId, connected.accessToken);
    expect(listed.status).toBe(200);
    expect(listed.body.result.tools.map((tool: { name: string }) => tool.name).sort()).toEqual([
      'billing__read',
      'billing__refund',
    ]);
    const called = await callTool(agent.svcId, connected.accessToken);
    expect(called.body.result.isError).toBe(false);
    const interactionId = called.body.result._meta['agent-gateway/interaction_id'];
    const record = await t.request('GET', `/api/v1/records/${interactionId}`, { token: org.adminToken });
    expect(record.body).toMatchObject({ channel: 'mcp', decision: 'allow', executed: true });
  });

  test('the access token never reaches the tool: an http tool gets its own headers and the signed body only', async () => {
    const hits: Hit[] = [];
    const receiver = await startRecordingServer(hits, (_hit, res) =>
      res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}'),
    );
    try {
      const owner = await signUp(t, 'oauth-http');
      const tool = await t.request('POST', `/api/v1/orgs/${owner.orgId}/tools`, {
        token: owner.adminToken,
        body: {
          action_type: 'crm',
          connector: 'http',
          config: { url: `${receiver.base}/tool`, allow_private_network: true, headers: { 'x-tool-key': 'own' } },
        },
      });
      expect(tool.status).toBe(201);
      const crmAgent = await readyAgent(t, owner, { capabilities: ['crm:lookup'], tool: false });
      const client = await connectClient(t, publicUrl, owner.adminToken, crmAgent.svcId);
      const called = await callTool(crmAgent.svcId, client.accessToken, 'crm__lookup', { customer: 'c-1' });
      expect(called.body.result.isError).toBe(false);
      expect(hits).toHaveLength(1);
      expect(hits[0].headers['x-tool-key']).toBe('own');
      expect(hits[0].headers.authorization).toBeUndefined();
      expect(JSON.stringify(hits[0])).not.toContain(client.accessToken);
      expect(JSON.stringify(hits[0])).not.toContain(client.accessToken.split('.')[2]);
    } finally {
      await receiver.close();
    }
  });

  test('nor an upstream MCP server: the mcp tool sends its own headers on every request of the exchange', async () => {
    const hits: Hit[] = [];
    const upstream = createMcpHandler(() => {
      const server = new McpServer({ name: 'crm-2026', version: '1.0.0' });
      server.registerTool('lookup', {}, async () => ({ content: [{ type: 'text', text: 'gold' }] }));
      return server;
    });
    const receiver = await startRecordingServer(hits, (hit, res, req) =>
      serveWithWebHandler(upstream.fetch, hit, req, res),
    );
    try {
      const owner = await signUp(t, 'oauth-upstream');
      const tool = await t.request('POST', `/api/v1/orgs/${owner.orgId}/tools`, {
        token: owner.adminToken,
        body: {
          action_type: 'crm',
          connector: 'mcp',
          config: { url: `${receiver.base}/mcp`, allow_private_network: true, headers: { 'x-upstream-key': 'own' } },
        },
      });
      expect(tool.status).toBe(201);
      const crmAgent = await readyAgent(t, owner, { capabilities: ['crm:lookup'], tool: false });
      const client = await connectClient(t, publicUrl, owner.adminToken, crmAgent.svcId);
      const called = await callTool(crmAgent.svcId, client.accessToken, 'crm__lookup', {});
      expect(called.body.result.isError).toBe(false);
      expect(hits.length).toBeGreaterThan(0);
      for (const hit of hits) {
        expect(hit.headers['x-upstream-key']).toBe('own');
        expect(hit.headers.authorization).toBeUndefined();
        expect(JSON.stringify(hit)).not.toContain(client.accessToken.split('.')[2]);
      }
    } finally {
      await receiver.close();
    }
  });

  test('an approval the grant asks for names the grant as who asked', async () => {
    const needsHuman = await readyAgent(t, org, {
      capabilities: ['billing:read'],
      constraints: { max_actions_per_hour: 100, max_actions_per_day: 100, require_human_approval: ['billing:read'] },
    });
    const client = await connectClient(t, publicUrl, org.adminToken, needsHuman.svcId);
    const called = await callTool(needsHuman.svcId, client.accessToken);
    const approvalId = called.body.result.structuredContent.approval_id;
    expect(approvalId).toBeTruthy();
    const approval = await t.request('GET', `/api/v1/orgs/${org.orgId}/approvals/${approvalId}`, {
      token: org.adminToken,
    });
    expect(approval.body.requested_by).toBe(client.grantId);
  });

  test('accepted only at its own agent’s endpoint: another agent, REST and GraphQL answer 401', async () => {
    const other = await readyAgent(t, org);
    const elsewhere = await mcp(other.svcId, connected.accessToken);
    expect(elsewhere.status).toBe(401);
    expect(elsewhere.headers.get('www-authenticate')).toBe(
      `Bearer resource_metadata="${publicUrl}/.well-known/oauth-protected-resource/mcp/${other.svcId}", scope="mcp:tools", error="invalid_token", error_description="The access token is for another resource: it is accepted only at the MCP endpoint it was issued for"`,
    );
    const rest = await t.request('GET', `/api/v1/agents/${agent.svcId}`, { token: connected.accessToken });
    expect(rest.status).toBe(401);
    const execute = await t.request('POST', '/api/v1/gateway/execute', {
      token: connected.accessToken,
      body: { svc_id: agent.svcId, agent_id: agent.svcId, action: { type: 'billing', tool: 'read', params: {} } },
    });
    expect(execute.status).toBe(401);
    const graphql = await t.graphql('{ agents { total } }', {}, { token: connected.accessToken });
    expect(graphql.body.errors[0].extensions.code).toBe('INVALID_TOKEN');
  });

  test('a token altered, signed by another kind of key, or expired is refused; API keys keep working', async () => {
    const [head, body, signature] = connected.accessToken.split('.');
    const altered = `${head}.${Buffer.from(JSON.stringify({ ...decodeJwt(connected.accessToken), scope: 'admin' })).toString('base64url')}.${signature}`;
    expect((await mcp(agent.svcId, altered)).status).toBe(401);
    expect((await mcp(agent.svcId, org.adminToken)).status).toBe(401);
    expect((await mcp(agent.svcId, `${head}.${body}`)).status).toBe(401);
    // Signed with the real key, every claim right, two hours old.
    const claims = decodeJwt(connected.accessToken);
    const expired = await signAccessToken(
      await t.app.keys.activeKey('oauth'),
      publicUrl,
      {
        aud: claims.aud as string,
        sub: claims.sub!,
        org_id: org.orgId,
        client_id: connected.clientId,
        scope: 'mcp:tools',
        grant_id: connected.grantId,
      },
      'oat_expired',
      Date.now() - 2 * 3600 * 1000,
    );
    const refused = await mcp(agent.svcId, expired.token);
    expect(refused.status).toBe(401);
    expect(refused.headers.get('www-authenticate')).toContain('error_description="The access token has expired"');
    const withKey = await t.request('POST', `/mcp/${agent.svcId}`, {
      body: { jsonrpc: '2.0', id: 1, method: 'tools/list', params: {} },
      headers: { ...MCP_HEADERS, 'x-api-key': agent.key },
    });
    expect(withKey.status).toBe(200);
  });
});

describe('grants', () => {
  test('listed per agent (any role), revoked by an operator: 204, gone from the list, its tokens refused, audited', async () => {
    const connected = await connectClient(t, publicUrl, org.adminToken, agent.svcId);
    const viewer = await addUser(t, org, 'viewer');
    const listed = await grantsOf(agent.svcId, viewer.token);
    expect(listed.status).toBe(200);
    const grant = listed.body.items.find((g: { grant_id: string }) => g.grant_id === connected.grantId);
    expect(grant).toEqual({
      grant_id: connected.grantId,
      agent_id: agent.svcId,
      client_id: connected.clientId,
      client_name: 'Test MCP client',
      redirect_uri: REDIRECT_URI,
      scope: 'mcp:tools',
      approved_by: org.adminEmail,
      created_at: expect.any(String),
      last_used_at: expect.any(String),
    });
    expect(
      (await t.request('DELETE', `/api/v1/agents/${agent.svcId}/grants/${connected.grantId}`, { token: viewer.token }))
        .status,
    ).toBe(403);
    const operator = await addUser(t, org, 'operator');
    const revoked = await t.request('DELETE', `/api/v1/agents/${agent.svcId}/grants/${connected.grantId}`, {
      token: operator.token,
    });
    expect(revoked.status).toBe(204);
    expect(
      (
        await t.request('DELETE', `/api/v1/agents/${agent.svcId}/grants/${connected.grantId}`, {
          token: operator.token,
        })
      ).status,
    ).toBe(404);
    expect((await grantsOf(agent.svcId)).body.items.map((g: { grant_id: string }) => g.grant_id)).not.toContain(
      connected.grantId,
    );
    expect((await mcp(agent.svcId, connected.accessToken)).status).toBe(401);
    expect(
      (
        await tokenRequest(t, {
          grant_type: 'refresh_token',
          refresh_token: connected.refreshToken,
          client_id: connected.clientId,
        })
      ).body.error,
    ).toBe('invalid_grant');
    const created = (await auditOf('oauth.grant_created')).find((e) => e.target.id === connected.grantId);
    expect(created).toMatchObject({
      actor: { type: 'user', label: org.adminEmail },
      after: { svc_id: agent.svcId, client_id: connected.clientId, scope: 'mcp:tools' },
    });
    const gone = (await auditOf('oauth.grant_revoked')).find((e) => e.target.id === connected.grantId);
    expect(gone).toMatchObject({
      actor: { type: 'user', label: operator.email },
      before: { client_id: connected.clientId },
    });
  });

  test('the first grant of a client in an org records oauth.client_registered, once', async () => {
    const clientId = await registerClient(t, [REDIRECT_URI], 'Once');
    for (let i = 0; i < 2; i += 1) {
      const { challenge } = pkce();
      const decided = await decide(
        t,
        org.adminToken,
        authorizationParams(publicUrl, clientId, agent.svcId, challenge),
        true,
      );
      expect(decided.body.errors).toBeUndefined();
    }
    const registered = (await auditOf('oauth.client_registered')).filter((e) => e.target.id === clientId);
    expect(registered).toEqual([
      expect.objectContaining({ after: { client_name: 'Once', kind: 'registered', redirect_uris: [REDIRECT_URI] } }),
    ]);
  });

  test('RFC 7009: the client revokes with its refresh or access token; unknown tokens are 200 too; another client’s is refused', async () => {
    const byRefresh = await connectClient(t, publicUrl, org.adminToken, agent.svcId);
    const revoke = (fields: Record<string, string>) =>
      t.request('POST', '/oauth/revoke', {
        body: form(fields),
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
      });
    const refused = await revoke({ token: byRefresh.refreshToken, client_id: 'agc_someone_else' });
    expect(refused.body.error).toBe('invalid_request');
    expect((await mcp(agent.svcId, byRefresh.accessToken)).status).toBe(200);
    expect(
      (await revoke({ token: byRefresh.refreshToken, client_id: byRefresh.clientId, token_type_hint: 'refresh_token' }))
        .status,
    ).toBe(200);
    expect((await mcp(agent.svcId, byRefresh.accessToken)).status).toBe(401);
    const byAccess = await connectClient(t, publicUrl, org.adminToken, agent.svcId);
    expect((await revoke({ token: byAccess.accessToken })).status).toBe(200);
    expect((await mcp(agent.svcId, byAccess.accessToken)).status).toBe(401);
    expect((await revoke({ token: 'ort_unknown' })).status).toBe(200);
    expect((await revoke({ token: byAccess.accessToken })).status).toBe(200);
    const entry = (await auditOf('oauth.grant_revoked')).find((e) => e.target.id === byAccess.grantId);
    expect(entry).toMatchObject({
      actor: { type: 'oauth_grant', id: byAccess.grantId, label: 'Test MCP client' },
      reason: 'revoked by the client (RFC 7009)',
    });
  });

  test('deactivating the agent revokes its grants (counted in its audit entry)', async () => {
    const doomed = await readyAgent(t, org);
    const first = await connectClient(t, publicUrl, org.adminToken, doomed.svcId);
    await connectClient(t, publicUrl, org.adminToken, doomed.svcId);
    expect((await grantsOf(doomed.svcId)).body.total).toBe(2);
    expect((await t.request('DELETE', `/api/v1/agents/${doomed.svcId}`, { token: org.adminToken })).status).toBe(204);
    expect((await grantsOf(doomed.svcId)).body.total).toBe(0);
    expect((await mcp(doomed.svcId, first.accessToken)).status).toBe(401);
    const deactivated = (await auditOf('agent.deactivated')).find((e) => e.target.id === doomed.svcId);
    expect(deactivated?.after.oauth_grants_revoked).toBe(2);
    const revoked = (await auditOf('oauth.grant_revoked')).filter((e) => e.before?.svc_id === doomed.svcId);
    expect(revoked.map((e) => e.reason)).toEqual(['agent deactivated', 'agent deactivated']);
  });

  test('another org’s agent or grant is 404', async () => {
    const other = await signUp(t, 'oauth-foreign');
    expect((await grantsOf(agent.svcId, other.adminToken)).status).toBe(404);
    const connected = await connectClient(t, publicUrl, org.adminToken, agent.svcId);
    expect(
      (
        await t.request('DELETE', `/api/v1/agents/${agent.svcId}/grants/${connected.grantId}`, {
          token: other.adminToken,
        })
      ).status,
    ).toBe(404);
    expect((await mcp(agent.svcId, connected.accessToken)).status).toBe(200);
  });
});

test('with the database gone: the authorization, token and revocation endpoints answer 503 temporarily_unavailable, and an access token at /mcp 503 -32010; never a 500', async () => {
  // A token issued while the database was there, and a second app on the same database that has seen nothing yet.
  const connected = await connectClient(t, publicUrl, org.adminToken, agent.svcId);
  const broken = await startTestApp(LOOPBACK_UPSTREAMS);
  try {
    const clientId = await registerClient(broken);
    await broken.database.db.close();
    const unavailable = {
      error: 'temporarily_unavailable',
      error_description: expect.stringMatching(/cannot reach its database/),
    };
    const authorize = await broken.request(
      'GET',
      authorizeUrl(authorizationParams(publicUrl, clientId, agent.svcId, pkce().challenge)),
    );
    expect({ status: authorize.status, body: authorize.body }).toEqual({ status: 503, body: unavailable });
    const refreshed = await tokenRequest(broken, {
      grant_type: 'refresh_token',
      refresh_token: connected.refreshToken,
      client_id: connected.clientId,
    });
    expect({ status: refreshed.status, body: refreshed.body, retry: refreshed.headers.get('retry-after') }).toEqual({
      status: 503,
      body: unavailable,
      retry: '2',
    });
    const revoked = await broken.request('POST', '/oauth/revoke', {
      body: form({ token: connected.refreshToken }),
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
    });
    expect({ status: revoked.status, body: revoked.body }).toEqual({ status: 503, body: unavailable });
    const called = await mcpRequest(broken, agent.svcId, connected.accessToken);
    expect(called.status).toBe(503);
    expect(called.body.error.code).toBe(-32010);
  } finally {
    await broken.app.stop();
    await broken.database.close().catch(() => undefined);
  }
});
