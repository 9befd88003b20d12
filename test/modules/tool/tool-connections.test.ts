/**
 * Tools' OAuth connections (docs/decisions/0068-upstream-connections.md), against real components
 * on loopback: panva's `oidc-provider` as the upstream's authorization server (its login and
 * consent forms driven over HTTP), an MCP server of the official SDK that takes only its tokens,
 * and the gateway's browser steps (`/oauth/upstream/start`, `/oauth/upstream/callback`) walked with
 * a cookie-keeping client. Two app instances share the database (on PostgreSQL each with its own
 * pool), as two processes would. Every token, code, verifier and secret the tests see is searched
 * for, at the end, in every response, log line and row they produced.
 */
import { randomBytes } from 'node:crypto';
import { Writable } from 'node:stream';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { reencryptSecrets } from '../../../src/cli/reencrypt.js';
import { keyIdOf, SecretBox } from '../../../src/lib/secret-box.js';
import { createLogger } from '../../../src/logger.js';
import type { Tool } from '../../../src/generated/prisma/client.js';
import {
  type AuthorizationServer,
  authorizationServerMetadata,
  type RegisteredClient,
  refreshTokens,
  registerClient,
  revokeToken,
  startAuthorization,
} from '../../../src/modules/tool/upstream-oauth.js';
import { PrivateNetworks } from '../../../src/lib/address-policy.js';
import {
  LOOPBACK_UPSTREAMS,
  type RequestOptions,
  startTestApp,
  type TestApp,
  type TestResponse,
} from '../../support/app.js';
import { backend, createTestDatabase, reopenTestDatabase, type TestDatabase } from '../../support/database.js';
import {
  addUser,
  createKey,
  createManifest,
  manifestPayload,
  signUp,
  type OrgFixture,
} from '../../support/fixtures.js';
import {
  type ProtectedMcpServer,
  startAuthorizationServer,
  startProtectedMcpServer,
  type TestAuthorizationServer,
  TOOLS_SCOPE,
} from '../../support/oauth-upstream.js';
import { CookieJar, signInAtProvider } from '../../support/oidc-provider.js';
import { type Hit, type RecordingServer, startRecordingServer } from '../../support/recording-server.js';

const FIRST_KEY = randomBytes(32);
const SECOND_KEY = randomBytes(32);
const box = new SecretBox(FIRST_KEY);
/**
 * The deployment opens 127.0.0.1 alone (LOOPBACK_UPSTREAMS opens all of 127.0.0.0/8): a server on
 * 127.0.0.2 stands for an address it did not open.
 */
const ENV = {
  ...LOOPBACK_UPSTREAMS,
  OUTBOUND_PRIVATE_NETWORKS: '127.0.0.1/32',
  KEY_ENCRYPTION_KEY: FIRST_KEY.toString('hex'),
  WEBHOOK_POLL_MS: '20',
  WEBHOOK_RETRY_BASE_MS: '20',
};

/** Every token, code, verifier and secret seen; none may appear in what the gateway answered, logged or stored in the clear. */
const secrets = new Set<string>();
const answered: string[] = [];
const logLines: string[] = [];
const sink = new Writable({
  write(chunk, _encoding, done) {
    logLines.push(...String(chunk).split('\n').filter(Boolean));
    done();
  },
});
const logger = createLogger('debug', sink);

let database: TestDatabase;
let second: TestDatabase;
let t: TestApp;
/** Another process on the same database. */
let t2: TestApp;
let org: OrgFixture;
let as: TestAuthorizationServer;
let otherAs: TestAuthorizationServer;
let upstream: ProtectedMcpServer;
let ttl = 600;
const resources: string[] = [];
let receiver: RecordingServer;
const deliveries: Hit[] = [];
let forbidden: RecordingServer;
const forbiddenHits: Hit[] = [];
let redirectUri = '';
const closers: (() => Promise<void>)[] = [];

beforeAll(async () => {
  database = await createTestDatabase();
  t = await startTestApp(ENV, { db: database.db, logger });
  second = await reopenTestDatabase(database);
  t2 = await startTestApp(ENV, { db: second.db, logger });
  redirectUri = t.app.services.tools.upstreamRedirectUri;
  as = await startAuthorizationServer({ resources: () => resources, redirectUri, accessTokenTtl: () => ttl });
  otherAs = await startAuthorizationServer({ resources: () => resources, redirectUri });
  upstream = await startProtectedMcpServer({ issuer: as.issuer });
  resources.push(upstream.url);
  receiver = await startRecordingServer(deliveries, (_hit, res) => res.writeHead(200).end('{}'));
  forbidden = await startRecordingServer(forbiddenHits, (_hit, res) => res.writeHead(200).end('{}'), 0, '127.0.0.2');
  closers.push(as.close, otherAs.close, upstream.close, receiver.close, forbidden.close);
  for (const value of [as.given.client_secret, as.machine.client_secret, otherAs.given.client_secret])
    secrets.add(value);
  org = await signUp(t, 'connections');
  const hook = await send('POST', `/api/v1/orgs/${org.orgId}/webhooks`, {
    token: org.adminToken,
    body: { url: `${receiver.base}/hook`, events: ['tool.connection_expired'], allow_private_network: true },
  });
  expect(hook.status).toBe(201);
});

afterAll(async () => {
  await t2?.close();
  await t?.close();
  await second?.close();
  await database?.close();
  await Promise.all(closers.map((close) => close()));
});

/** A request whose answer (body and headers) joins what is searched for secrets at the end. */
async function send(method: string, path: string, options: RequestOptions = {}, app = t): Promise<TestResponse> {
  const response = await app.request(method, path, options);
  answered.push(response.text, JSON.stringify([...response.headers]));
  return response;
}

const toolsPath = () => `/api/v1/orgs/${org.orgId}/tools`;
const unique = () => randomBytes(4).toString('hex');

/** An mcp tool of the org on the protected upstream, connected per org or per user. */
async function oauthTool(connection: 'org' | 'user', url = upstream.url): Promise<string> {
  const created = await send('POST', toolsPath(), {
    token: org.adminToken,
    body: {
      action_type: `oauth-${unique()}`,
      connector: 'mcp',
      config: { url, allow_private_network: true, tool: 'whoami', auth: { type: 'oauth', connection } },
    },
  });
  expect(created.status).toBe(201);
  return created.body.tool_id;
}

const toolRow = (toolId: string, app = t): Promise<Tool> => app.app.services.tools.get(org.orgId, toolId);

interface ConnectionRow {
  id: string;
  status: string;
  access_token: string | null;
  refresh_token: string | null;
  token_expires_at: Date | null;
  authorization_server: AuthorizationServer;
  client_id: string;
  [column: string]: unknown;
}

async function connectionRow(connectionId: string): Promise<ConnectionRow> {
  const [row] = await database.db.sql.query<ConnectionRow>('SELECT * FROM tool_connections WHERE id = $1', [
    connectionId,
  ]);
  return row;
}

/** The tokens a connection holds, opened, and kept for the final search. */
async function heldTokens(connectionId: string) {
  const row = await connectionRow(connectionId);
  const tokens = {
    access: row.access_token && box.open(row.access_token),
    refresh: row.refresh_token && box.open(row.refresh_token),
  };
  for (const token of Object.values(tokens)) if (token) secrets.add(token);
  return { row, ...tokens };
}

/** The client the tool registered at the authorization server, secret opened. */
async function registeredClient(toolId: string): Promise<RegisteredClient> {
  const [row] = await database.db.sql.query<{
    client_id: string;
    client_secret: string | null;
    token_endpoint_auth_method: RegisteredClient['token_endpoint_auth_method'];
  }>('SELECT client_id, client_secret, token_endpoint_auth_method FROM tool_oauth_clients WHERE tool_id = $1', [
    toolId,
  ]);
  const secret = row.client_secret && box.open(row.client_secret);
  if (secret) secrets.add(secret);
  return {
    client_id: row.client_id,
    ...(secret ? { client_secret: secret } : {}),
    token_endpoint_auth_method: row.token_endpoint_auth_method,
    registration: 'dynamic',
  };
}

const count = (server: TestAuthorizationServer, path: string) => server.hits.get(path) ?? 0;
const tokenHits = () => count(as, '/token');
const revocationHits = () => count(as, '/token/revocation');

/** POST …/connections as `token`. */
const startConnection = (toolId: string, token = org.adminToken) =>
  send('POST', `${toolsPath()}/${toolId}/connections`, { token });

/** The browser opens `authorization_url` (the gateway's start page): the redirect, the cookie taken. */
async function openLink(authorizationUrl: string, jar: CookieJar, app = t) {
  const url = new URL(authorizationUrl);
  const opened = await send('GET', `${url.pathname}${url.search}`, { headers: { cookie: jar.header() } }, app);
  jar.take(new Response(null, { headers: opened.headers }));
  return opened;
}

/** Back at the gateway's callback from the authorization server, with the browser's cookies. */
async function callBack(answer: URL, jar?: CookieJar, app = t) {
  const back = await send(
    'GET',
    `${answer.pathname}${answer.search}`,
    {
      headers: jar ? { cookie: jar.header() } : {},
    },
    app,
  );
  expect(back.status).toBe(302);
  return new URL(back.headers.get('location')!, 'http://console.test');
}

/** The pending authorization's code verifier, opened and kept for the final search. */
async function keepVerifiers() {
  const rows = await database.db.sql.query<{ code_verifier: string }>(
    'SELECT code_verifier FROM tool_connection_authorizations',
  );
  for (const row of rows) secrets.add(box.open(row.code_verifier));
}

/** The whole way through a browser: POST, the start page, the provider's login and consent, the callback. */
async function connectThroughBrowser(toolId: string, login: string, token = org.adminToken) {
  const started = await startConnection(toolId, token);
  expect(started.status).toBe(201);
  const jar = new CookieJar();
  const opened = await openLink(started.body.authorization_url, jar);
  expect(opened.status).toBe(302);
  await keepVerifiers();
  const answer = await signInAtProvider(opened.headers.get('location')!, login, redirectUri);
  secrets.add(answer.searchParams.get('code') ?? '');
  const landed = await callBack(answer, jar);
  return { connectionId: started.body.connection_id as string, started, landed, answer, jar };
}

/** The upstream's tool, called with the MCP SDK's client and the token: whom it was issued for. */
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

async function tokenOf(tool: Tool, userId: string | null, app = t) {
  const access = await app.app.services.tools.accessTokenFor(tool, { userId });
  if (!('token' in access)) throw new Error(`expected a token, got ${JSON.stringify(access)}`);
  secrets.add(access.token);
  return access;
}

async function auditOf(targetId: string) {
  const entries = await send('GET', `/api/v1/orgs/${org.orgId}/audit-logs?target_id=${targetId}`, {
    token: org.adminToken,
  });
  expect(entries.status).toBe(200);
  return entries.body.items as { action: string; reason: string | null; before: unknown; after: unknown }[];
}

async function eventually(check: () => boolean | Promise<boolean>, what: string, ms = 5000) {
  const until = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > until) throw new Error(`never happened: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** The connection's tokens as if they were at their expiry (the provider's are still good). */
const expireHeldToken = (connectionId: string, at = "now() - interval '1 second'") =>
  database.db.sql.query(`UPDATE tool_connections SET token_expires_at = ${at} WHERE id = $1`, [connectionId]);

describe("an org's connection", () => {
  let toolId: string;
  let connectionId: string;

  test('POST answers where the browser goes; the callback connects it and lands on the console’s tool page', async () => {
    toolId = await oauthTool('org');
    const before = Date.now();
    const flow = await connectThroughBrowser(toolId, 'alice');
    connectionId = flow.connectionId;
    expect(flow.started.body).toEqual({
      connection_id: expect.stringMatching(/^conn_/),
      authorization_url: expect.stringMatching(/^http:\/\/localhost:8000\/oauth\/upstream\/start\?state=[\w-]+$/),
      expires_at: expect.any(String),
    });
    const expires = Date.parse(flow.started.body.expires_at);
    expect(expires).toBeGreaterThan(before + 590_000);
    expect(expires).toBeLessThan(Date.now() + 610_000);
    expect(flow.landed.pathname).toBe(`/console/tools/${toolId}`);
    expect(Object.fromEntries(flow.landed.searchParams)).toEqual({ connection: connectionId, result: 'connected' });
    // Its first connection lets the mcp tool read (and pin) its upstream definitions, with the new token.
    await eventually(async () => (await toolRow(toolId)).definitionsPinned, 'the definitions read once connected');
    const shown = await send('GET', `${toolsPath()}/${toolId}/connections/${connectionId}`, { token: org.adminToken });
    expect(shown.status).toBe(200);
    expect(shown.body).toEqual({
      connection_id: connectionId,
      tool_id: toolId,
      scope: 'org',
      user_id: null,
      status: 'connected',
      subject: 'alice',
      scopes: [TOOLS_SCOPE],
      connected_at: expect.any(String),
      expires_at: expect.any(String),
      last_refreshed_at: null,
      last_used_at: expect.any(String),
      error: null,
    });
    expect(Date.parse(shown.body.expires_at)).toBeGreaterThan(Date.now() + 590_000);
    const audit = await auditOf(connectionId);
    expect(audit.map((entry) => entry.action)).toEqual(['tool.connection_created']);
    expect(audit[0].after).toMatchObject({ scope: 'org', status: 'connected', subject: 'alice', issuer: as.issuer });
  });

  test('the tokens are sealed: no plaintext token anywhere in the row', async () => {
    const { row, access, refresh } = await heldTokens(connectionId);
    const sealed = new RegExp(`^agw:v1:${keyIdOf(FIRST_KEY)}:`);
    expect(row.access_token).toMatch(sealed);
    expect(row.refresh_token).toMatch(sealed);
    const text = JSON.stringify(row);
    expect(text).not.toContain(access!);
    expect(text).not.toContain(refresh!);
    const [client] = await database.db.sql.query<{ client_secret: string }>(
      'SELECT client_secret FROM tool_oauth_clients WHERE tool_id = $1',
      [toolId],
    );
    expect(client.client_secret).toMatch(sealed);
  });

  test('accessTokenFor answers a token the upstream accepts; its use is written in a batch', async () => {
    const access = await tokenOf(await toolRow(toolId), null);
    expect(access.connectionId).toBe(connectionId);
    expect(await whoami(access.token)).toMatchObject({ sub: 'alice', aud: upstream.url });
    // Shown at once by this process; written by the periodic flush.
    const shown = await send('GET', `${toolsPath()}/${toolId}/connections/${connectionId}`, { token: org.adminToken });
    expect(shown.body.last_used_at).not.toBeNull();
    expect((await connectionRow(connectionId)).last_used_at).toBeNull();
    await t.app.services.tools.flushConnectionUsage();
    expect((await connectionRow(connectionId)).last_used_at).toBeInstanceOf(Date);
  });

  test('refreshed ahead of expiry, with rotation: short-lived access tokens from the provider', async () => {
    ttl = 61;
    const shortLived = await oauthTool('org');
    const { connectionId: id } = await connectThroughBrowser(shortLived, 'bob');
    ttl = 600;
    const first = await heldTokens(id);
    expect(first.row.token_expires_at!.getTime()).toBeLessThan(Date.now() + 61_000);
    // Within a minute of its expiry: the next use refreshes it first.
    await new Promise((resolve) => setTimeout(resolve, 1200));
    const hits = tokenHits();
    const access = await tokenOf(await toolRow(shortLived), null);
    expect(tokenHits()).toBe(hits + 1);
    const after = await heldTokens(id);
    expect(access.token).toBe(after.access);
    expect(after.access).not.toBe(first.access);
    expect(after.refresh).not.toBe(first.refresh);
    expect(after.row.token_expires_at!.getTime()).toBeGreaterThan(Date.now() + 590_000);
    expect(after.row.last_refreshed_at).toBeInstanceOf(Date);
    expect(await whoami(access.token)).toMatchObject({ sub: 'bob' });
    // Fresh now: the next use sends nothing to the provider.
    await tokenOf(await toolRow(shortLived), null);
    expect(tokenHits()).toBe(hits + 1);
  });

  test('50 callers at expiry on two processes: exactly one refresh at the provider, the grant intact, 50 working tokens', async () => {
    await expireHeldToken(connectionId);
    const [tool1, tool2] = [await toolRow(toolId, t), await toolRow(toolId, t2)];
    const hits = tokenHits();
    const answers = await Promise.all(
      Array.from({ length: 50 }, (_, i) => (i % 2 ? tokenOf(tool2, null, t2) : tokenOf(tool1, null, t))),
    );
    expect(tokenHits()).toBe(hits + 1);
    const tokens = new Set(answers.map((answer) => answer.token));
    const { access } = await heldTokens(connectionId);
    expect(tokens).toEqual(new Set([access]));
    for (const token of tokens) expect(await whoami(token)).toMatchObject({ sub: 'alice' });
    // The grant stands (a refresh token presented twice would have ended it): the next refresh works.
    await expireHeldToken(connectionId);
    await tokenOf(await toolRow(toolId), null);
    expect(tokenHits()).toBe(hits + 2);
    expect((await connectionRow(connectionId)).status).toBe('connected');
  });

  test("50 agents' executes at expiry on two processes: one refresh, each call reaches the upstream with the new token", async () => {
    const tool = await toolRow(toolId);
    const capability = `${tool.actionType}:whoami`;
    const { svcId } = await createManifest(
      t,
      org,
      'active',
      manifestPayload({
        capabilities: [capability],
        constraints: { max_actions_per_hour: 1000, max_actions_per_day: 1000 },
      }),
    );
    const { key } = await createKey(t, org, ['gateway:execute']);
    await expireHeldToken(connectionId);
    const hits = tokenHits();
    const body = { svc_id: svcId, agent_id: svcId, action: { type: tool.actionType, tool: 'whoami', params: {} } };
    const calls = await Promise.all(
      Array.from({ length: 50 }, (_, i) =>
        send('POST', '/api/v1/gateway/execute', { apiKey: key, body }, i % 2 ? t2 : t),
      ),
    );
    expect(tokenHits()).toBe(hits + 1);
    for (const call of calls) {
      expect(call.body).toMatchObject({ decision: 'allow', executed: true, result: { success: true } });
      expect(call.body.result.data.structuredContent).toMatchObject({ sub: 'alice' });
    }
    expect((await connectionRow(connectionId)).status).toBe('connected');
    await heldTokens(connectionId);
  });

  test('afterUnauthorized forces one refresh for all who met the 401, then answers the new token', async () => {
    await database.db.sql.query(
      "UPDATE tool_connections SET last_refreshed_at = now() - interval '1 minute' WHERE id = $1",
      [connectionId],
    );
    const hits = tokenHits();
    // The callers say which token the upstream refused: the one held now.
    const refused = (await connectionRow(connectionId)).token_version as number;
    const answers = await Promise.all(
      Array.from({ length: 10 }, (_, i) =>
        (i % 2 ? t2 : t).app.services.tools.afterUnauthorized(connectionId, refused),
      ),
    );
    expect(tokenHits()).toBe(hits + 1);
    const { access } = await heldTokens(connectionId);
    expect(answers).toEqual(Array(10).fill({ token: access, connectionId, version: refused + 1 }));
  });

  test('a refresh the provider refuses (grant revoked there): reauthorization required, audited, sent to webhooks', async () => {
    const { row, refresh } = await heldTokens(connectionId);
    const client = await registeredClient(toolId);
    const access = { privateNetworks: PrivateNetworks.parse('127.0.0.0/8'), allowPrivateNetwork: true };
    const revoked = await revokeToken(row.authorization_server, client, { token: refresh! }, access);
    expect(revoked).toEqual({ ok: true, value: { revoked: true } });
    await expireHeldToken(connectionId);
    const answer = await t.app.services.tools.accessTokenFor(await toolRow(toolId), { userId: null });
    expect(answer).toEqual({
      required: { connectUrl: `http://localhost:8000/console/tools/${toolId}`, reason: 'reauthorization_required' },
    });
    const shown = await send('GET', `${toolsPath()}/${toolId}/connections/${connectionId}`, { token: org.adminToken });
    expect(shown.body).toMatchObject({ status: 'reauthorization_required', expires_at: null });
    expect(shown.body.error).toContain('invalid_grant');
    const stored = await connectionRow(connectionId);
    expect([stored.access_token, stored.refresh_token]).toEqual([null, null]);
    const audit = await auditOf(connectionId);
    expect(audit[0]).toMatchObject({ action: 'tool.connection_expired', before: { status: 'connected' } });
    await eventually(
      () => deliveries.some((hit) => JSON.parse(hit.body).event === 'tool.connection_expired'),
      'the webhook event',
    );
    const event = JSON.parse(deliveries.find((hit) => JSON.parse(hit.body).event === 'tool.connection_expired')!.body);
    expect(event.data).toMatchObject({ connection_id: connectionId, tool_id: toolId, scope: 'org', user_id: null });
    // Once: another caller finds it required without asking the provider.
    const hits = tokenHits();
    expect(await t2.app.services.tools.accessTokenFor(await toolRow(toolId), { userId: null })).toEqual(answer);
    expect(tokenHits()).toBe(hits);
  });

  test('connecting again reuses the connection and the client the tool registered', async () => {
    const registrations = count(as, '/reg');
    const flow = await connectThroughBrowser(toolId, 'alice');
    expect(flow.connectionId).toBe(connectionId);
    expect(flow.landed.searchParams.get('result')).toBe('connected');
    expect(count(as, '/reg')).toBe(registrations);
    expect((await connectionRow(connectionId)).status).toBe('connected');
  });

  test('DELETE revokes it: 204, the tokens revoked at the provider (RFC 7009), audited; its callers are told to connect', async () => {
    const { row, refresh } = await heldTokens(connectionId);
    const client = await registeredClient(toolId);
    const revocations = revocationHits();
    const deleted = await send('DELETE', `${toolsPath()}/${toolId}/connections/${connectionId}`, {
      token: org.adminToken,
    });
    expect(deleted.status).toBe(204);
    expect(revocationHits()).toBeGreaterThan(revocations);
    // The provider no longer takes the refresh token.
    const access = { privateNetworks: PrivateNetworks.parse('127.0.0.0/8'), allowPrivateNetwork: true };
    const refused = await refreshTokens(row.authorization_server, client, { refreshToken: refresh! }, access);
    expect(refused).toMatchObject({ ok: false, error: 'invalid_grant' });
    const shown = await send('GET', `${toolsPath()}/${toolId}/connections/${connectionId}`, { token: org.adminToken });
    expect(shown.body).toMatchObject({ status: 'revoked', expires_at: null });
    expect((await auditOf(connectionId))[0]).toMatchObject({ action: 'tool.connection_revoked', reason: 'revoked' });
    expect(await t.app.services.tools.accessTokenFor(await toolRow(toolId), { userId: null })).toEqual({
      required: { connectUrl: `http://localhost:8000/console/tools/${toolId}`, reason: 'revoked' },
    });
    // Again: nothing left to revoke, nothing audited.
    const again = await send('DELETE', `${toolsPath()}/${toolId}/connections/${connectionId}`, {
      token: org.adminToken,
    });
    expect(again.status).toBe(204);
    expect((await auditOf(connectionId)).filter((e) => e.action === 'tool.connection_revoked')).toHaveLength(1);
  });

  test('deleting the tool deletes its connection and revokes its tokens at the provider after the commit', async () => {
    const doomed = await oauthTool('org');
    const { connectionId: id } = await connectThroughBrowser(doomed, 'carol');
    await heldTokens(id);
    const revocations = revocationHits();
    expect((await send('DELETE', `${toolsPath()}/${doomed}`, { token: org.adminToken })).status).toBe(204);
    expect(await connectionRow(id)).toBeUndefined();
    await eventually(() => revocationHits() > revocations, 'the revocation at the provider');
    expect((await auditOf(id))[0]).toMatchObject({ action: 'tool.connection_revoked', reason: 'tool_deleted' });
  });

  test("a tool whose url moved elsewhere never carries the connection's tokens there", async () => {
    const moving = await oauthTool('org');
    await connectThroughBrowser(moving, 'grace');
    const other = await startRecordingServer([], (_hit, res) => res.writeHead(401).end());
    closers.push(other.close);
    const moved = await send('PATCH', `${toolsPath()}/${moving}`, {
      token: org.adminToken,
      body: {
        config: { url: `${other.base}/mcp`, allow_private_network: true, auth: { type: 'oauth', connection: 'org' } },
      },
    });
    expect(moved.status).toBe(200);
    expect(await t.app.services.tools.accessTokenFor(await toolRow(moving), { userId: null })).toEqual({
      required: { connectUrl: `http://localhost:8000/console/tools/${moving}`, reason: 'reauthorization_required' },
    });
  });

  test('only admins and operators connect an org tool; a tool without OAuth is 409', async () => {
    const viewer = await addUser(t, org, 'viewer');
    const refused = await startConnection(toolId, viewer.token);
    expect(refused.status).toBe(403);
    const plain = await send('POST', toolsPath(), {
      token: org.adminToken,
      body: {
        action_type: `plain-${unique()}`,
        connector: 'mcp',
        config: { url: upstream.url, allow_private_network: true },
      },
    });
    const conflict = await startConnection(plain.body.tool_id);
    expect(conflict.status).toBe(409);
    expect(conflict.body.error).toMatchObject({ code: 'CONFLICT', details: { field: 'config.auth' } });
    expect(conflict.body.error.message).toContain('does not authenticate with an OAuth connection');
  });
});

describe("users' connections", () => {
  let toolId: string;
  let userA: Awaited<ReturnType<typeof addUser>>;
  let userB: Awaited<ReturnType<typeof addUser>>;
  const connections: Record<string, string> = {};

  beforeAll(async () => {
    toolId = await oauthTool('user');
    userA = await addUser(t, org, 'operator');
    userB = await addUser(t, org, 'viewer');
  });

  test('each user connects their own account, a viewer included; one registration serves them all', async () => {
    const registrations = count(as, '/reg');
    for (const [user, login] of [
      [userA, 'user-a'],
      [userB, 'user-b'],
    ] as const) {
      const flow = await connectThroughBrowser(toolId, login, user.token);
      expect(flow.landed.searchParams.get('result')).toBe('connected');
      connections[user.userId] = flow.connectionId;
    }
    expect(count(as, '/reg')).toBe(registrations + 1);
    const a = await send('GET', `${toolsPath()}/${toolId}/connections/${connections[userA.userId]}`, {
      token: userA.token,
    });
    expect(a.body).toMatchObject({ scope: 'user', user_id: userA.userId, subject: 'user-a', status: 'connected' });
  });

  test("accessTokenFor answers each user's own token, and where to connect for a user without one", async () => {
    const tool = await toolRow(toolId);
    expect(await whoami((await tokenOf(tool, userA.userId)).token)).toMatchObject({ sub: 'user-a' });
    expect(await whoami((await tokenOf(tool, userB.userId, t2)).token)).toMatchObject({ sub: 'user-b' });
    const required = {
      required: { connectUrl: `http://localhost:8000/console/tools/${toolId}`, reason: 'not_connected' },
    };
    expect(await t.app.services.tools.accessTokenFor(tool, { userId: org.adminUserId })).toEqual(required);
    expect(await t.app.services.tools.accessTokenFor(tool, { userId: null })).toEqual(required);
  });

  test('a viewer sees only their own connection; admins and operators see all', async () => {
    const list = (token: string) => send('GET', `${toolsPath()}/${toolId}/connections`, { token });
    const own = await list(userB.token);
    expect(own.body.items.map((c: { user_id: string }) => c.user_id)).toEqual([userB.userId]);
    expect(own.body.total).toBe(1);
    const all = await list(userA.token);
    expect(new Set(all.body.items.map((c: { user_id: string }) => c.user_id))).toEqual(
      new Set([userA.userId, userB.userId]),
    );
    const others = await send('GET', `${toolsPath()}/${toolId}/connections/${connections[userA.userId]}`, {
      token: userB.token,
    });
    expect(others.status).toBe(403);
    const revokeOthers = await send('DELETE', `${toolsPath()}/${toolId}/connections/${connections[userA.userId]}`, {
      token: userB.token,
    });
    expect(revokeOthers.status).toBe(403);
  });

  test('removing a user deletes their connections and revokes their tokens at the provider', async () => {
    await heldTokens(connections[userA.userId]);
    const revocations = revocationHits();
    const removed = await send('DELETE', `/api/v1/orgs/${org.orgId}/users/${userA.userId}`, { token: org.adminToken });
    expect(removed.status).toBe(204);
    expect(await connectionRow(connections[userA.userId])).toBeUndefined();
    await eventually(() => revocationHits() > revocations, 'the revocation at the provider');
    expect((await auditOf(connections[userA.userId]))[0]).toMatchObject({
      action: 'tool.connection_revoked',
      reason: 'user_removed',
    });
    // B's stands.
    expect(await whoami((await tokenOf(await toolRow(toolId), userB.userId)).token)).toMatchObject({ sub: 'user-b' });
  });
});

describe('hostile browsers and servers', () => {
  let toolId: string;

  beforeAll(async () => {
    toolId = await oauthTool('org');
  });

  /** An authorization opened in a browser and signed in at the provider, not yet back at the gateway. */
  async function atProvider() {
    const started = await startConnection(toolId);
    expect(started.status).toBe(201);
    const jar = new CookieJar();
    const opened = await openLink(started.body.authorization_url, jar);
    await keepVerifiers();
    const answer = await signInAtProvider(opened.headers.get('location')!, 'mallory', redirectUri);
    secrets.add(answer.searchParams.get('code') ?? '');
    return { started, jar, opened, answer };
  }

  test('a state used once is refused the second time, before anything is sent to the provider', async () => {
    const { answer, jar } = await atProvider();
    expect((await callBack(answer, jar)).searchParams.get('result')).toBe('connected');
    const hits = tokenHits();
    const replayed = await callBack(answer, jar);
    expect(replayed.pathname).toBe('/console/tools');
    expect(Object.fromEntries(replayed.searchParams)).toEqual({ result: 'error', reason: 'unknown_state' });
    expect(tokenHits()).toBe(hits);
  });

  test('an expired state is refused, and its link no longer opens', async () => {
    const { answer, jar, started } = await atProvider();
    await database.db.sql.query("UPDATE tool_connection_authorizations SET expires_at = now() - interval '1 second'");
    const hits = tokenHits();
    const landed = await callBack(answer, jar);
    expect(Object.fromEntries(landed.searchParams)).toMatchObject({ result: 'error', reason: 'expired' });
    expect(tokenHits()).toBe(hits);
    const late = await startConnection(toolId);
    await database.db.sql.query("UPDATE tool_connection_authorizations SET expires_at = now() - interval '1 second'");
    const opened = await openLink(late.body.authorization_url, new CookieJar());
    expect(opened.status).toBe(400);
    expect(opened.body.error.message).toContain('expired');
    expect(started.body.connection_id).toBe(late.body.connection_id);
  });

  test('another browser: the cookie missing or another, or the link opened twice', async () => {
    const { answer, started } = await atProvider();
    const hits = tokenHits();
    const bare = await callBack(answer);
    expect(Object.fromEntries(bare.searchParams)).toMatchObject({ result: 'error', reason: 'browser_mismatch' });
    const other = await atProvider();
    const elsewhere = new CookieJar();
    await openLink((await startConnection(toolId)).body.authorization_url, elsewhere);
    const mismatched = await callBack(other.answer, elsewhere);
    expect(Object.fromEntries(mismatched.searchParams)).toMatchObject({ result: 'error', reason: 'browser_mismatch' });
    expect(tokenHits()).toBe(hits);
    // The link binds the first browser that opens it; a second is refused.
    const link = (await startConnection(toolId)).body.authorization_url;
    expect((await openLink(link, new CookieJar())).status).toBe(302);
    expect((await openLink(link, new CookieJar())).status).toBe(400);
    expect(started.body.authorization_url).not.toBe(link);
  });

  test("mix-up: another server's code at the callback, with its iss or none, is refused before it is sent anywhere", async () => {
    const { answer, jar } = await atProvider();
    const state = answer.searchParams.get('state')!;
    // The other server's own flow, for a client registered there, back at the gateway's callback with our state.
    const access = { privateNetworks: PrivateNetworks.parse('127.0.0.0/8'), allowPrivateNetwork: true };
    const otherMetadata = await authorizationServerMetadata(otherAs.issuer, access);
    if (!otherMetadata.ok) throw new Error(otherMetadata.message);
    const otherClient = await registerClient(otherMetadata.value, { redirectUri, clientName: 'x' }, access);
    if (!otherClient.ok) throw new Error(otherClient.message);
    if (otherClient.value.client_secret) secrets.add(otherClient.value.client_secret);
    const otherStart = await startAuthorization(
      otherMetadata.value,
      otherClient.value,
      { redirectUri, resource: upstream.url, scopes: [TOOLS_SCOPE] },
      access,
    );
    if (!otherStart.ok) throw new Error(otherStart.message);
    secrets.add(otherStart.value.codeVerifier);
    const otherAnswer = await signInAtProvider(otherStart.value.authorizationUrl, 'mallory', redirectUri);
    secrets.add(otherAnswer.searchParams.get('code') ?? '');
    expect(otherAnswer.searchParams.get('iss')).toBe(otherAs.issuer);
    otherAnswer.searchParams.set('state', state);
    const hits = [tokenHits(), count(otherAs, '/token')];
    const mixed = await callBack(otherAnswer, jar);
    expect(Object.fromEntries(mixed.searchParams)).toMatchObject({ result: 'error', reason: 'issuer_mismatch' });
    // Without iss: the state is used up by then; a fresh authorization, the other server's code without iss.
    const fresh = await atProvider();
    otherAnswer.searchParams.set('state', fresh.answer.searchParams.get('state')!);
    otherAnswer.searchParams.delete('iss');
    const withoutIss = await callBack(otherAnswer, fresh.jar);
    expect(Object.fromEntries(withoutIss.searchParams)).toMatchObject({ result: 'error', reason: 'issuer_mismatch' });
    expect([tokenHits(), count(otherAs, '/token')]).toEqual(hits);
    const shown = await send('GET', `${toolsPath()}/${toolId}/connections/${fresh.started.body.connection_id}`, {
      token: org.adminToken,
    });
    expect(shown.body.error).toContain('names no issuer');
  });

  test('an authorization server at an address the deployment did not open: 422 saying so, nothing sent there', async () => {
    let base = '';
    const elsewhere = await startRecordingServer([], (hit, res) => {
      if (hit.path !== '/.well-known/oauth-protected-resource/mcp') return res.writeHead(404).end();
      res
        .writeHead(200, { 'content-type': 'application/json' })
        .end(JSON.stringify({ resource: `${base}/mcp`, authorization_servers: [forbidden.base] }));
    });
    base = elsewhere.base;
    closers.push(elsewhere.close);
    const tool = await oauthTool('org', `${elsewhere.base}/mcp`);
    const refused = await startConnection(tool);
    expect(refused.status).toBe(422);
    expect(refused.body.error.details.errors).toEqual([
      { field: 'tool_id', message: expect.stringContaining('OUTBOUND_PRIVATE_NETWORKS') },
    ]);
    expect(refused.body.error.message).toContain("the upstream's authorization server cannot be used");
    expect(forbiddenHits).toEqual([]);
  });
});

describe('the gateway as a client', () => {
  test("a client the tool's config gives is used as given: no registration, the tokens issued to it", async () => {
    const created = await send('POST', toolsPath(), {
      token: org.adminToken,
      body: {
        action_type: `given-${unique()}`,
        connector: 'mcp',
        config: {
          url: upstream.url,
          allow_private_network: true,
          auth: {
            type: 'oauth',
            connection: 'org',
            client_id: as.given.client_id,
            client_secret: as.given.client_secret,
          },
        },
      },
    });
    expect(created.status).toBe(201);
    expect(created.body.config.auth).toMatchObject({ client_id: 'given', client_secret: '[redacted]' });
    const registrations = count(as, '/reg');
    const { connectionId, landed } = await connectThroughBrowser(created.body.tool_id, 'erin');
    expect(landed.searchParams.get('result')).toBe('connected');
    expect(count(as, '/reg')).toBe(registrations);
    const tool = await toolRow(created.body.tool_id);
    expect(await whoami((await tokenOf(tool, null)).token)).toMatchObject({ sub: 'erin', client_id: 'given' });
    // Refreshed with the given client's secret.
    await expireHeldToken(connectionId);
    const hits = tokenHits();
    expect(await whoami((await tokenOf(tool, null)).token)).toMatchObject({ client_id: 'given' });
    expect(tokenHits()).toBe(hits + 1);
  });

  test('with an https PUBLIC_URL the gateway is its Client ID Metadata Document: no registration, a public client', async () => {
    const publicUrl = 'https://gateway.test';
    const httpsDb = await reopenTestDatabase(database);
    const https = await startTestApp({ ...ENV, PUBLIC_URL: publicUrl }, { db: httpsDb.db, logger });
    // The provider fetches https://gateway.test/oauth/upstream-client.json: answered by that app.
    const documentAs = await startAuthorizationServer({
      resources: () => resources,
      redirectUri: `${publicUrl}/oauth/upstream/callback`,
      fetchClientDocument: (url) =>
        https.app.yoga.fetch(String(url).replace(publicUrl, 'http://localhost'), {}, {
          clientAddress: '192.0.2.1',
        } as never) as Promise<Response>,
    });
    const documentUpstream = await startProtectedMcpServer({ issuer: documentAs.issuer });
    resources.push(documentUpstream.url);
    try {
      const created = await send('POST', toolsPath(), {
        token: org.adminToken,
        body: {
          action_type: `cimd-${unique()}`,
          connector: 'mcp',
          config: {
            url: documentUpstream.url,
            allow_private_network: true,
            auth: { type: 'oauth', connection: 'org' },
          },
        },
      });
      const toolId = created.body.tool_id as string;
      const started = await send('POST', `${toolsPath()}/${toolId}/connections`, { token: org.adminToken }, https);
      expect(started.status).toBe(201);
      expect(started.body.authorization_url).toMatch(/^https:\/\/gateway\.test\/oauth\/upstream\/start\?state=/);
      expect(documentAs.hits.get('/reg') ?? 0).toBe(0);
      const jar = new CookieJar();
      const opened = await openLink(started.body.authorization_url, jar, https);
      expect(opened.headers.get('set-cookie')).toMatch(/; Secure/);
      const request = new URL(opened.headers.get('location')!);
      expect(request.searchParams.get('client_id')).toBe(`${publicUrl}/oauth/upstream-client.json`);
      await keepVerifiers();
      const answer = await signInAtProvider(request.href, 'frank', `${publicUrl}/oauth/upstream/callback`);
      secrets.add(answer.searchParams.get('code') ?? '');
      const landed = await callBack(answer, jar, https);
      expect(landed.searchParams.get('result')).toBe('connected');
      const access = await tokenOf(await toolRow(toolId, https), null, https);
      const claims = JSON.parse(Buffer.from(access.token.split('.')[1], 'base64url').toString('utf8'));
      expect(claims).toMatchObject({ sub: 'frank', client_id: `${publicUrl}/oauth/upstream-client.json` });
    } finally {
      await https.close();
      await httpsDb.close();
      await documentUpstream.close();
      await documentAs.close();
    }
  });

  test('its Client ID Metadata Document', async () => {
    const document = await send('GET', '/oauth/upstream-client.json');
    expect(document.status).toBe(200);
    expect(document.body).toEqual({
      client_id: 'http://localhost:8000/oauth/upstream-client.json',
      client_name: 'Agent Gateway',
      redirect_uris: ['http://localhost:8000/oauth/upstream/callback'],
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      token_endpoint_auth_method: 'none',
    });
  });

  test('`agent-gateway reencrypt` seals the tokens with the new key; another process with it uses them', async () => {
    const toolId = await oauthTool('org');
    const { connectionId } = await connectThroughBrowser(toolId, 'dave');
    // Every signing key the running app will use exists before the rotation: its checkpoint sweep
    // (every 10 s) would otherwise make the checkpoint key later, sealed with the first key, and
    // the last reencrypt below, which knows the second key only, could not open it.
    await t.app.keys.jwks(['session', 'capability', 'record', 'oauth', 'checkpoint']);
    const counts = await reencryptSecrets(database.db.sql, new SecretBox(SECOND_KEY, [FIRST_KEY]));
    expect(counts.toolConnections).toBeGreaterThanOrEqual(2);
    const [row] = await database.db.sql.query<{ access_token: string; refresh_token: string }>(
      'SELECT access_token, refresh_token FROM tool_connections WHERE id = $1',
      [connectionId],
    );
    const sealed = new RegExp(`^agw:v1:${keyIdOf(SECOND_KEY)}:`);
    expect(row.access_token).toMatch(sealed);
    expect(row.refresh_token).toMatch(sealed);
    const rotatedDb = await reopenTestDatabase(database);
    const rotated = await startTestApp(
      {
        ...ENV,
        KEY_ENCRYPTION_KEY: SECOND_KEY.toString('hex'),
        KEY_ENCRYPTION_KEY_PREVIOUS: FIRST_KEY.toString('hex'),
      },
      { db: rotatedDb.db, logger },
    );
    try {
      const access = await tokenOf(await toolRow(toolId, rotated), null, rotated);
      expect(await whoami(access.token)).toMatchObject({ sub: 'dave' });
    } finally {
      await rotated.close();
      await rotatedDb.close();
    }
    expect(await reencryptSecrets(database.db.sql, new SecretBox(SECOND_KEY))).toMatchObject({ toolConnections: 0 });
  });
});

test('no token, code, verifier or secret in any response, log line, audit entry, webhook delivery or row', async () => {
  await t.app.services.tools.flushConnectionUsage();
  const tables = [
    'audit_logs',
    'webhook_deliveries',
    'tool_connections',
    'tool_connection_authorizations',
    'tool_oauth_clients',
    'tools',
  ];
  const rows: unknown[] = [];
  for (const table of tables) rows.push(await database.db.sql.query(`SELECT * FROM ${table}`));
  const searched = {
    responses: answered.join('\n'),
    logs: logLines.join('\n'),
    rows: JSON.stringify(rows),
    deliveries: JSON.stringify(deliveries),
  };
  secrets.delete('');
  expect(secrets.size).toBeGreaterThan(20);
  expect(logLines.length).toBeGreaterThan(0);
  for (const [where, text] of Object.entries(searched))
    for (const secret of secrets) expect({ where, found: text.includes(secret) }).toEqual({ where, found: false });
  expect(backend).toMatch(/pglite|postgresql/);
});
