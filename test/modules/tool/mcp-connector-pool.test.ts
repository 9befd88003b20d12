import { randomBytes } from 'node:crypto';
import type http from 'node:http';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { CallToolRequestSchema, ListToolsRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { createMcpHandler, McpServer as McpServerV2, Server as ServerV2 } from '@modelcontextprotocol/server';
import { InMemorySpanExporter } from '@opentelemetry/sdk-trace';
import { z } from 'zod';
import { createTelemetry, type Telemetry } from '../../../src/observability/telemetry.js';
import { createClientPool } from '../../../src/modules/tool/mcp-client-pool.js';
import {
  createMcpUpstreamPool,
  listUpstreamTools,
  MAX_TOOL_LIST_PAGES,
  runMcp,
  type McpUpstream,
  type McpUpstreamPool,
} from '../../../src/modules/tool/mcp-connector.js';
import { startRecordingServer, type Hit, type RecordingServer } from '../../support/recording-server.js';
import { serveWithWebHandler } from '../../support/web-handler.js';
import { lateAnswers, statefulEndpoint, type StatefulEndpoint } from '../../support/mcp-upstream.js';
import { LOOPBACK_UPSTREAMS, startTestApp, type TestApp } from '../../support/app.js';
import { createKey, createManifest, manifestPayload, signUp } from '../../support/fixtures.js';
import { PrivateNetworks } from '../../../src/lib/address-policy.js';

/**
 * The `mcp` connector's pool of upstream clients (docs/decisions/0049-mcp-upstream-pool.md): calls
 * of a tool reuse one connected client and its session, on upstreams of both revisions (the SDK's
 * own servers on 127.0.0.1); a restarted upstream or an expired session is reconnected; a call's
 * deadline, headers and failures stay its own; two tools never share a client or credentials; the
 * bound, idle time and shutdown end sessions.
 */

let t: TestApp;
let telemetry: Telemetry;
const spans = new InMemorySpanExporter();

// ---------------------------------------------------------------------------------------------
// The upstream: MCP servers on one loopback HTTP server that a test can restart on its port.

const hits: Hit[] = [];
let upstream: RecordingServer;
let port: number;

/** The `hang` tool's answers: past any deadline of these tests, and let go when the file ends. */
const late = lateAnswers();

const refunded = (invoice: string, amount: number) => ({
  content: [{ type: 'text' as const, text: `refunded ${amount} on ${invoice}` }],
  structuredContent: { invoice, amount },
});

function upstreamServer(): McpServer {
  const server = new McpServer({ name: 'upstream', version: '1.0.0' });
  server.registerTool(
    'refund',
    { inputSchema: { invoice: z.string(), amount: z.number() } },
    async ({ invoice, amount }) => refunded(invoice, amount),
  );
  server.registerTool('echo_headers', {}, async (extra) => ({
    content: [{ type: 'text', text: 'headers' }],
    structuredContent: { headers: extra.requestInfo?.headers ?? {} },
  }));
  server.registerTool('hang', {}, late.answer);
  return server;
}

function upstreamServerV2(): McpServerV2 {
  const server = new McpServerV2({ name: 'upstream-2026', version: '1.0.0' });
  server.registerTool(
    'refund',
    { inputSchema: z.object({ invoice: z.string(), amount: z.number() }) },
    async ({ invoice, amount }) => refunded(invoice, amount),
  );
  server.registerTool('echo_headers', {}, async (ctx) => ({
    content: [{ type: 'text', text: 'headers' }],
    structuredContent: { headers: Object.fromEntries(ctx.http?.req?.headers ?? []) },
  }));
  server.registerTool('hang', {}, late.answer);
  return server;
}

/**
 * `pages` pages of three tools each, by cursor. `checked` declares an output schema its calls do
 * not meet: a client that kept the list would refuse their results.
 */
function toolPage(pages: number, cursor: string | undefined) {
  const page = cursor === undefined ? 0 : Number(cursor);
  const tools = [0, 1, 2].map((i) => ({ name: `tool_${page}_${i}`, inputSchema: { type: 'object' as const } }));
  if (page === 0)
    tools[0] = {
      ...tools[0],
      name: 'checked',
      outputSchema: { type: 'object', required: ['total'] },
    } as (typeof tools)[number];
  return { tools, ...(page + 1 < pages ? { nextCursor: String(page + 1) } : {}) };
}
const uncheckedResult = { content: [{ type: 'text' as const, text: 'no total' }], structuredContent: { other: 1 } };

function pagedServer(pages: number): Server {
  const server = new Server({ name: 'paged', version: '1.0.0' }, { capabilities: { tools: {} } });
  server.setRequestHandler(ListToolsRequestSchema, async (request) => toolPage(pages, request.params?.cursor));
  server.setRequestHandler(CallToolRequestSchema, async () => uncheckedResult);
  return server;
}

/** The same on 2026-07-28, whose lists say a client may keep them a minute. */
function pagedServerV2(pages: number): ServerV2 {
  const server = new ServerV2(
    { name: 'paged-2026', version: '1.0.0' },
    { capabilities: { tools: {} }, cacheHints: { 'tools/list': { ttlMs: 60_000, cacheScope: 'private' } } },
  );
  server.setRequestHandler('tools/list', async (request) => toolPage(pages, request.params?.cursor));
  server.setRequestHandler('tools/call', async () => uncheckedResult);
  return server;
}

const stateful = statefulEndpoint(upstreamServer);
const v2 = createMcpHandler(() => upstreamServerV2());
const paged2025 = new Map<number, StatefulEndpoint>();
const paged2026 = new Map<number, ReturnType<typeof createMcpHandler>>();

/** Stateless with JSON answers: a new server and transport per request. */
async function serveStateless(req: http.IncomingMessage, res: http.ServerResponse, body: unknown) {
  const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
  res.on('close', () => void transport.close());
  await upstreamServer().connect(transport);
  await transport.handleRequest(req, res, body);
}

async function route(req: http.IncomingMessage, res: http.ServerResponse, hit: Hit) {
  const body = hit.body ? JSON.parse(hit.body) : undefined;
  const [, kind, pages] = /^\/(paged-2025|paged-2026)\/(\d+)$/.exec(hit.path) ?? [];
  if (kind === 'paged-2025') {
    const endpoint = paged2025.get(Number(pages)) ?? statefulEndpoint(() => pagedServer(Number(pages)));
    paged2025.set(Number(pages), endpoint);
    return endpoint.serve(req, res, body);
  }
  if (kind === 'paged-2026') {
    const handler =
      paged2026.get(Number(pages)) ?? createMcpHandler(() => pagedServerV2(Number(pages)), { legacy: 'reject' });
    paged2026.set(Number(pages), handler);
    return serveWithWebHandler(handler.fetch, hit, req, res);
  }
  switch (hit.path) {
    case '/mcp':
      return stateful.serve(req, res, body);
    case '/mcp-stateless':
      return serveStateless(req, res, body);
    case '/mcp-2026':
      return serveWithWebHandler(v2.fetch, hit, req, res);
    default:
      res.writeHead(404).end();
  }
}

const respond = (hit: Hit, res: http.ServerResponse, req: http.IncomingMessage) =>
  route(req, res, hit).catch(() => {
    if (!res.headersSent) res.writeHead(500);
    res.end();
  });

/** The upstream process stops (its connections cut, its sessions lost); `start` brings it back on its port. */
async function stopUpstream() {
  await upstream.close();
  await stateful.forgetAll();
}
async function startUpstream() {
  upstream = await startRecordingServer(hits, respond, port);
}

beforeAll(async () => {
  upstream = await startRecordingServer(hits, respond);
  port = upstream.port;
  telemetry = createTelemetry({ spanExporter: spans, spanProcessor: 'simple' });
  t = await startTestApp(LOOPBACK_UPSTREAMS, { telemetry });
});

afterAll(async () => {
  late.releaseAll();
  await t?.close();
  await telemetry?.shutdown();
  await stateful.forgetAll();
  await Promise.all([...paged2025.values()].map((endpoint) => endpoint.forgetAll()));
  await Promise.all([v2.close(), ...[...paged2026.values()].map((handler) => handler.close())]);
  await upstream.close();
});

// ---------------------------------------------------------------------------------------------
// Helpers

const local = (path: string) => `http://127.0.0.1:${port}${path}`;
const unique = () => randomBytes(6).toString('hex');
const posts = (from: number, path: string) => hits.slice(from).filter((h) => h.path === path && h.method === 'POST');
const methodsOf = (received: Hit[]) => received.map((h) => JSON.parse(h.body).method as string);
const sessionOf = (hit: Hit) => hit.headers['mcp-session-id'] as string | undefined;
/** The upstream's requests from a tool: each tool of these tests sends a header `x-tool` of its own. */
const fromTool = (from: number, tag: string) => hits.slice(from).filter((h) => h.headers['x-tool'] === tag);
const deletesOf = (received: Hit[]) => received.filter((h) => h.method === 'DELETE');
/** The tool's `tools/call` requests. */
const callsFrom = (from: number, tag: string) =>
  fromTool(from, tag).filter((h) => h.method === 'POST' && JSON.parse(h.body).method === 'tools/call');

async function eventually(check: () => boolean, ms = 5000) {
  const until = Date.now() + ms;
  while (!check() && Date.now() < until) await new Promise((resolve) => setTimeout(resolve, 20));
  return check();
}

interface ToolSetup {
  path: string;
  timeout_ms?: number;
  headers?: Record<string, string>;
}

/**
 * An org whose active agent may call every upstream tool through one mcp tool per action type,
 * each with a header `x-tool` of its own (its `tag`).
 */
async function toolsOrg(app: TestApp, tools: Record<string, ToolSetup>) {
  const org = await signUp(app, 'pool');
  const types = Object.keys(tools);
  const { svcId } = await createManifest(
    app,
    org,
    'active',
    manifestPayload({
      capabilities: types.flatMap((type) => ['refund', 'echo_headers', 'hang'].map((name) => `${type}:${name}`)),
      constraints: { max_actions_per_hour: 10_000, max_actions_per_day: 10_000 },
    }),
  );
  const tags: Record<string, string> = {};
  const ids: Record<string, string> = {};
  const start = hits.length;
  for (const [type, setup] of Object.entries(tools)) {
    tags[type] = unique();
    const config = {
      url: local(setup.path),
      timeout_ms: setup.timeout_ms ?? 5000,
      allow_private_network: true,
      headers: { 'x-tool': tags[type], ...setup.headers },
    };
    const created = await app.request('POST', `/api/v1/orgs/${org.orgId}/tools`, {
      token: org.adminToken,
      body: { action_type: type, connector: 'mcp', config },
    });
    if (created.status !== 201) throw new Error(`tool create failed: ${created.status} ${created.text}`);
    ids[type] = created.body.tool_id;
  }
  // Saving read each tool's definitions on a client of its own, which then ended its session
  // (docs/decisions/0050-upstream-tool-definitions.md): what a test counts after this is its calls'.
  for (const [type, setup] of Object.entries(tools)) {
    if (setup.path === '/mcp' && !(await eventually(() => deletesOf(fromTool(start, tags[type])).length === 1)))
      throw new Error('no end of the read’s session');
  }
  const { key } = await createKey(app, org, ['gateway:execute']);
  const execute = (
    type: string,
    tool = 'refund',
    params: Record<string, unknown> = { invoice: `inv_${unique()}`, amount: 5 },
  ) =>
    app.request('POST', '/api/v1/gateway/execute', {
      apiKey: key,
      body: { svc_id: svcId, agent_id: svcId, action: { type, tool, params } },
    });
  return { org, tags, ids, execute };
}

/** The call succeeded, and its result is its own (the params it sent, echoed). */
function expectRefunded(response: { status: number; body: any }, invoice: string) {
  expect(response.status).toBe(200);
  expect(response.body.result).toMatchObject({ success: true, data: { structuredContent: { invoice } } });
}

// ---------------------------------------------------------------------------------------------

describe('calls reuse the tool’s client and its session', () => {
  test('a stateful 2025-11-25 upstream: five calls (over one connection), then twenty at once, make one initialize and use one session; each result is its own', async () => {
    const { tags, execute } = await toolsOrg(t, { billing: { path: '/mcp' } });
    const before = hits.length;
    const connections = upstream.connections;
    for (let i = 0; i < 5; i++)
      expectRefunded(await execute('billing', 'refund', { invoice: `seq_${i}`, amount: i }), `seq_${i}`);
    expect(upstream.connections - connections).toBe(1);
    const together = await Promise.all(
      Array.from({ length: 20 }, (_, i) => execute('billing', 'refund', { invoice: `par_${i}`, amount: i })),
    );
    together.forEach((response, i) => expectRefunded(response, `par_${i}`));

    const received = fromTool(before, tags.billing).filter((h) => h.method === 'POST');
    const methods = methodsOf(received);
    expect(methods.filter((m) => m === 'initialize')).toHaveLength(1);
    expect(methods.filter((m) => m === 'server/discover')).toHaveLength(1);
    expect(methods.filter((m) => m === 'tools/call')).toHaveLength(25);
    const sessions = new Set(received.filter((h) => JSON.parse(h.body).method === 'tools/call').map(sessionOf));
    expect(sessions.size).toBe(1);
    expect(stateful.sessions.has([...sessions][0]!)).toBe(true);
    expect(deletesOf(fromTool(before, tags.billing))).toHaveLength(0);
  });

  test('a 2026-07-28 upstream: server/discover once, then only tools/call', async () => {
    const { tags, execute } = await toolsOrg(t, { billing: { path: '/mcp-2026' } });
    const before = hits.length;
    for (let i = 0; i < 3; i++)
      expectRefunded(await execute('billing', 'refund', { invoice: `n_${i}`, amount: i }), `n_${i}`);
    const together = await Promise.all(
      Array.from({ length: 10 }, (_, i) => execute('billing', 'refund', { invoice: `p_${i}`, amount: i })),
    );
    together.forEach((response, i) => expectRefunded(response, `p_${i}`));
    expect(methodsOf(fromTool(before, tags.billing))).toEqual(['server/discover', ...Array(13).fill('tools/call')]);
  });

  test('a stateless 2025 upstream (no session): one initialize, then only tools/call', async () => {
    const { tags, execute } = await toolsOrg(t, { billing: { path: '/mcp-stateless' } });
    const before = hits.length;
    for (let i = 0; i < 4; i++)
      expectRefunded(await execute('billing', 'refund', { invoice: `s_${i}`, amount: i }), `s_${i}`);
    expect(methodsOf(fromTool(before, tags.billing))).toEqual([
      'server/discover',
      'initialize',
      'notifications/initialized',
      ...Array(4).fill('tools/call'),
    ]);
  });

  test.each(['/mcp', '/mcp-2026'])(
    '%s: on a shared client every request carries its own call’s x-interaction-id and traceparent, and every call’s span the protocol version',
    async (path) => {
      const { tags, execute } = await toolsOrg(t, { billing: { path } });
      await execute('billing');
      spans.reset();
      const before = hits.length;
      const responses = await Promise.all(
        Array.from({ length: 6 }, (_, i) => execute('billing', 'refund', { invoice: `tr_${i}`, amount: i })),
      );
      const calls = callsFrom(before, tags.billing);
      expect(calls).toHaveLength(6);
      for (const response of responses) {
        const interactionId = response.body.interaction_id;
        const span = spans
          .getFinishedSpans()
          .find((s) => s.name === 'tools/call refund' && s.attributes['agw.interaction_id'] === interactionId)!;
        expect(span.attributes['mcp.protocol.version']).toBe(path === '/mcp' ? '2025-11-25' : '2026-07-28');
        const own = calls.filter((h) => h.headers['x-interaction-id'] === interactionId);
        expect(own).toHaveLength(1);
        expect(JSON.parse(own[0].body).params.arguments.invoice).toBe(
          response.body.result.data.structuredContent.invoice,
        );
        expect(own[0].headers.traceparent).toBe(`00-${span.spanContext().traceId}-${span.spanContext().spanId}-01`);
      }
    },
  );
});

describe('reconnecting', () => {
  test('the upstream restarts between calls: the next call succeeds on a new session (after a 404 for its old one, or at once); while it is down, calls fail TOOL_UNREACHABLE', async () => {
    const { tags, execute } = await toolsOrg(t, { billing: { path: '/mcp' } });
    expectRefunded(await execute('billing', 'refund', { invoice: 'before', amount: 1 }), 'before');
    const before = hits.length;
    const [first] = callsFrom(0, tags.billing);
    const oldSession = sessionOf(first)!;

    await stopUpstream();
    try {
      const down = await execute('billing', 'refund', { invoice: 'down', amount: 2 });
      expect(down.status).toBe(200);
      expect(down.body.result).toMatchObject({ success: false, error: { code: 'TOOL_UNREACHABLE' } });
    } finally {
      await startUpstream();
    }
    expectRefunded(await execute('billing', 'refund', { invoice: 'after', amount: 3 }), 'after');
    const received = fromTool(before, tags.billing).filter((h) => h.method === 'POST');
    expect(methodsOf(received)).toEqual(['server/discover', 'initialize', 'notifications/initialized', 'tools/call']);
    expect(sessionOf(received[3])).not.toBe(oldSession);

    // And with no failed call in between: the restart is met by the next call itself.
    const mid = hits.length;
    await stopUpstream();
    await startUpstream();
    expectRefunded(await execute('billing', 'refund', { invoice: 'again', amount: 4 }), 'again');
    const retried = fromTool(mid, tags.billing).filter((h) => h.method === 'POST');
    // The call meets 404 on the old session and goes again on a new one. Or, when the pooled
    // client's connection was still taken for open (the upstream's close not yet seen), it never
    // reached the upstream and went again at once. (The 404 alone, without a restart: "a session
    // the upstream ended by itself".)
    const handshake = ['server/discover', 'initialize', 'notifications/initialized', 'tools/call'];
    expect([['tools/call', ...handshake], handshake]).toContainEqual(methodsOf(retried));
    if (retried.length === 5) expect(sessionOf(retried[0])).toBe(sessionOf(received[3]));
    const served = retried[retried.length - 1];
    expect(sessionOf(served)).not.toBe(sessionOf(received[3]));
    expect(stateful.sessions.has(sessionOf(served)!)).toBe(true);
  });

  test('a 2026-07-28 upstream restarting: there is no session to lose, and the next call just succeeds', async () => {
    const { tags, execute } = await toolsOrg(t, { billing: { path: '/mcp-2026' } });
    expectRefunded(await execute('billing', 'refund', { invoice: 'r1', amount: 1 }), 'r1');
    const before = hits.length;
    await stopUpstream();
    await startUpstream();
    expectRefunded(await execute('billing', 'refund', { invoice: 'r2', amount: 2 }), 'r2');
    // One call reached the upstream, and no session handshake. When the pooled client's connection
    // was still taken for open (the upstream's close not yet seen), the call never reached the
    // upstream and went again on a fresh client, which negotiates with `server/discover` first.
    expect([['tools/call'], ['server/discover', 'tools/call']]).toContainEqual(
      methodsOf(fromTool(before, tags.billing)),
    );
  });

  test('a session the upstream ended by itself (expired): the call meets 404 and succeeds on a new session', async () => {
    const { tags, execute } = await toolsOrg(t, { billing: { path: '/mcp' } });
    expectRefunded(await execute('billing', 'refund', { invoice: 'e1', amount: 1 }), 'e1');
    const session = sessionOf(callsFrom(0, tags.billing)[0])!;
    await stateful.forget(session);
    const before = hits.length;
    expectRefunded(await execute('billing', 'refund', { invoice: 'e2', amount: 2 }), 'e2');
    const received = fromTool(before, tags.billing).filter((h) => h.method === 'POST');
    expect(methodsOf(received)).toEqual([
      'tools/call',
      'server/discover',
      'initialize',
      'notifications/initialized',
      'tools/call',
    ]);
    expect(sessionOf(received[0])).toBe(session);
    expect(sessionOf(received[4])).not.toBe(session);
  });
});

describe('credentials are never shared', () => {
  test('two tools on one upstream with different headers, called at once: every request and every session carries only its own tool’s header', async () => {
    const { tags, execute } = await toolsOrg(t, {
      billing: { path: '/mcp', headers: { authorization: 'Bearer billing-secret-1' } },
      crm: { path: '/mcp', headers: { authorization: 'Bearer crm-secret-2' } },
    });
    const before = hits.length;
    const responses = await Promise.all(
      Array.from({ length: 16 }, (_, i) => execute(i % 2 ? 'crm' : 'billing', 'echo_headers')),
    );
    responses.forEach((response, i) => {
      expect(response.body.result.success).toBe(true);
      const seen = response.body.result.data.structuredContent.headers;
      expect(seen.authorization).toBe(i % 2 ? 'Bearer crm-secret-2' : 'Bearer billing-secret-1');
      expect(seen['x-tool']).toBe(i % 2 ? tags.crm : tags.billing);
    });
    const received = hits.slice(before).filter((h) => h.path === '/mcp');
    const bySession = new Map<string, Set<string>>();
    for (const hit of received) {
      expect(hit.headers.authorization).toBe(
        hit.headers['x-tool'] === tags.crm ? 'Bearer crm-secret-2' : 'Bearer billing-secret-1',
      );
      const session = sessionOf(hit);
      if (session) bySession.set(session, (bySession.get(session) ?? new Set()).add(String(hit.headers.authorization)));
    }
    expect(bySession.size).toBe(2);
    for (const credentials of bySession.values()) expect(credentials.size).toBe(1);
  });

  test('a tool updated with a new header value: the next call uses it on a new session, and the old session is ended', async () => {
    const { org, tags, ids, execute } = await toolsOrg(t, {
      billing: { path: '/mcp', headers: { authorization: 'Bearer old-value' } },
    });
    expect((await execute('billing', 'echo_headers')).body.result.data.structuredContent.headers.authorization).toBe(
      'Bearer old-value',
    );
    const oldSession = sessionOf(callsFrom(0, tags.billing)[0])!;
    const path = `/api/v1/orgs/${org.orgId}/tools/${ids.billing}`;
    const shown = (await t.request('GET', path, { token: org.adminToken })).body.config;
    const patched = await t.request('PATCH', path, {
      token: org.adminToken,
      body: { config: { ...shown, headers: { 'x-tool': tags.billing, authorization: 'Bearer new-value' } } },
    });
    expect(patched.status).toBe(200);
    const before = hits.length;
    const after = await execute('billing', 'echo_headers');
    expect(after.body.result.data.structuredContent.headers.authorization).toBe('Bearer new-value');
    const received = fromTool(before, tags.billing);
    expect(methodsOf(received.filter((h) => h.method === 'POST'))).toEqual([
      'server/discover',
      'initialize',
      'notifications/initialized',
      'tools/call',
    ]);
    for (const hit of received.filter((h) => h.method === 'POST'))
      expect(hit.headers.authorization).toBe('Bearer new-value');
    expect(
      await eventually(() => deletesOf(fromTool(before, tags.billing)).some((h) => sessionOf(h) === oldSession)),
    ).toBe(true);
    expect(stateful.sessions.has(oldSession)).toBe(false);
  });
});

describe('a call’s deadline and failures stay its own', () => {
  test.each(['/mcp', '/mcp-2026'])(
    '%s: a call past its deadline ends only its own request; a call beside it and the next one succeed on the same client',
    async (path) => {
      const { tags, execute } = await toolsOrg(t, { billing: { path, timeout_ms: 1000 } });
      expectRefunded(await execute('billing', 'refund', { invoice: 'warm', amount: 1 }), 'warm');
      const before = hits.length;
      const [late, beside] = await Promise.all([
        execute('billing', 'hang'),
        execute('billing', 'refund', { invoice: 'beside', amount: 2 }),
      ]);
      expect(late.body.result).toMatchObject({
        success: false,
        error: { code: 'TOOL_TIMEOUT', message: expect.stringContaining('1000') },
      });
      expectRefunded(beside, 'beside');
      expectRefunded(await execute('billing', 'refund', { invoice: 'next', amount: 3 }), 'next');
      const received = fromTool(before, tags.billing).filter((h) => h.method === 'POST');
      const methods = methodsOf(received);
      expect(methods.filter((m) => m === 'tools/call')).toHaveLength(3);
      expect(methods.filter((m) => m === 'initialize' || m === 'server/discover')).toHaveLength(0);
      if (path === '/mcp') {
        // The 2025 family is told the request is given up; 2026-07-28 learns it from the closed request.
        expect(
          await eventually(() =>
            methodsOf(fromTool(before, tags.billing).filter((h) => h.method === 'POST')).includes(
              'notifications/cancelled',
            ),
          ),
        ).toBe(true);
        expect(new Set(received.map(sessionOf)).size).toBe(1);
      }
    },
  );
});

describe('the bound, idle clients and shutdown end sessions', () => {
  test('MCP_UPSTREAM_POOL_SIZE=1: a second tool’s client evicts the first, whose session is ended; stopping the app ends the last one', async () => {
    const small = await startTestApp({ ...LOOPBACK_UPSTREAMS, MCP_UPSTREAM_POOL_SIZE: '1' }, { db: t.database.db });
    let stopped = false;
    try {
      const { tags, execute } = await toolsOrg(small, { billing: { path: '/mcp' }, crm: { path: '/mcp' } });
      const before = hits.length;
      expectRefunded(await execute('billing', 'refund', { invoice: 'b1', amount: 1 }), 'b1');
      const billingSession = sessionOf(fromTool(before, tags.billing).at(-1)!)!;
      expectRefunded(await execute('crm', 'refund', { invoice: 'c1', amount: 1 }), 'c1');
      expect(
        await eventually(() => deletesOf(fromTool(before, tags.billing)).some((h) => sessionOf(h) === billingSession)),
      ).toBe(true);
      expect(stateful.sessions.has(billingSession)).toBe(false);
      const crmSession = sessionOf(fromTool(before, tags.crm).at(-1)!)!;
      expect(stateful.sessions.has(crmSession)).toBe(true);

      const again = hits.length;
      expectRefunded(await execute('billing', 'refund', { invoice: 'b2', amount: 2 }), 'b2');
      expect(methodsOf(fromTool(again, tags.billing).filter((h) => h.method === 'POST'))).toEqual([
        'server/discover',
        'initialize',
        'notifications/initialized',
        'tools/call',
      ]);
      const lastSession = sessionOf(fromTool(again, tags.billing).at(-1)!)!;
      await small.close();
      stopped = true;
      expect(deletesOf(fromTool(again, tags.billing)).map(sessionOf)).toContain(lastSession);
    } finally {
      if (!stopped) await small.close();
    }
  });

  test('MCP_UPSTREAM_IDLE_SECONDS=1: a client left unused is closed and its session ended', async () => {
    const idle = await startTestApp({ ...LOOPBACK_UPSTREAMS, MCP_UPSTREAM_IDLE_SECONDS: '1' }, { db: t.database.db });
    try {
      const { tags, execute } = await toolsOrg(idle, { billing: { path: '/mcp' } });
      const before = hits.length;
      expectRefunded(await execute('billing', 'refund', { invoice: 'i1', amount: 1 }), 'i1');
      const session = sessionOf(fromTool(before, tags.billing).at(-1)!)!;
      expect(
        await eventually(() => deletesOf(fromTool(before, tags.billing)).some((h) => sessionOf(h) === session)),
      ).toBe(true);
      expect(stateful.sessions.has(session)).toBe(false);
    } finally {
      await idle.close();
    }
  });

  test('MCP_UPSTREAM_POOL_SIZE=0: every call connects and ends its session, as before the pool', async () => {
    const none = await startTestApp({ ...LOOPBACK_UPSTREAMS, MCP_UPSTREAM_POOL_SIZE: '0' }, { db: t.database.db });
    try {
      const { tags, execute } = await toolsOrg(none, { billing: { path: '/mcp' } });
      const before = hits.length;
      for (let i = 0; i < 2; i++)
        expectRefunded(await execute('billing', 'refund', { invoice: `z${i}`, amount: i }), `z${i}`);
      const once = ['server/discover', 'initialize', 'notifications/initialized', 'tools/call'];
      expect(methodsOf(fromTool(before, tags.billing).filter((h) => h.method === 'POST'))).toEqual([...once, ...once]);
      expect(await eventually(() => deletesOf(fromTool(before, tags.billing)).length === 2)).toBe(true);
    } finally {
      await none.close();
    }
  });
});

describe('listUpstreamTools through the pool', () => {
  /** Runs `use` with a pool of its own, closed after. */
  async function withPool(use: (pool: McpUpstreamPool) => Promise<void>) {
    const pool = createMcpUpstreamPool({ maxClients: 8, idleMs: 60_000 });
    try {
      await use(pool);
    } finally {
      await pool.close();
    }
  }
  const upstreamAt = (path: string): McpUpstream => ({
    toolId: `tool_${path}`,
    config: { url: local(path), timeout_ms: 5000, allow_private_network: true, tool: null },
    credentials: { secret: null, headers: {}, clientSecret: null },
    privateNetworks: PrivateNetworks.parse('127.0.0.0/8'),
  });
  const context = { interactionId: 'definitions' };
  const callOf = (name: string) => ({
    svc_id: 's',
    agent_id: 'a',
    interaction_id: `call-${unique()}`,
    action: { type: 'x', tool: name, params: {} },
  });
  const names = [
    'checked',
    'tool_0_1',
    'tool_0_2',
    'tool_1_0',
    'tool_1_1',
    'tool_1_2',
    'tool_2_0',
    'tool_2_1',
    'tool_2_2',
  ];
  const lists = Array(3).fill('tools/list');

  test.each([
    ['/paged-2025/3', ['server/discover', 'initialize', 'notifications/initialized'], 1],
    ['/paged-2026/3', ['server/discover'], 0],
  ])(
    '%s: every page of the list (by cursor), read anew each time; on the tool’s client once a call made one, else on one of its own',
    (path, connecting, deletes) =>
      withPool(async (pool) => {
        const before = hits.length;
        const alone = await listUpstreamTools(pool, upstreamAt(path), context);
        expect(alone.ok && alone.tools.map((tool) => tool.name)).toEqual(names);
        // A read of definitions takes no place in the pool: its client is closed (its session ended).
        expect(pool.size).toBe(0);
        expect(
          await eventually(() => deletesOf(hits.slice(before).filter((h) => h.path === path)).length === deletes),
        ).toBe(true);
        expect(methodsOf(posts(before, path))).toEqual([...connecting, ...lists]);

        expect(await runMcp(pool, upstreamAt(path), callOf('tool_1_0'))).toMatchObject({ success: true });
        const reused = hits.length;
        // The 2026-07-28 server said its list may be kept a minute: the second read asks all the same.
        expect(await listUpstreamTools(pool, upstreamAt(path), context)).toEqual(alone);
        expect(await listUpstreamTools(pool, upstreamAt(path), context)).toEqual(alone);
        const read = posts(reused, path);
        expect(methodsOf(read)).toEqual([...lists, ...lists]);
        expect(read.map((h) => JSON.parse(h.body).params?.cursor)).toEqual([undefined, '1', '2', undefined, '1', '2']);
      }),
  );

  test.each(['/paged-2025/3', '/paged-2026/3'])(
    '%s: a listed output schema is not held against later calls on the same client',
    (path) =>
      withPool(async (pool) => {
        expect(await runMcp(pool, upstreamAt(path), callOf('tool_2_0'))).toMatchObject({ success: true });
        await listUpstreamTools(pool, upstreamAt(path), context);
        const before = hits.length;
        expect(await runMcp(pool, upstreamAt(path), callOf('checked'))).toEqual({
          success: true,
          data: uncheckedResult,
        });
        expect(methodsOf(posts(before, path))).toEqual(['tools/call']);
      }),
  );

  test(`more than ${MAX_TOOL_LIST_PAGES} pages: TOOL_RESPONSE_INVALID, and the tool’s client serves the next list`, () =>
    withPool(async (pool) => {
      const path = `/paged-2025/${MAX_TOOL_LIST_PAGES + 1}`;
      expect(await runMcp(pool, upstreamAt(path), callOf('tool_0_1'))).toMatchObject({ success: true });
      const tooMany = await listUpstreamTools(pool, upstreamAt(path), context);
      expect(tooMany).toEqual({
        ok: false,
        error: {
          code: 'TOOL_RESPONSE_INVALID',
          message: `The MCP server lists more than ${MAX_TOOL_LIST_PAGES} pages of tools`,
        },
      });
      const before = hits.length;
      expect(await listUpstreamTools(pool, upstreamAt(path), context)).toEqual(tooMany);
      expect(methodsOf(posts(before, path))).toEqual(Array(MAX_TOOL_LIST_PAGES).fill('tools/list'));
    }));
});

describe('the pool’s bookkeeping (createClientPool)', () => {
  /** A client that counts its closes. */
  const client = () => ({
    closes: 0,
    async close() {
      this.closes++;
    },
  });
  type Counted = ReturnType<typeof client>;

  test('the least recently used client leaves first; a client in use closes when its last call ends', () => {
    const pool = createClientPool<Counted>({ maxClients: 2, idleMs: 60_000 });
    const a = pool.lease('a', 'tool-a', client, true);
    a.release(true);
    const b = pool.lease('b', 'tool-b', client, true);
    pool.lease('a', 'tool-a', client, true).release(true);
    // a was used last: b leaves for c, though b's call is still running.
    const c = pool.lease('c', 'tool-c', client, true);
    expect(pool.size).toBe(2);
    expect(b.client.closes).toBe(0);
    b.release(true);
    expect(b.client.closes).toBe(1);
    expect(pool.lease('a', 'tool-a', client, true).client).toBe(a.client);
    expect(pool.lease('b', 'tool-b', client, true).opened).toBe(true);
    c.release(true);
  });

  test('a tool’s new settings retire its old client; a dropped client is not handed out again', () => {
    const pool = createClientPool<Counted>({ maxClients: 8, idleMs: 60_000 });
    const old = pool.lease('tool-1:v1', 'tool-1', client, true);
    old.release(true);
    const updated = pool.lease('tool-1:v2', 'tool-1', client, true);
    expect(old.client.closes).toBe(1);
    expect(pool.size).toBe(1);
    updated.release(false);
    expect(updated.client.closes).toBe(1);
    expect(pool.lease('tool-1:v2', 'tool-1', client, true).opened).toBe(true);
  });

  test('an idle client closes after idleMs; closing the pool closes the rest, and later clients are not kept', async () => {
    const pool = createClientPool<Counted>({ maxClients: 8, idleMs: 20 });
    const idle = pool.lease('idle', 'tool-1', client, true);
    idle.release(true);
    expect(await eventually(() => idle.client.closes === 1)).toBe(true);
    const busy = pool.lease('busy', 'tool-2', client, true);
    const kept = pool.lease('kept', 'tool-3', client, true);
    kept.release(true);
    await pool.close();
    expect(kept.client.closes).toBe(1);
    expect(busy.client.closes).toBe(0);
    busy.release(true);
    expect(busy.client.closes).toBe(1);
    const late = pool.lease('late', 'tool-4', client, true);
    expect(pool.size).toBe(0);
    late.release(true);
    expect(late.client.closes).toBe(1);
  });
});
