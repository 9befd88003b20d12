/**
 * Calls through tools' OAuth connections (docs/decisions/0068-upstream-connections.md,
 * 0069-connect-by-url-elicitation.md), against real components on loopback: panva's
 * `oidc-provider` as the upstream's authorization server, an MCP server of the official SDK that
 * takes only its tokens, agents calling over REST and over MCP with the SDK's clients (v1 on the
 * 2025 family, v2 on 2026-07-28), by API keys bound to users and by an OAuth grant a user allowed.
 * Each call must reach the upstream with its own user's token, or be denied with where to connect.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ErrorCode, McpError, type CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { Client as ClientV2, StreamableHTTPClientTransport as TransportV2 } from '@modelcontextprotocol/client';
import { InMemorySpanExporter } from '@opentelemetry/sdk-trace';
import { SecretBox } from '../../../src/lib/secret-box.js';
import { createTelemetry, type Telemetry } from '../../../src/observability/telemetry.js';
import { createLogger } from '../../../src/logger.js';
import { LOOPBACK_UPSTREAMS, startTestApp, type RequestOptions, type TestApp } from '../../support/app.js';
import { CookieJar, signInAtProvider } from '../../support/oidc-provider.js';
import * as oauthUpstream from '../../support/oauth-upstream.js';
import { connectClient } from '../../support/oauth.js';
import {
  addUser,
  createKey,
  createManifest,
  manifestPayload,
  signUp,
  type OrgFixture,
} from '../../support/fixtures.js';
import { type Hit, type RecordingServer, startRecordingServer } from '../../support/recording-server.js';
import { randomBytes } from 'node:crypto';

const KEY = randomBytes(32);
const box = new SecretBox(KEY);
const ENV = { ...LOOPBACK_UPSTREAMS, KEY_ENCRYPTION_KEY: KEY.toString('hex') };

const answered: string[] = [];
const logLines: string[] = [];
const logger = createLogger(
  'debug',
  new Writable({
    write(chunk, _encoding, done) {
      logLines.push(...String(chunk).split('\n').filter(Boolean));
      done();
    },
  }),
);

let t: TestApp;
let server: http.Server;
let base: string;
let org: OrgFixture;
let as: oauthUpstream.TestAuthorizationServer;
let upstream: oauthUpstream.ProtectedMcpServer;
const resources: string[] = [];
let toolId: string;
let svcId: string;
let connectUrl: string;
/** Alice allows an MCP client's grant and has a key; Bob has a key. */
let alice: { userId: string; token: string; key: string };
let bob: { userId: string; token: string; key: string };
const connections: Record<string, string> = {};
/** Another origin the upstream may redirect to; it must never see a request, let alone a token. */
let elsewhere: RecordingServer;
const elsewhereHits: Hit[] = [];
let movedTo: string | undefined;

/** Every span the service made: searched for tokens too. */
const spans = new InMemorySpanExporter();
let telemetry: Telemetry;

beforeAll(async () => {
  telemetry = createTelemetry({ spanExporter: spans, spanProcessor: 'simple' });
  t = await startTestApp(ENV, { logger, telemetry });
  server = http.createServer(t.app.yoga);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const redirectUri = t.app.services.tools.upstreamRedirectUri;
  as = await oauthUpstream.startAuthorizationServer({ resources: () => resources, redirectUri });
  upstream = await oauthUpstream.startProtectedMcpServer({ issuer: as.issuer, redirectTo: () => movedTo });
  elsewhere = await startRecordingServer(elsewhereHits, (_hit, res) => res.writeHead(200).end('{}'));
  resources.push(upstream.url, upstream.httpUrl);
  org = await signUp(t, 'conn-calls');
  toolId = await oauthUpstream.createConnectedMcpTool(send, org, {
    actionType: 'files',
    url: upstream.url,
    connection: 'user',
  });
  connectUrl = `http://localhost:8000/console/tools/${toolId}`;
  svcId = (await createManifest(t, org, 'active', manifestPayload({ capabilities: ['files:whoami'] }))).svcId;
  const member = async (role: 'operator' | 'viewer') => {
    const user = await addUser(t, org, role);
    const { key } = await createKey(t, org, ['gateway:execute', 'gateway:evaluate'], { user_id: user.userId });
    return { ...user, key };
  };
  alice = await member('operator');
  bob = await member('viewer');
});

afterAll(async () => {
  server?.closeAllConnections();
  await new Promise((resolve) => server?.close(resolve));
  await t?.close();
  await telemetry?.shutdown();
  await upstream?.close();
  await elsewhere?.close();
  await as?.close();
});

async function send(method: string, path: string, options: RequestOptions = {}) {
  const response = await t.request(method, path, options);
  answered.push(response.text, JSON.stringify([...response.headers]));
  return response;
}

const body = (params: Record<string, unknown> = {}) => ({
  svc_id: svcId,
  agent_id: svcId,
  action: { type: 'files', tool: 'whoami', params },
});
const execute = (key: string) => send('POST', '/api/v1/gateway/execute', { apiKey: key, body: body() });

/** The user connects their own account through the browser: the gateway's start page, the provider, the callback. */
async function connectAccount(user: { token: string }, login: string, tool = toolId): Promise<string> {
  const started = await send('POST', `/api/v1/orgs/${org.orgId}/tools/${tool}/connections`, { token: user.token });
  expect(started.status).toBe(201);
  const jar = new CookieJar();
  const start = new URL(started.body.authorization_url);
  const opened = await send('GET', `${start.pathname}${start.search}`);
  jar.take(new Response(null, { headers: opened.headers }));
  const answer = await signInAtProvider(
    opened.headers.get('location')!,
    login,
    t.app.services.tools.upstreamRedirectUri,
  );
  const back = await send('GET', `${answer.pathname}${answer.search}`, { headers: { cookie: jar.header() } });
  expect(new URL(back.headers.get('location')!, base).searchParams.get('result')).toBe('connected');
  return started.body.connection_id;
}

/** The record of a call, by its interaction id. */
async function recordOf(interactionId: string) {
  const records = await send('GET', '/api/v1/records?limit=1000', { token: org.adminToken });
  const record = records.body.items.find((item: { record_id: string }) => item.record_id === interactionId);
  if (!record) throw new Error(`no record ${interactionId}`);
  return record;
}

/** The subject of every token the upstream was sent since `from` (its hits' Authorization headers). */
const subjectsSince = (from: number) =>
  upstream.hits
    .slice(from)
    .map((hit) => /^Bearer (\S+)$/.exec(String(hit.headers.authorization ?? ''))?.[1])
    .filter((token): token is string => token?.includes('.') === true)
    .map((token) => JSON.parse(Buffer.from(token.split('.')[1], 'base64url').toString()).sub as string);

/** An MCP client of the 2025 family (SDK v1) with this key, declaring URL elicitation or not. */
async function clientV1(key: string, urlElicitation: boolean): Promise<Client> {
  const client = new Client(
    { name: 'agent', version: '1.0.0' },
    { capabilities: urlElicitation ? { elicitation: { url: {} } } : {} },
  );
  await client.connect(
    new StreamableHTTPClientTransport(new URL(`${base}/mcp/${svcId}`), {
      requestInit: { headers: { 'X-API-Key': key } },
    }),
  );
  return client;
}

const textOf = (result: CallToolResult) =>
  result.content.map((part) => (part.type === 'text' ? part.text : '')).join('\n');

describe('before anyone connects', () => {
  test('execute and evaluate are denied with UPSTREAM_AUTHORIZATION_REQUIRED and the page to connect at; nothing reaches the upstream', async () => {
    const hits = upstream.hits.length;
    const executed = await execute(alice.key);
    expect(executed.status).toBe(200);
    expect(executed.body.decision).toBe('deny');
    expect(executed.body.executed).toBe(false);
    expect(executed.body.reasons).toEqual([
      {
        code: 'UPSTREAM_AUTHORIZATION_REQUIRED',
        message: expect.stringContaining(connectUrl),
        details: { connect_url: connectUrl, reason: 'not_connected' },
      },
    ]);
    const evaluated = await send('POST', '/api/v1/gateway/evaluate', { apiKey: alice.key, body: body() });
    expect(evaluated.body.reasons.map((reason: { code: string }) => reason.code)).toEqual([
      'UPSTREAM_AUTHORIZATION_REQUIRED',
    ]);
    expect(subjectsSince(hits)).toEqual([]);
    const record = await recordOf(executed.body.interaction_id);
    expect(record).toMatchObject({ status: 'denied', reasons: [{ code: 'UPSTREAM_AUTHORIZATION_REQUIRED' }] });
    expect(record.connection).toBeNull();
  });

  test('a key bound to no user is denied the same way: a per-user tool has no account to use for it', async () => {
    const { key } = await createKey(t, org, ['gateway:execute']);
    const executed = await execute(key);
    expect(executed.body.reasons).toEqual([expect.objectContaining({ code: 'UPSTREAM_AUTHORIZATION_REQUIRED' })]);
  });
});

describe('users who connected their own accounts', () => {
  beforeAll(async () => {
    connections.alice = await connectAccount(alice, 'alice');
    connections.bob = await connectAccount(bob, 'bob');
  });

  test("each user's key reaches the upstream with that user's token only", async () => {
    const hits = upstream.hits.length;
    const byAlice = await execute(alice.key);
    expect(byAlice.status).toBe(200);
    expect(byAlice.body).toMatchObject({ decision: 'allow', executed: true });
    expect(byAlice.body.result.data.structuredContent).toMatchObject({ sub: 'alice' });
    expect(subjectsSince(hits)).toEqual(expect.arrayContaining(['alice']));
    expect(new Set(subjectsSince(hits))).toEqual(new Set(['alice']));
    const between = upstream.hits.length;
    const byBob = await execute(bob.key);
    expect(byBob.body.result.data.structuredContent).toMatchObject({ sub: 'bob' });
    expect(new Set(subjectsSince(between))).toEqual(new Set(['bob']));
    // Each record names the connection and the user, signed, and verifies; never a token.
    for (const [call, user, name] of [
      [byAlice, alice, 'alice'],
      [byBob, bob, 'bob'],
    ] as const) {
      const record = await recordOf(call.body.interaction_id);
      expect(record.connection).toEqual({ connection_id: connections[name], user_id: user.userId });
      const verified = await send('GET', `/api/v1/records/${record.record_id}/verify`, { token: org.adminToken });
      expect(verified.body).toMatchObject({ valid: true });
    }
  });

  test("an MCP client's OAuth grant acts for the user who allowed it: tools/call carries Alice's token", async () => {
    const grant = await connectClient(t, 'http://localhost:8000', alice.token, svcId);
    const hits = upstream.hits.length;
    const client = new Client({ name: 'oauth-agent', version: '1.0.0' });
    await client.connect(
      new StreamableHTTPClientTransport(new URL(`${base}/mcp/${svcId}`), {
        requestInit: { headers: { authorization: `Bearer ${grant.accessToken}` } },
      }),
    );
    try {
      const [tool] = (await client.listTools()).tools;
      const result = (await client.callTool({ name: tool.name, arguments: {} })) as CallToolResult;
      expect(result.isError).toBeFalsy();
      expect((result.structuredContent as { structuredContent: unknown }).structuredContent).toMatchObject({
        sub: 'alice',
      });
    } finally {
      await client.close();
    }
    expect(new Set(subjectsSince(hits))).toEqual(new Set(['alice']));
  });

  test('an upstream that redirects elsewhere: the call fails, the other origin is never asked and gets no token', async () => {
    movedTo = `${elsewhere.base}/mcp`;
    try {
      const executed = await execute(alice.key);
      expect(executed.body).toMatchObject({
        decision: 'allow',
        executed: true,
        result: { success: false, error: { code: 'TOOL_REDIRECT_REFUSED' } },
      });
    } finally {
      movedTo = undefined;
    }
    expect(elsewhereHits).toEqual([]);
  });

  test('a token the upstream refuses is refreshed once and the call goes through', async () => {
    // The held access token replaced by one the upstream cannot verify, still "valid" for an hour.
    await t.database.db.sql.query(
      `UPDATE tool_connections SET access_token = $2, token_expires_at = now() + interval '1 hour' WHERE id = $1`,
      [connections.alice, box.seal('not-a-token-the-upstream-knows')],
    );
    const hits = upstream.hits.length;
    const executed = await execute(alice.key);
    expect(executed.body.result).toMatchObject({ success: true, data: { structuredContent: { sub: 'alice' } } });
    const sent = upstream.hits.slice(hits).map((hit) => String(hit.headers.authorization ?? ''));
    expect(sent).toContain('Bearer not-a-token-the-upstream-knows');
    expect(subjectsSince(hits)).toContain('alice');
  });
});

describe("Bob's connection revoked", () => {
  beforeAll(async () => {
    const revoked = await send('DELETE', `/api/v1/orgs/${org.orgId}/tools/${toolId}/connections/${connections.bob}`, {
      token: bob.token,
    });
    expect(revoked.status).toBe(204);
  });

  test("Bob's calls are denied with the page to connect again; Alice's still go", async () => {
    const byBob = await execute(bob.key);
    expect(byBob.body.reasons).toEqual([
      {
        code: 'UPSTREAM_AUTHORIZATION_REQUIRED',
        message: expect.stringContaining(connectUrl),
        details: { connect_url: connectUrl, reason: 'revoked' },
      },
    ]);
    expect((await execute(alice.key)).body.result.data.structuredContent).toMatchObject({ sub: 'alice' });
  });

  test('a 2025-11-25 client that declared URL elicitation gets error -32042 with the connect page', async () => {
    const client = await clientV1(bob.key, true);
    try {
      const [tool] = (await client.listTools()).tools;
      const refused = await client.callTool({ name: tool.name, arguments: {} }).then(
        () => undefined,
        (error: unknown) => error,
      );
      expect(refused).toBeInstanceOf(McpError);
      expect((refused as McpError).code).toBe(ErrorCode.UrlElicitationRequired);
      expect((refused as McpError).data).toEqual({
        elicitations: [
          {
            mode: 'url',
            url: connectUrl,
            message: expect.stringContaining(connectUrl),
            elicitationId: expect.stringMatching(/\S/),
          },
        ],
      });
    } finally {
      await client.close();
    }
  });

  test('a client that did not declare it gets a tool error that names the page', async () => {
    const client = await clientV1(bob.key, false);
    try {
      const [tool] = (await client.listTools()).tools;
      const result = (await client.callTool({ name: tool.name, arguments: {} })) as CallToolResult;
      expect(result.isError).toBe(true);
      expect(textOf(result)).toContain('UPSTREAM_AUTHORIZATION_REQUIRED');
      expect(textOf(result)).toContain(connectUrl);
    } finally {
      await client.close();
    }
  });

  test('a 2026-07-28 client that declared URL elicitation is asked to open the page (input_required), once', async () => {
    const asked: unknown[] = [];
    const client = new ClientV2(
      { name: 'agent-v2', version: '1.0.0' },
      { capabilities: { elicitation: { url: {} } }, versionNegotiation: { mode: { pin: '2026-07-28' } } },
    );
    client.setRequestHandler('elicitation/create', async (request) => {
      asked.push(request.params);
      return { action: 'accept' };
    });
    await client.connect(
      new TransportV2(new URL(`${base}/mcp/${svcId}`), { requestInit: { headers: { 'X-API-Key': bob.key } } }),
    );
    try {
      const [tool] = (await client.listTools()).tools;
      const result = (await client.callTool({ name: tool.name, arguments: {} })) as CallToolResult;
      expect(asked).toEqual([
        expect.objectContaining({ mode: 'url', url: connectUrl, message: expect.stringContaining(connectUrl) }),
      ]);
      // Accepted, but the connection is not made yet when the client retries: the tool error, not another question.
      expect(result.isError).toBe(true);
      expect(textOf(result)).toContain(connectUrl);
    } finally {
      await client.close();
    }
  });

  test('2026-07-28: the user connects while the client asks; its retry reaches the upstream with his new token', async () => {
    const client = new ClientV2(
      { name: 'agent-v2', version: '1.0.0' },
      { capabilities: { elicitation: { url: {} } }, versionNegotiation: { mode: { pin: '2026-07-28' } } },
    );
    client.setRequestHandler('elicitation/create', async (request) => {
      // The person behind the client opens the page and connects, then the client answers.
      expect(request.params).toMatchObject({ mode: 'url', url: connectUrl });
      connections.bob = await connectAccount(bob, 'bob');
      return { action: 'accept' };
    });
    await client.connect(
      new TransportV2(new URL(`${base}/mcp/${svcId}`), { requestInit: { headers: { 'X-API-Key': bob.key } } }),
    );
    const hits = upstream.hits.length;
    try {
      const [tool] = (await client.listTools()).tools;
      const result = (await client.callTool({ name: tool.name, arguments: {} })) as CallToolResult;
      expect(result.isError).toBeFalsy();
      expect((result.structuredContent as { structuredContent: unknown }).structuredContent).toMatchObject({
        sub: 'bob',
      });
    } finally {
      await client.close();
    }
    expect(new Set(subjectsSince(hits))).toEqual(new Set(['bob']));
    expect((await execute(bob.key)).body.result.data.structuredContent).toMatchObject({ sub: 'bob' });
  });
});

describe("an http tool with the organization's connection", () => {
  test("an admin connects the org's account; every user's call posts with that account's token", async () => {
    const created = await send('POST', `/api/v1/orgs/${org.orgId}/tools`, {
      token: org.adminToken,
      body: {
        action_type: 'crm',
        connector: 'http',
        config: { url: upstream.httpUrl, allow_private_network: true, auth: { type: 'oauth', connection: 'org' } },
      },
    });
    expect(created.status).toBe(201);
    const crmTool = created.body.tool_id as string;
    const crm = await createManifest(t, org, 'active', manifestPayload({ capabilities: ['crm:lookup'] }));
    const lookup = (key: string) =>
      send('POST', '/api/v1/gateway/execute', {
        apiKey: key,
        body: { svc_id: crm.svcId, agent_id: crm.svcId, action: { type: 'crm', tool: 'lookup', params: { id: 7 } } },
      });
    const before = await lookup(bob.key);
    expect(before.body.reasons).toEqual([
      expect.objectContaining({
        code: 'UPSTREAM_AUTHORIZATION_REQUIRED',
        details: { connect_url: `http://localhost:8000/console/tools/${crmTool}`, reason: 'not_connected' },
      }),
    ]);
    const connectionId = await connectAccount({ token: org.adminToken }, 'org-account', crmTool);
    for (const key of [alice.key, bob.key]) {
      const called = await lookup(key);
      expect(called.body.result).toEqual({
        success: true,
        error: null,
        data: { sub: 'org-account', action: { type: 'crm', tool: 'lookup', params: { id: 7 } } },
      });
      expect((await recordOf(called.body.interaction_id)).connection).toEqual({
        connection_id: connectionId,
        user_id: null,
      });
    }
  });
});

test('no token or refresh token the gateway holds appears in any answer, log line or span', async () => {
  const rows = await t.database.db.sql.query<{ access_token: string | null; refresh_token: string | null }>(
    'SELECT access_token, refresh_token FROM tool_connections',
  );
  const held = rows.flatMap((row) => [row.access_token, row.refresh_token]).filter((v): v is string => v !== null);
  expect(held.length).toBeGreaterThan(0);
  const plain = held.map((sealed) => box.open(sealed));
  const sentTokens = upstream.hits
    .map((hit) => /^Bearer (\S+)$/.exec(String(hit.headers.authorization ?? ''))?.[1])
    .filter((token): token is string => token?.includes('.') === true);
  expect(sentTokens.length).toBeGreaterThan(0);
  const traced = spans.getFinishedSpans().map((span) => ({
    name: span.name,
    attributes: span.attributes,
    events: span.events,
    status: span.status,
  }));
  expect(traced.some((span) => span.name.startsWith('tools/call'))).toBe(true);
  const everything = [...answered, ...logLines, JSON.stringify(traced)].join('\n');
  for (const secret of [...plain, ...sentTokens]) expect(everything).not.toContain(secret);
});
