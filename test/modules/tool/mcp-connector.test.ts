import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { CallToolRequestSchema, ErrorCode, ListToolsRequestSchema, McpError } from '@modelcontextprotocol/sdk/types.js';
import { ProtocolError } from '@modelcontextprotocol/client';
import {
  createMcpHandler,
  McpServer as McpServerV2,
  ProtocolError as ServerProtocolError,
  ProtocolErrorCode,
  Server as ServerV2,
} from '@modelcontextprotocol/server';
import { z } from 'zod';
import { MAX_JSON_DEPTH } from '../../../src/lib/storable-input.js';
import { failureOfExchange, resultOfToolCall } from '../../../src/modules/tool/mcp-connector.js';
import { startRecordingServer, type Hit, type RecordingServer } from '../../support/recording-server.js';
import { serveWithWebHandler } from '../../support/web-handler.js';
import { lateAnswers, statefulEndpoint } from '../../support/mcp-upstream.js';
import { LOOPBACK_UPSTREAMS, startTestApp, type TestApp } from '../../support/app.js';
import { createKey, createManifest, manifestPayload, signUp, type OrgFixture } from '../../support/fixtures.js';

/**
 * The `mcp` tool connector (docs/guides/mcp.md#the-mcp-connector): CRUD with write-only header values,
 * and execution through the gateway as a `tools/call` to an upstream MCP server (the SDK's own
 * servers, on 127.0.0.1: v1 for the 2025-11-25 family, v2 for 2026-07-28) over Streamable HTTP,
 * under the http connector's rules: address policy, no redirects, one deadline, 1 MiB per answer,
 * failures as results, the agent's credentials never forwarded.
 */

let t: TestApp;
const iso = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;
/** Configured header values: write-only, and sent upstream. */
const HEADERS = { Authorization: 'Bearer upstream-tok-7d1e55a09c', 'x-tenant': 'acme-tenant-4410' };
/** Sent by the agent with its request: must never reach the upstream. */
const AGENT_HEADER_VALUE = 'agent-private-e3b0c44298fc';

// ---------------------------------------------------------------------------------------------
// The upstream: MCP servers on one loopback HTTP server, recording every request it gets.

const hits: Hit[] = [];
const hitsTo = (path: string) => hits.filter((h) => h.path === path);
let upstream: RecordingServer;
let port: number;

/** The `hang` tool's answers: past any deadline of these tests, and let go when the file ends. */
const late = lateAnswers();

/** The tools every upstream server offers. */
function upstreamServer(): McpServer {
  const server = new McpServer({ name: 'upstream', version: '1.0.0' });
  server.registerTool(
    'refund',
    { inputSchema: { invoice: z.string(), amount: z.number() } },
    async ({ invoice, amount }) => ({
      content: [{ type: 'text', text: `refunded ${amount} on ${invoice}` }],
      structuredContent: { refund_id: 'rf_1', invoice, amount },
    }),
  );
  server.registerTool('echo_args', { inputSchema: z.object({}).passthrough() }, async (args) => ({
    content: [{ type: 'text', text: 'echo' }],
    structuredContent: { tool: 'echo_args', arguments: args },
  }));
  server.registerTool('fail', {}, async () => ({
    content: [{ type: 'text', text: `declined: ${'x'.repeat(800)}` }],
    isError: true,
  }));
  server.registerTool('throws', {}, async () => {
    throw new Error('the ledger is locked');
  });
  server.registerTool('hang', {}, late.answer);
  server.registerTool('huge', {}, async () => ({ content: [{ type: 'text', text: 'h'.repeat(1536 * 1024) }] }));
  server.registerTool('deep', {}, async () => {
    let nested: Record<string, unknown> = { leaf: true };
    for (let i = 0; i < MAX_JSON_DEPTH + 5; i++) nested = { nested };
    return { content: [{ type: 'text', text: 'deep' }], structuredContent: nested };
  });
  server.registerTool('echo_headers', {}, async (extra) => ({
    content: [{ type: 'text', text: 'headers' }],
    structuredContent: { headers: extra.requestInfo?.headers ?? {} },
  }));
  return server;
}

/** What the MCP specification asks for: an unknown tool is a JSON-RPC error (-32602), not a tool error. */
function strictServer(): Server {
  const server = new Server({ name: 'strict', version: '1.0.0' }, { capabilities: { tools: {} } });
  // It lists a tool it no longer has (removed after the gateway read the list): the call reaches it.
  server.setRequestHandler(ListToolsRequestSchema, async () => ({
    tools: [{ name: 'missing', inputSchema: { type: 'object' } }],
  }));
  server.setRequestHandler(CallToolRequestSchema, async (request) => {
    throw new McpError(ErrorCode.InvalidParams, `Unknown tool: ${request.params.name}`);
  });
  return server;
}

/** The same tools on the SDK v2's McpServer, for the 2026-07-28 upstreams. */
function upstreamServerV2(): McpServerV2 {
  const server = new McpServerV2({ name: 'upstream-2026', version: '1.0.0' });
  server.registerTool(
    'refund',
    { inputSchema: z.object({ invoice: z.string(), amount: z.number() }) },
    async ({ invoice, amount }) => ({
      content: [{ type: 'text', text: `refunded ${amount} on ${invoice}` }],
      structuredContent: { refund_id: 'rf_2', invoice, amount },
    }),
  );
  server.registerTool('fail', {}, async () => ({
    content: [{ type: 'text', text: 'declined in 2026' }],
    isError: true,
  }));
  server.registerTool('hang', {}, late.answer);
  server.registerTool('huge', {}, async () => ({ content: [{ type: 'text', text: 'h'.repeat(1536 * 1024) }] }));
  server.registerTool('echo_headers', {}, async (ctx) => ({
    content: [{ type: 'text', text: 'headers' }],
    structuredContent: { headers: Object.fromEntries(ctx.http?.req?.headers ?? []) },
  }));
  return server;
}

/** A 2026-07-28 server answering an unknown tool with a JSON-RPC error, as the specification asks. */
function strictServerV2(): ServerV2 {
  const server = new ServerV2({ name: 'strict-2026', version: '1.0.0' }, { capabilities: { tools: {} } });
  server.setRequestHandler('tools/list', async () => ({
    tools: [{ name: 'missing', inputSchema: { type: 'object' } }],
  }));
  server.setRequestHandler('tools/call', async (request) => {
    throw new ServerProtocolError(ProtocolErrorCode.InvalidParams, `Unknown tool: ${request.params.name}`);
  });
  return server;
}

/** The SDK v2's entry: 2026-07-28 and, by default, the 2025 family (stateless) beside it. */
const bothRevisions = createMcpHandler(() => upstreamServerV2());
/** Strict: 2026-07-28 only; an `initialize` is refused. */
const onlyNewRevision = createMcpHandler(() => upstreamServerV2(), { legacy: 'reject' });
const strictNewRevision = createMcpHandler(() => strictServerV2(), { legacy: 'reject' });

/** Stateful (session ids, SSE answers), as most deployed servers are. */
const stateful = statefulEndpoint(upstreamServer);
const statefulSessions = stateful.sessions;

/** Stateless with JSON answers: a new server and transport per request. */
async function serveStateless(
  req: http.IncomingMessage,
  res: http.ServerResponse,
  body: unknown,
  server: McpServer | Server,
) {
  const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
  res.on('close', () => void transport.close());
  await server.connect(transport);
  await transport.handleRequest(req, res, body);
}

async function route(req: http.IncomingMessage, res: http.ServerResponse, hit: Hit) {
  let body: unknown;
  try {
    body = hit.body ? JSON.parse(hit.body) : undefined;
  } catch {
    body = undefined;
  }
  switch (hit.path) {
    case '/mcp':
      return stateful.serve(req, res, body);
    case '/mcp-stateless':
      return serveStateless(req, res, body, upstreamServer());
    case '/mcp-strict':
      return serveStateless(req, res, body, strictServer());
    case '/mcp-2026':
      return serveWithWebHandler(bothRevisions.fetch, hit, req, res);
    case '/mcp-2026-only':
      return serveWithWebHandler(onlyNewRevision.fetch, hit, req, res);
    case '/mcp-2026-strict':
      return serveWithWebHandler(strictNewRevision.fetch, hit, req, res);
    case '/redirect':
      res.writeHead(302, { location: `http://127.0.0.1:${port}/mcp-target` });
      return res.end();
    case '/error':
      res.writeHead(500, { 'content-type': 'application/json' });
      return res.end(JSON.stringify({ error: 'boom' }));
    case '/garbage':
      res.writeHead(200, { 'content-type': 'application/json' });
      return res.end('<html>definitely not json');
    default:
      res.writeHead(404);
      return res.end();
  }
}

beforeAll(async () => {
  upstream = await startRecordingServer(hits, (hit, res, req) =>
    route(req, res, hit).catch(() => {
      if (!res.headersSent) res.writeHead(500);
      res.end();
    }),
  );
  port = upstream.port;
  t = await startTestApp(LOOPBACK_UPSTREAMS);
});

afterAll(async () => {
  late.releaseAll();
  await stateful.forgetAll();
  await Promise.all([bothRevisions.close(), onlyNewRevision.close(), strictNewRevision.close()]);
  await upstream.close();
  await t.close();
});

// ---------------------------------------------------------------------------------------------
// Helpers

const toolsPath = (org: OrgFixture) => `/api/v1/orgs/${org.orgId}/tools`;
const local = (path: string) => `http://127.0.0.1:${port}${path}`;
const mcpTool = (config: Record<string, unknown>) => ({
  connector: 'mcp',
  config: { timeout_ms: 5000, allow_private_network: true, ...config },
});
const upstreamTools = [
  'refund',
  'echo_args',
  'fail',
  'throws',
  'hang',
  'huge',
  'deep',
  'echo_headers',
  'missing',
  'anything',
];

/** An org with an active agent allowed billing:<each upstream tool>, a gateway key and (optionally) a tool. */
async function gatewayOrg(tool?: { connector: string; config: Record<string, unknown> }) {
  const org = await signUp(t, 'mcp');
  const { svcId } = await createManifest(
    t,
    org,
    'active',
    manifestPayload({
      capabilities: upstreamTools.map((name) => `billing:${name}`),
      constraints: { max_actions_per_hour: 1000, max_actions_per_day: 1000 },
    }),
  );
  let toolId: string | undefined;
  if (tool) {
    const created = await t.request('POST', toolsPath(org), {
      token: org.adminToken,
      body: { action_type: 'billing', ...tool },
    });
    if (created.status !== 201) throw new Error(`tool create failed: ${created.status} ${created.text}`);
    toolId = created.body.tool_id;
  }
  const { key } = await createKey(t, org, ['gateway:execute']);
  const execute = (toolName = 'refund', params: Record<string, unknown> = { invoice: 'inv_42', amount: 1250 }) =>
    t.request('POST', '/api/v1/gateway/execute', {
      apiKey: key,
      headers: { 'x-agent-secret': AGENT_HEADER_VALUE },
      body: { svc_id: svcId, agent_id: svcId, action: { type: 'billing', tool: toolName, params } },
    });
  return { org, key, svcId, toolId, execute };
}

/** The interaction's record: the call was executed and its (failed) result recorded. */
async function expectRecorded(interactionId: string) {
  const [record] = await t.database.db.sql.query<{ status: string; executed: boolean; result_hash: string | null }>(
    'SELECT status, executed, result_hash FROM interaction_records WHERE id = $1',
    [interactionId],
  );
  expect(record).toMatchObject({ status: 'approved', executed: true, result_hash: expect.any(String) });
}

/** The gateway allowed and executed the action; the upstream call failed with `code`, and it is on record. */
async function expectToolFailure(response: { status: number; body: any }, code: string) {
  expect(response.status).toBe(200);
  expect(response.body).toMatchObject({ decision: 'allow', executed: true, reasons: [] });
  expect(response.body.result).toMatchObject({ success: false, error: { code, message: expect.any(String) } });
  await expectRecorded(response.body.interaction_id);
}

const toolCallsTo = (path: string) =>
  hitsTo(path).filter((h) => h.method === 'POST' && h.body.includes('"tools/call"'));

// ---------------------------------------------------------------------------------------------

describe('mcp tool CRUD', () => {
  let org: OrgFixture;
  beforeAll(async () => {
    org = await signUp(t, 'mcpcrud');
  });

  test('201 with its shape; header values are write-only ("[redacted]") in the answer, GET, list and audit log; no secret field', async () => {
    const created = await t.request('POST', toolsPath(org), {
      token: org.adminToken,
      body: {
        action_type: 'crm',
        connector: 'mcp',
        config: { url: 'https://mcp.example.com/mcp', timeout_ms: 2500, headers: HEADERS, tool: 'crm.update_v2' },
      },
    });
    expect(created.status).toBe(201);
    expect(created.body).toEqual({
      tool_id: expect.stringMatching(/^tool_/),
      action_type: 'crm',
      connector: 'mcp',
      config: {
        url: 'https://mcp.example.com/mcp',
        timeout_ms: 2500,
        headers: { Authorization: '[redacted]', 'x-tenant': '[redacted]' },
        auth: { type: 'headers' },
        allow_private_network: false,
        tool: 'crm.update_v2',
      },
      // The save read the upstream's definitions, which this address cannot give: nothing is pinned.
      definitions: [],
      definitions_checked_at: expect.stringMatching(iso),
      definitions_error: expect.stringMatching(/^TOOL_UNREACHABLE: /),
      created_at: expect.stringMatching(iso),
      updated_at: expect.stringMatching(iso),
    });
    const read = await t.request('GET', `${toolsPath(org)}/${created.body.tool_id}`, { token: org.adminToken });
    expect(read.body).toEqual(created.body);
    const list = await t.request('GET', toolsPath(org), { token: org.adminToken });
    expect(list.body.items).toContainEqual(created.body);
    const audit = await t.database.db.sql.query<{ after: any }>('SELECT after FROM audit_logs WHERE target_id = $1', [
      created.body.tool_id,
    ]);
    expect(audit[0].after.config).toEqual(created.body.config);
    // Kept apart from `config`, as an http tool's are (sealed there when a KEY_ENCRYPTION_KEY is configured).
    const [row] = await t.database.db.sql.query<{ secret_headers: Record<string, string>; config: unknown }>(
      'SELECT secret_headers, config FROM tools WHERE id = $1',
      [created.body.tool_id],
    );
    expect(Object.keys(row.secret_headers).sort()).toEqual(Object.keys(HEADERS).sort());
    for (const text of [created.text, read.text, list.text, JSON.stringify(audit), JSON.stringify(row.config)]) {
      for (const value of Object.values(HEADERS)) expect(text).not.toContain(value);
    }
  });

  test('defaults: timeout 10000, no headers, tool null (the action’s <action> part is called)', async () => {
    const created = await t.request('POST', toolsPath(org), {
      token: org.adminToken,
      body: { action_type: 'defaults', connector: 'mcp', config: { url: 'https://mcp.example.com/' } },
    });
    expect(created.status).toBe(201);
    expect(created.body.config).toEqual({
      url: 'https://mcp.example.com/',
      timeout_ms: 10000,
      headers: {},
      auth: { type: 'headers' },
      allow_private_network: false,
      tool: null,
    });
  });

  test.each([
    ['a secret (mcp tools have none)', { secret: '0123456789abcdef0123' }, 'config.secret'],
    ['an unknown field', { method: 'GET' }, 'config.method'],
    ['a tool name with a space', { tool: 'refund now' }, 'config.tool'],
    ['a tool name with a slash', { tool: 'billing/refund' }, 'config.tool'],
    ['an empty tool name', { tool: '' }, 'config.tool'],
    ['a 129-character tool name', { tool: 'a'.repeat(129) }, 'config.tool'],
    ['a non-string tool name', { tool: 7 }, 'config.tool'],
    ['a non-http(s) url', { url: 'ws://mcp.example.com/' }, 'config.url'],
    ['a url with credentials', { url: 'https://user:pass@mcp.example.com/' }, 'config.url'],
    ['no url', { url: undefined }, 'config.url'],
    ['timeout_ms 0', { timeout_ms: 0 }, 'config.timeout_ms'],
    ['timeout_ms 60001', { timeout_ms: 60001 }, 'config.timeout_ms'],
    ['a header value with a line break', { headers: { 'x-evil': 'a\r\nb: c' } }, 'config.headers.x-evil'],
    ['a non-boolean allow_private_network', { allow_private_network: 'yes' }, 'config.allow_private_network'],
    ['a loopback url without allow_private_network', { url: 'http://127.0.0.1:9/mcp' }, 'config.url'],
    ['localhost without allow_private_network', { url: 'http://localhost:9/mcp' }, 'config.url'],
  ])('%s: 422 naming the field, nothing saved', async (_label, change, field) => {
    const before = (await t.request('GET', toolsPath(org), { token: org.adminToken })).body.total;
    const response = await t.request('POST', toolsPath(org), {
      token: org.adminToken,
      body: {
        action_type: `v-${Math.random().toString(36).slice(2, 8)}`,
        connector: 'mcp',
        config: { url: 'https://mcp.example.com/', ...change },
      },
    });
    expect(response.status).toBe(422);
    expect(response.body.error.code).toBe('VALIDATION_ERROR');
    expect(response.body.error.details.errors).toEqual([{ field, message: expect.any(String) }]);
    expect((await t.request('GET', toolsPath(org), { token: org.adminToken })).body.total).toBe(before);
  });

  test('tool names MCP allows are accepted: 128 characters, dots, dashes, capitals', async () => {
    for (const [actionType, tool] of [
      ['name-1', 'a'.repeat(128)],
      ['name-2', 'Billing.Refund-v2_final'],
    ]) {
      const response = await t.request('POST', toolsPath(org), {
        token: org.adminToken,
        body: { action_type: actionType, connector: 'mcp', config: { url: 'https://mcp.example.com/', tool } },
      });
      expect(response.status).toBe(201);
      expect(response.body.config.tool).toBe(tool);
    }
  });

  test('a loopback url is saved with allow_private_network; PATCH with "[redacted]" keeps the header value, a given one replaces it', async () => {
    const { org: own, toolId, execute } = await gatewayOrg(mcpTool({ url: local('/mcp'), headers: HEADERS }));
    const path = `${toolsPath(own)}/${toolId}`;
    const shown = (await t.request('GET', path, { token: own.adminToken })).body.config;
    expect(shown.headers).toEqual({ Authorization: '[redacted]', 'x-tenant': '[redacted]' });

    const roundTrip = await t.request('PATCH', path, {
      token: own.adminToken,
      body: { config: { ...shown, timeout_ms: 4000 } },
    });
    expect(roundTrip.status).toBe(200);
    expect(roundTrip.body.config).toEqual({ ...shown, timeout_ms: 4000 });
    const kept = await execute('echo_headers');
    expect(kept.body.result.success).toBe(true);
    expect(kept.body.result.data.structuredContent.headers).toMatchObject({
      authorization: HEADERS.Authorization,
      'x-tenant': HEADERS['x-tenant'],
    });

    const changed = await t.request('PATCH', path, {
      token: own.adminToken,
      body: { config: { ...shown, headers: { Authorization: 'Bearer rotated-5566' } } },
    });
    expect(changed.status).toBe(200);
    expect(changed.body.config.headers).toEqual({ Authorization: '[redacted]' });
    const replaced = await execute('echo_headers');
    expect(replaced.body.result.data.structuredContent.headers.authorization).toBe('Bearer rotated-5566');
    expect(replaced.body.result.data.structuredContent.headers['x-tenant']).toBeUndefined();

    const audits = await t.database.db.sql.query<{ after: any }>(
      "SELECT after FROM audit_logs WHERE target_id = $1 AND action IN ('tool.created', 'tool.updated') ORDER BY created_at, id",
      [toolId],
    );
    expect(audits.map((a) => a.after.secrets_set)).toEqual([undefined, [], ['headers.Authorization']]);
    expect(JSON.stringify(audits)).not.toContain('rotated-5566');
  });

  test('PATCH of the url to loopback without allow_private_network: 422, the tool unchanged', async () => {
    const { org: own, toolId } = await gatewayOrg(
      mcpTool({ url: 'https://mcp.example.com/', allow_private_network: false }),
    );
    const path = `${toolsPath(own)}/${toolId}`;
    const before = (await t.request('GET', path, { token: own.adminToken })).body;
    const patched = await t.request('PATCH', path, { token: own.adminToken, body: { config: { url: local('/mcp') } } });
    expect(patched.status).toBe(422);
    expect(patched.body.error.details.errors.map((e: { field: string }) => e.field)).toEqual(['config.url']);
    expect((await t.request('GET', path, { token: own.adminToken })).body).toEqual(before);
  });
});

describe('execution through the gateway', () => {
  test('a stateful upstream (SSE answers): the action’s tool is called with its params; structuredContent and content are the result', async () => {
    const { execute } = await gatewayOrg(mcpTool({ url: local('/mcp'), headers: HEADERS }));
    const callsBefore = toolCallsTo('/mcp').length;
    const response = await execute('refund', { invoice: 'inv_42', amount: 1250 });
    expect(response.status).toBe(200);
    expect(response.body).toMatchObject({ decision: 'allow', executed: true, reasons: [] });
    expect(response.body.result).toEqual({
      success: true,
      data: {
        content: [{ type: 'text', text: 'refunded 1250 on inv_42' }],
        structuredContent: { refund_id: 'rf_1', invoice: 'inv_42', amount: 1250 },
      },
      error: null,
    });
    await expectRecorded(response.body.interaction_id);

    const calls = toolCallsTo('/mcp').slice(callsBefore);
    expect(calls).toHaveLength(1);
    expect(JSON.parse(calls[0].body)).toMatchObject({
      jsonrpc: '2.0',
      method: 'tools/call',
      params: { name: 'refund', arguments: { invoice: 'inv_42', amount: 1250 } },
    });
    expect(calls[0].headers['x-interaction-id']).toBe(response.body.interaction_id);
    expect(calls[0].headers['user-agent']).toBe('agent-gateway');
    // The session stays for the tool's next call (it is ended when its client leaves the pool:
    // test/mcp-connector-pool.test.ts), and no standalone GET stream was opened.
    const sessionId = calls[0].headers['mcp-session-id'];
    expect(typeof sessionId).toBe('string');
    expect(statefulSessions.has(sessionId as string)).toBe(true);
    expect(hitsTo('/mcp').filter((h) => h.method === 'GET')).toHaveLength(0);
  });

  test('a stateless upstream (JSON answers): the same result, no session to end', async () => {
    const { execute } = await gatewayOrg(mcpTool({ url: local('/mcp-stateless') }));
    const before = hitsTo('/mcp-stateless').length;
    const response = await execute('refund', { invoice: 'inv_9', amount: 3 });
    expect(response.body.result).toEqual({
      success: true,
      data: {
        content: [{ type: 'text', text: 'refunded 3 on inv_9' }],
        structuredContent: { refund_id: 'rf_1', invoice: 'inv_9', amount: 3 },
      },
      error: null,
    });
    await new Promise((resolve) => setTimeout(resolve, 100));
    // The server/discover probe (refused: a 2025-era server), initialize, notifications/initialized,
    // tools/call: nothing else.
    const received = hitsTo('/mcp-stateless').slice(before);
    expect(received.map((h) => h.method)).toEqual(['POST', 'POST', 'POST', 'POST']);
    expect(received.map((h) => JSON.parse(h.body).method)).toEqual([
      'server/discover',
      'initialize',
      'notifications/initialized',
      'tools/call',
    ]);
    expect(received[3].headers['mcp-protocol-version']).toBe('2025-11-25');
    expect(received[3].headers['mcp-method']).toBeUndefined();
  });

  test('config.tool names the upstream tool instead of the action’s <action> part', async () => {
    const { execute } = await gatewayOrg(mcpTool({ url: local('/mcp-stateless'), tool: 'echo_args' }));
    const response = await execute('anything', { note: 'n1' });
    expect(response.body.result).toMatchObject({
      success: true,
      data: { structuredContent: { tool: 'echo_args', arguments: { note: 'n1' } } },
    });
  });

  test('only the configured headers and the protocol’s own reach the upstream: never the agent’s API key or headers', async () => {
    const { key, execute } = await gatewayOrg(mcpTool({ url: local('/mcp'), headers: HEADERS }));
    const before = hitsTo('/mcp').length;
    const response = await execute('echo_headers');
    expect(response.body.result.success).toBe(true);
    const seen = response.body.result.data.structuredContent.headers;
    expect(seen).toMatchObject({ authorization: HEADERS.Authorization, 'x-tenant': HEADERS['x-tenant'] });
    expect(seen['x-api-key']).toBeUndefined();
    expect(seen['x-agent-secret']).toBeUndefined();

    const received = hitsTo('/mcp').slice(before);
    expect(received.length).toBeGreaterThanOrEqual(3);
    const allowed = new Set([
      'host',
      'connection',
      'content-length',
      'content-type',
      'accept',
      'mcp-protocol-version',
      'mcp-session-id',
      'mcp-method',
      'mcp-name',
      'user-agent',
      'x-interaction-id',
      'authorization',
      'x-tenant',
    ]);
    for (const hit of received) {
      expect(Object.keys(hit.headers).filter((name) => !allowed.has(name))).toEqual([]);
      expect(hit.headers.authorization).toBe(HEADERS.Authorization);
    }
    const everything = JSON.stringify(received);
    expect(everything).not.toContain(key);
    expect(everything).not.toContain(AGENT_HEADER_VALUE);
  });

  test('configured headers cannot stand in for the protocol’s own (session id, accept, content type)', async () => {
    const { execute } = await gatewayOrg(
      mcpTool({
        url: local('/mcp-stateless'),
        headers: { 'Mcp-Session-Id': 'forged-session', Accept: 'text/plain', 'x-kept': 'yes' },
      }),
    );
    const response = await execute('echo_headers');
    expect(response.body.result.success).toBe(true);
    const seen = response.body.result.data.structuredContent.headers;
    expect(seen['x-kept']).toBe('yes');
    expect(seen['mcp-session-id']).toBeUndefined();
    expect(seen.accept).toBe('application/json, text/event-stream');
  });

  describe('failures are results (allow, executed, success false, recorded)', () => {
    test('the tool reports isError: TOOL_ERROR with its text (500 characters at most) and content as data', async () => {
      const { execute } = await gatewayOrg(mcpTool({ url: local('/mcp') }));
      const response = await execute('fail');
      await expectToolFailure(response, 'TOOL_ERROR');
      expect(response.body.result.error.message).toBe(`declined: ${'x'.repeat(490)}`);
      expect(response.body.result.data.content[0].text).toHaveLength('declined: '.length + 800);
    });

    test('the tool’s handler throws: the SDK server answers an isError result, TOOL_ERROR with the thrown message', async () => {
      const { execute } = await gatewayOrg(mcpTool({ url: local('/mcp') }));
      const response = await execute('throws');
      await expectToolFailure(response, 'TOOL_ERROR');
      expect(response.body.result.error.message).toContain('the ledger is locked');
    });

    test('an unknown tool answered with a JSON-RPC error (as the MCP specification asks): TOOL_MCP_ERROR with its code and message', async () => {
      const { execute } = await gatewayOrg(mcpTool({ url: local('/mcp-strict') }));
      const response = await execute('missing');
      await expectToolFailure(response, 'TOOL_MCP_ERROR');
      expect(response.body.result.error.message).toContain('-32602');
      expect(response.body.result.error.message).toContain('Unknown tool: missing');
      expect(response.body.result.data).toEqual({});
    });

    test('a tool the upstream does not list is not called: denied with TOOL_NOT_FOUND_UPSTREAM, recorded', async () => {
      const { execute } = await gatewayOrg(mcpTool({ url: local('/mcp') }));
      const callsBefore = toolCallsTo('/mcp').length;
      const response = await execute('missing');
      expect(response.status).toBe(200);
      expect(response.body).toMatchObject({ decision: 'deny', executed: false, result: null });
      expect(response.body.reasons).toEqual([
        {
          code: 'TOOL_NOT_FOUND_UPSTREAM',
          message: expect.stringContaining('"missing"'),
          details: { tool: 'missing' },
        },
      ]);
      expect(toolCallsTo('/mcp').length).toBe(callsBefore);
      const [record] = await t.database.db.sql.query<{ status: string; executed: boolean }>(
        'SELECT status, executed FROM interaction_records WHERE id = $1',
        [response.body.interaction_id],
      );
      expect(record).toEqual({ status: 'denied', executed: false });
    });

    test('the tool never answers: TOOL_TIMEOUT after timeout_ms 300, the gateway answers promptly', async () => {
      const { execute } = await gatewayOrg(mcpTool({ url: local('/mcp'), timeout_ms: 300 }));
      const callsBefore = toolCallsTo('/mcp').length;
      const started = Date.now();
      const response = await execute('hang');
      const elapsed = Date.now() - started;
      await expectToolFailure(response, 'TOOL_TIMEOUT');
      expect(response.body.result.error.message).toContain('300');
      expect(elapsed).toBeLessThan(2000);
      expect(toolCallsTo('/mcp').length).toBe(callsBefore + 1);
    });

    test('the deadline covers the whole exchange: a timeout shorter than initializing takes fails the same way', async () => {
      const { execute } = await gatewayOrg(mcpTool({ url: local('/mcp'), timeout_ms: 1 }));
      const response = await execute('refund');
      await expectToolFailure(response, 'TOOL_TIMEOUT');
    });

    test('an answer over 1 MiB: TOOL_RESPONSE_TOO_LARGE, nothing of it returned', async () => {
      const { execute } = await gatewayOrg(mcpTool({ url: local('/mcp') }));
      const response = await execute('huge');
      await expectToolFailure(response, 'TOOL_RESPONSE_TOO_LARGE');
      expect(response.body.result.data).toEqual({});
      expect(response.text.length).toBeLessThan(10_000);
    });

    test(`a result nesting deeper than ${MAX_JSON_DEPTH} levels: TOOL_RESPONSE_INVALID`, async () => {
      const { execute } = await gatewayOrg(mcpTool({ url: local('/mcp-stateless') }));
      const response = await execute('deep');
      await expectToolFailure(response, 'TOOL_RESPONSE_INVALID');
      expect(response.body.result.data).toEqual({});
    });

    test('the upstream answers 302: TOOL_REDIRECT_REFUSED and the Location is not requested', async () => {
      const { execute } = await gatewayOrg(mcpTool({ url: local('/redirect') }));
      const before = hitsTo('/redirect').length;
      const response = await execute('refund');
      await expectToolFailure(response, 'TOOL_REDIRECT_REFUSED');
      expect(hitsTo('/redirect').length).toBe(before + 1);
      await new Promise((resolve) => setTimeout(resolve, 100));
      expect(hitsTo('/mcp-target')).toHaveLength(0);
    });

    test('the upstream answers 500: TOOL_HTTP_ERROR naming the status', async () => {
      const { execute } = await gatewayOrg(mcpTool({ url: local('/error') }));
      const response = await execute('refund');
      await expectToolFailure(response, 'TOOL_HTTP_ERROR');
      expect(response.body.result.error.message).toContain('500');
    });

    test('the upstream answers 404 (no MCP endpoint there): TOOL_HTTP_ERROR', async () => {
      const { execute } = await gatewayOrg(mcpTool({ url: local('/nothing-here') }));
      const response = await execute('refund');
      await expectToolFailure(response, 'TOOL_HTTP_ERROR');
      expect(response.body.result.error.message).toContain('404');
    });

    test('the upstream answers garbage as JSON: TOOL_RESPONSE_INVALID', async () => {
      const { execute } = await gatewayOrg(mcpTool({ url: local('/garbage') }));
      const response = await execute('refund');
      await expectToolFailure(response, 'TOOL_RESPONSE_INVALID');
    });

    test('nothing listens on the port: TOOL_UNREACHABLE', async () => {
      const closed = http.createServer();
      await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
      const deadPort = (closed.address() as AddressInfo).port;
      await new Promise<void>((resolve) => closed.close(() => resolve()));
      const { execute } = await gatewayOrg(mcpTool({ url: `http://127.0.0.1:${deadPort}/mcp` }));
      await expectToolFailure(await execute('refund'), 'TOOL_UNREACHABLE');
    });
  });

  describe('address policy on connecting: rows saved before save-time checks, names that resolve to loopback', () => {
    // Saving refuses these; a name may start resolving to a private address later (DNS
    // rebinding), so connecting checks again. The rows are written directly, as saving refuses them.
    test.each([
      ['127.0.0.1 (literal)', () => local('/mcp')],
      ['localhost (resolves to loopback)', () => `http://localhost:${port}/mcp`],
      ['[::ffff:127.0.0.1] (IPv4-mapped loopback)', () => `http://[::ffff:127.0.0.1]:${port}/mcp`],
    ])(
      '%s without allow_private_network: TOOL_ADDRESS_REFUSED and the upstream counts no request',
      async (_label, url) => {
        const { toolId, execute } = await gatewayOrg(
          mcpTool({ url: 'https://mcp.example.com/placeholder', allow_private_network: false }),
        );
        await t.database.db.sql.query(
          `UPDATE tools SET config = jsonb_set(config, '{url}', to_jsonb($2::text)) WHERE id = $1`,
          [toolId, url()],
        );
        const before = hits.length;
        const response = await execute('refund');
        await expectToolFailure(response, 'TOOL_ADDRESS_REFUSED');
        expect(response.body.result.data).toEqual({});
        expect(hits.length).toBe(before);
      },
    );
  });
});

describe('2026-07-28 upstreams (the SDK v2 server): server/discover, then tools/call, under the same rules', () => {
  const methodsOf = (received: Hit[]) => received.map((h) => JSON.parse(h.body).method);

  test('a server of both revisions is spoken to in 2026-07-28: no initialize, no session, Mcp-Method and Mcp-Name on the call', async () => {
    const { key, execute } = await gatewayOrg(mcpTool({ url: local('/mcp-2026'), headers: HEADERS }));
    const before = hitsTo('/mcp-2026').length;
    const response = await execute('refund', { invoice: 'inv_26', amount: 7 });
    expect(response.status).toBe(200);
    expect(response.body.result).toEqual({
      success: true,
      data: {
        content: [{ type: 'text', text: 'refunded 7 on inv_26' }],
        structuredContent: { refund_id: 'rf_2', invoice: 'inv_26', amount: 7 },
      },
      error: null,
    });
    await expectRecorded(response.body.interaction_id);
    await new Promise((resolve) => setTimeout(resolve, 100));
    const received = hitsTo('/mcp-2026').slice(before);
    expect(received.map((h) => h.method)).toEqual(['POST', 'POST']);
    expect(methodsOf(received)).toEqual(['server/discover', 'tools/call']);
    const [probe, call] = received;
    expect(probe.headers).toMatchObject({ 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'server/discover' });
    expect(call.headers).toMatchObject({
      'mcp-protocol-version': '2026-07-28',
      'mcp-method': 'tools/call',
      'mcp-name': 'refund',
    });
    expect(JSON.parse(call.body).params).toMatchObject({
      name: 'refund',
      arguments: { invoice: 'inv_26', amount: 7 },
      _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28' },
    });
    expect(call.headers['x-interaction-id']).toBe(response.body.interaction_id);
    // Only the configured headers and the protocol's own, never the agent's.
    const allowed = new Set([
      'host',
      'connection',
      'content-length',
      'content-type',
      'accept',
      'mcp-protocol-version',
      'mcp-method',
      'mcp-name',
      'user-agent',
      'x-interaction-id',
      'authorization',
      'x-tenant',
    ]);
    for (const hit of received) {
      expect(Object.keys(hit.headers).filter((name) => !allowed.has(name))).toEqual([]);
      expect(hit.headers.authorization).toBe(HEADERS.Authorization);
      expect(hit.headers['mcp-session-id']).toBeUndefined();
    }
    expect(JSON.stringify(received)).not.toContain(key);
    expect(JSON.stringify(received)).not.toContain(AGENT_HEADER_VALUE);
  });

  test('a server of 2026-07-28 only: the same call; the tool sees the configured headers and the agent’s never', async () => {
    const { execute } = await gatewayOrg(mcpTool({ url: local('/mcp-2026-only'), headers: HEADERS }));
    const before = hitsTo('/mcp-2026-only').length;
    expect((await execute('refund', { invoice: 'inv_27', amount: 8 })).body.result).toMatchObject({
      success: true,
      data: { structuredContent: { refund_id: 'rf_2', invoice: 'inv_27', amount: 8 } },
    });
    const echoed = await execute('echo_headers');
    expect(echoed.body.result.success).toBe(true);
    const seen = echoed.body.result.data.structuredContent.headers;
    expect(seen).toMatchObject({
      authorization: HEADERS.Authorization,
      'x-tenant': HEADERS['x-tenant'],
      'mcp-name': 'echo_headers',
    });
    expect(seen['x-api-key']).toBeUndefined();
    expect(seen['x-agent-secret']).toBeUndefined();
    // The second call reuses the tool's client: what the probe found is still known.
    expect(methodsOf(hitsTo('/mcp-2026-only').slice(before))).toEqual(['server/discover', 'tools/call', 'tools/call']);
  });

  describe('failures are results, as with the 2025 family', () => {
    test.each([
      [
        'the tool reports isError: TOOL_ERROR with its text',
        '/mcp-2026-only',
        'fail',
        'TOOL_ERROR',
        'declined in 2026',
      ],
      [
        'an unknown tool answered with a JSON-RPC error: TOOL_MCP_ERROR',
        '/mcp-2026-strict',
        'missing',
        'TOOL_MCP_ERROR',
        'The MCP server answered error -32602: Unknown tool: missing',
      ],
    ] as const)('%s', async (_label, path, tool, code, message) => {
      const { execute } = await gatewayOrg(mcpTool({ url: local(path) }));
      const response = await execute(tool);
      await expectToolFailure(response, code);
      expect(response.body.result.error.message).toBe(message);
    });

    test('the tool never answers: TOOL_TIMEOUT after timeout_ms, the deadline covering the probe and the call', async () => {
      const { execute } = await gatewayOrg(mcpTool({ url: local('/mcp-2026-only'), timeout_ms: 300 }));
      const started = Date.now();
      const response = await execute('hang');
      await expectToolFailure(response, 'TOOL_TIMEOUT');
      expect(Date.now() - started).toBeLessThan(2000);
    });

    test('an answer over 1 MiB: TOOL_RESPONSE_TOO_LARGE', async () => {
      const { execute } = await gatewayOrg(mcpTool({ url: local('/mcp-2026-only') }));
      const response = await execute('huge');
      await expectToolFailure(response, 'TOOL_RESPONSE_TOO_LARGE');
      expect(response.body.result.data).toEqual({});
    });
  });
});

describe('result mapping (pure)', () => {
  test('structuredContent only when the upstream gave it', () => {
    expect(resultOfToolCall({ content: [{ type: 'text', text: 'ok' }] })).toEqual({
      success: true,
      data: { content: [{ type: 'text', text: 'ok' }] },
    });
    expect(resultOfToolCall({ content: [], structuredContent: { a: 1 } })).toEqual({
      success: true,
      data: { content: [], structuredContent: { a: 1 } },
    });
  });

  test('isError without text content: TOOL_ERROR with a default message and the content as data', () => {
    const image = { type: 'image' as const, data: 'AAAA', mimeType: 'image/png' };
    expect(resultOfToolCall({ content: [image], isError: true })).toEqual({
      success: false,
      data: { content: [image] },
      error: { code: 'TOOL_ERROR', message: 'The MCP tool reported an error' },
    });
  });

  test('the first text item is the message, after non-text items', () => {
    const result = resultOfToolCall({
      content: [
        { type: 'image', data: 'AAAA', mimeType: 'image/png' },
        { type: 'text', text: 'first' },
        { type: 'text', text: 'second' },
      ],
      isError: true,
    });
    expect(result).toMatchObject({ success: false, error: { code: 'TOOL_ERROR', message: 'first' } });
  });

  test('a remembered outbound failure decides over the SDK’s error; a ProtocolError is TOOL_MCP_ERROR; anything else TOOL_RESPONSE_INVALID', () => {
    const remembered = { success: false as const, data: {}, error: { code: 'TOOL_TIMEOUT' as const, message: 'late' } };
    expect(failureOfExchange(new ProtocolError(-32000, 'Connection closed'), remembered)).toBe(remembered);
    expect(failureOfExchange(new ProtocolError(-32602, 'Unknown tool: x'), undefined)).toMatchObject({
      success: false,
      error: { code: 'TOOL_MCP_ERROR', message: expect.stringContaining('-32602') },
    });
    expect(failureOfExchange(new SyntaxError('Unexpected token <'), undefined)).toMatchObject({
      success: false,
      error: { code: 'TOOL_RESPONSE_INVALID', message: expect.stringContaining('Unexpected token') },
    });
  });
});
