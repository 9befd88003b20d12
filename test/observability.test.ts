import { rm } from 'node:fs/promises';
import type http from 'node:http';
import type { AddressInfo } from 'node:net';
import { SpanKind } from '@opentelemetry/api';
import { InMemorySpanExporter, type ReadableSpan } from '@opentelemetry/sdk-trace';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { LATEST_PROTOCOL_VERSION } from '@modelcontextprotocol/sdk/types.js';
import { createMcpHandler, McpServer as McpServerV2 } from '@modelcontextprotocol/server';
import { parseEnv } from '../src/env.js';
import { createMetricsServer } from '../src/observability/metrics-server.js';
import { createTelemetry, type Telemetry } from '../src/observability/telemetry.js';
import { startRecordingServer, type Hit, type RecordingServer } from './support/recording-server.js';
import { serveWithWebHandler } from './support/web-handler.js';
import { LOOPBACK_UPSTREAMS, startTestApp, type TestApp } from './support/app.js';
import { signUp, type OrgFixture } from './support/fixtures.js';
import { delta, parseExposition, sampleValue } from './support/metrics.js';
import { actionBody, evaluate, execute, readyAgent, type AgentFixture } from './support/gateway.js';
import { freePort, killAllServices, startService, waitExit, waitReady } from './support/service-process.js';
import { migratedDataDir } from './support/pglite-template.js';

/**
 * Metrics and traces (docs/decisions/0039-metrics-and-traces.md): the counters and histograms move by exactly
 * the traffic's amounts, labels never carry ids, /metrics is served only by its own listener, and
 * spans nest request → decision → tool call and record append, with W3C trace context going out to
 * http tools and webhooks and coming in from callers.
 */

// ---------------------------------------------------------------------------------------------
// A receiver on 127.0.0.1 for the http tool, the webhook and an upstream MCP server (stateless,
// the SDK's own), keeping the headers it got.

const hits: Hit[] = [];
let receiver: RecordingServer;
let receiverBase: string;

async function serveMcp(req: http.IncomingMessage, res: http.ServerResponse, body: string) {
  const server = new McpServer({ name: 'upstream', version: '1.0.0' });
  server.registerTool('lookup', {}, async () => ({ content: [{ type: 'text', text: 'found' }] }));
  const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
  res.on('close', () => void transport.close());
  await server.connect(transport);
  await transport.handleRequest(req, res, body ? JSON.parse(body) : undefined);
}

/** The same upstream on the SDK v2's entry, 2026-07-28 only. */
const upstream2026 = createMcpHandler(
  () => {
    const server = new McpServerV2({ name: 'upstream-2026', version: '1.0.0' });
    server.registerTool('lookup', {}, async () => ({ content: [{ type: 'text', text: 'found' }] }));
    return server;
  },
  { legacy: 'reject' },
);

const exporter = new InMemorySpanExporter();
let telemetry: Telemetry;
let t: TestApp;

beforeAll(async () => {
  receiver = await startRecordingServer(hits, (hit, res, req) => {
    if (hit.path === '/mcp-upstream') return void serveMcp(req, res, hit.body);
    if (hit.path === '/mcp-upstream-2026') return void serveWithWebHandler(upstream2026.fetch, hit, req, res);
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ shipped: true }));
  });
  receiverBase = receiver.base;
  telemetry = createTelemetry({ spanExporter: exporter, spanProcessor: 'simple' });
  t = await startTestApp({ ...LOOPBACK_UPSTREAMS, WEBHOOK_POLL_MS: '20' }, { telemetry });
});

afterAll(async () => {
  await t?.close();
  await telemetry?.shutdown();
  await receiver.close();
  await upstream2026.close();
  await killAllServices();
});

const scrape = async () => parseExposition((await telemetry.scrape()).text);

async function eventually<T>(
  read: () => Promise<T>,
  done: (value: T) => boolean,
  what: string,
  deadlineMs = 10_000,
): Promise<T> {
  const until = Date.now() + deadlineMs;
  for (;;) {
    const value = await read();
    if (done(value)) return value;
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

// ---------------------------------------------------------------------------------------------
// Fixtures

/** A tools/call of the 2025 family or, with `revision` 2026-07-28, with its `_meta` envelope and headers. */
const mcpCall = (
  agent: AgentFixture,
  name: string,
  args: Record<string, unknown>,
  headers: Record<string, string> = {},
  revision = LATEST_PROTOCOL_VERSION,
) => {
  const modern = revision === '2026-07-28';
  const envelope = {
    'io.modelcontextprotocol/protocolVersion': revision,
    'io.modelcontextprotocol/clientInfo': { name: 'obs', version: '1' },
    'io.modelcontextprotocol/clientCapabilities': {},
  };
  return t.request('POST', `/mcp/${agent.svcId}`, {
    apiKey: agent.key,
    headers: {
      accept: 'application/json, text/event-stream',
      'mcp-protocol-version': revision,
      ...(modern ? { 'mcp-method': 'tools/call', 'mcp-name': name } : {}),
      ...headers,
    },
    body: {
      jsonrpc: '2.0',
      id: 7,
      method: 'tools/call',
      params: { name, arguments: args, ...(modern ? { _meta: envelope } : {}) },
    },
  });
};

async function createPolicy(org: OrgFixture, body: Record<string, unknown>) {
  const created = await t.request('POST', '/api/v1/policies', { token: org.adminToken, body });
  if (created.status !== 201) throw new Error(`policy failed: ${created.status} ${created.text}`);
}

async function httpTool(org: OrgFixture, actionType: string, pathOnReceiver: string) {
  const created = await t.request('POST', `/api/v1/orgs/${org.orgId}/tools`, {
    token: org.adminToken,
    body: {
      action_type: actionType,
      connector: 'http',
      config: { url: `${receiverBase}${pathOnReceiver}`, allow_private_network: true },
    },
  });
  if (created.status !== 201) throw new Error(`tool failed: ${created.status} ${created.text}`);
}

const shipment = (agent: AgentFixture) => ({
  svc_id: agent.svcId,
  agent_id: agent.svcId,
  action: { type: 'shipping', tool: 'create', params: { parcel: 1 } },
});

const spans = () => exporter.getFinishedSpans();
const childrenOf = (parent: ReadableSpan) =>
  spans().filter(
    (s) =>
      s.parentSpanContext?.spanId === parent.spanContext().spanId &&
      s.spanContext().traceId === parent.spanContext().traceId,
  );
const only = (found: ReadableSpan[], what: string): ReadableSpan => {
  if (found.length !== 1)
    throw new Error(`expected one ${what}, got ${found.length}: ${found.map((s) => s.name).join(', ')}`);
  return found[0];
};
/** The server span of the request that answered with this X-Request-Id. */
const requestSpan = (requestId: string) =>
  only(
    spans().filter((s) => s.attributes['agw.request_id'] === requestId),
    `request span ${requestId}`,
  );
const traceparentPattern = /^00-([0-9a-f]{32})-([0-9a-f]{16})-0[01]$/;

// ---------------------------------------------------------------------------------------------

describe('metrics', () => {
  test('counters and histograms move by exactly the traffic’s amounts; labels carry no ids', async () => {
    const org = await signUp(t, 'obs-metrics');
    const agent = await readyAgent(t, org);
    // Evaluated on every billing call: one never matches, one fails (no amount: fails closed, shadow).
    await createPolicy(org, {
      name: 'big refunds',
      effect: 'deny',
      mode: 'shadow',
      target: { capabilities: ['billing:*'] },
      condition: 'has(params.amount) && params.amount > 100',
    });
    await createPolicy(org, {
      name: 'broken',
      effect: 'deny',
      mode: 'shadow',
      target: { capabilities: ['billing:*'] },
      condition: 'params.amount > 100',
    });
    // Only refunds: a human is asked (a pending approval, an approval.requested webhook).
    await createPolicy(org, {
      name: 'refunds need a human',
      effect: 'require_approval',
      target: { capabilities: ['billing:refund'] },
    });
    const webhook = await t.request('POST', `/api/v1/orgs/${org.orgId}/webhooks`, {
      token: org.adminToken,
      body: { url: `${receiverBase}/hook`, events: ['approval.requested'], allow_private_network: true },
    });
    expect(webhook.status).toBe(201);

    const before = await scrape();
    for (let i = 0; i < 3; i++) expect((await execute(t, agent)).status).toBe(200);
    for (let i = 0; i < 2; i++) expect((await evaluate(t, agent)).status).toBe(200);
    const mcp = await mcpCall(agent, 'billing__read', { invoice: 'inv-9' });
    expect(mcp.status).toBe(200);
    expect(mcp.body.result.isError).toBe(false);
    const denied = await execute(t, agent, actionBody(agent, 'refund', { invoice: 'inv-2' }));
    expect(denied.body.decision).toBe('deny');
    expect(denied.body.reasons.map((r: { code: string }) => r.code)).toEqual(['APPROVAL_REQUIRED']);
    const unknown = await t.request('GET', `/api/v1/no-such-route/${org.orgId}`, { token: org.adminToken });
    expect(unknown.status).toBe(404);
    await eventually(
      scrape,
      (now) => delta(before, now, 'agw_webhook_deliveries_total', { outcome: 'delivered' }) >= 1,
      'the webhook delivery',
    );

    const after = await scrape();
    const d = (name: string, labels: Record<string, string> = {}) => delta(before, after, name, labels);

    // Requests by method, route pattern and status; the histogram counts the same requests.
    const executeRoute = { method: 'POST', route: '/api/v1/gateway/execute', status: '200' };
    // A denial is a 200 too: 3 allowed executes and the denied one.
    expect(denied.status).toBe(200);
    expect(d('agw_http_requests_total', executeRoute)).toBe(4);
    expect(d('agw_http_request_duration_seconds_count', executeRoute)).toBe(4);
    expect(d('agw_http_request_duration_seconds_bucket', { ...executeRoute, le: '+Inf' })).toBe(4);
    expect(d('agw_http_requests_total', { method: 'POST', route: '/api/v1/gateway/evaluate', status: '200' })).toBe(2);
    expect(d('agw_http_requests_total', { method: 'POST', route: '/mcp/:svc_id', status: '200' })).toBe(1);
    expect(d('agw_http_requests_total', { method: 'GET', route: 'unmatched', status: '404' })).toBe(1);

    // Decisions: once each, under the first reason (none for an allow), by channel and mode.
    expect(
      d('agw_gateway_decisions_total', { decision: 'allow', reason: 'none', channel: 'rest', mode: 'execute' }),
    ).toBe(3);
    expect(
      d('agw_gateway_decisions_total', { decision: 'allow', reason: 'none', channel: 'rest', mode: 'evaluate' }),
    ).toBe(2);
    expect(
      d('agw_gateway_decisions_total', { decision: 'allow', reason: 'none', channel: 'mcp', mode: 'execute' }),
    ).toBe(1);
    expect(
      d('agw_gateway_decisions_total', {
        decision: 'deny',
        reason: 'APPROVAL_REQUIRED',
        channel: 'rest',
        mode: 'execute',
      }),
    ).toBe(1);
    expect(
      d('agw_gateway_denial_reasons_total', { reason: 'APPROVAL_REQUIRED', channel: 'rest', mode: 'execute' }),
    ).toBe(1);
    const decisions = after
      .filter((s) => s.name === 'agw_gateway_decisions_total')
      .reduce((sum, s) => sum + s.value, 0);
    expect(
      decisions - before.filter((s) => s.name === 'agw_gateway_decisions_total').reduce((sum, s) => sum + s.value, 0),
    ).toBe(7);

    // Policy evaluations: the two shadow policies on all 7 billing calls, the approval policy on the refund only.
    expect(d('agw_policy_evaluations_total', { effect: 'deny', mode: 'shadow', result: 'not_matched' })).toBe(7);
    expect(d('agw_policy_evaluations_total', { effect: 'deny', mode: 'shadow', result: 'condition_error' })).toBe(7);
    expect(d('agw_policy_evaluations_total', { effect: 'require_approval', mode: 'enforce', result: 'matched' })).toBe(
      1,
    );
    expect(d('agw_policy_evaluations_total', { effect: 'deny', mode: 'shadow', result: 'matched' })).toBe(0);

    // Tool calls of the 4 allowed executions; a record for each execution (the denial's too).
    expect(d('agw_tool_call_duration_seconds_count', { connector: 'mock', outcome: 'success' })).toBe(4);
    expect(d('agw_record_append_duration_seconds_count')).toBe(5);
    expect(d('agw_record_append_duration_seconds_sum')).toBeGreaterThan(0);

    // The approval asked for is pending; its webhook was delivered once.
    expect(d('agw_approvals_pending')).toBe(1);
    expect(sampleValue(after, 'agw_approvals_pending')).toBe(1);
    expect(d('agw_webhook_deliveries_total', { outcome: 'delivered' })).toBe(1);
    expect(d('agw_webhook_deliveries_total', { outcome: 'retrying' })).toBe(0);

    // No id or free text in any label, and the unmatched path is not there.
    const { text } = await telemetry.scrape();
    const labelValues = [...new Set(parseExposition(text).flatMap((sample) => Object.values(sample.labels)))];
    expect(labelValues).toContain('/api/v1/orgs/:org_id/webhooks');
    const ids =
      /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|\b(int|apr|whk|whd|evt|tool|pol|key|req)_|agent-|no-such-route|inv-/i;
    expect(labelValues.filter((value) => ids.test(value))).toEqual([]);
    expect(text).not.toContain(org.orgId);
    expect(text).not.toContain(agent.svcId);
    // Process metrics come along.
    expect(sampleValue(after, 'process_cpu_seconds_total')).toBeGreaterThan(0);
    expect(after.some((s) => s.name === 'nodejs_eventloop_lag_seconds')).toBe(true);
  });

  test('a failed tool call is timed under its failure code', async () => {
    const org = await signUp(t, 'obs-toolfail');
    const agent = await readyAgent(t, org, { capabilities: ['billing:read', 'crm:update'] });
    await t.request('POST', `/api/v1/orgs/${org.orgId}/tools`, {
      token: org.adminToken,
      // Nothing listens there: the tool is unreachable.
      body: {
        action_type: 'crm',
        connector: 'http',
        config: { url: 'http://127.0.0.1:9/none', allow_private_network: true },
      },
    });
    const before = await scrape();
    const response = await execute(t, agent, {
      svc_id: agent.svcId,
      agent_id: agent.svcId,
      action: { type: 'crm', tool: 'update', params: {} },
    });
    expect(response.body.result.error.code).toBe('TOOL_UNREACHABLE');
    const after = await scrape();
    expect(
      delta(before, after, 'agw_tool_call_duration_seconds_count', { connector: 'http', outcome: 'TOOL_UNREACHABLE' }),
    ).toBe(1);
    expect(
      delta(before, after, 'agw_tool_call_duration_seconds_count', { connector: 'http', outcome: 'success' }),
    ).toBe(0);
  });

  test('/metrics is served by its own listener only, never on the public port', async () => {
    const server = createMetricsServer(telemetry);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    try {
      const org = await signUp(t, 'obs-listener');
      const agent = await readyAgent(t, org);
      const read = async () => parseExposition(await (await fetch(`${base}/metrics`)).text());
      const before = await read();
      expect((await evaluate(t, agent)).status).toBe(200);
      const response = await fetch(`${base}/metrics`);
      expect(response.status).toBe(200);
      expect(response.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
      const after = parseExposition(await response.text());
      expect(
        delta(before, after, 'agw_http_requests_total', {
          method: 'POST',
          route: '/api/v1/gateway/evaluate',
          status: '200',
        }),
      ).toBe(1);
      expect(
        delta(before, after, 'agw_gateway_decisions_total', {
          decision: 'allow',
          reason: 'none',
          channel: 'rest',
          mode: 'evaluate',
        }),
      ).toBe(1);
      expect((await fetch(`${base}/`)).status).toBe(404);
      expect((await fetch(`${base}/metrics/x`)).status).toBe(404);
      expect((await fetch(`${base}/metrics`, { method: 'POST' })).status).toBe(405);
    } finally {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    }
    const publicMetrics = await t.request('GET', '/metrics');
    expect(publicMetrics.status).toBe(404);
    expect(publicMetrics.text).not.toContain('agw_');
  });

  test('METRICS_PORT=0: nothing counted, and without an exporter no span and no traceparent', async () => {
    const quiet = await startTestApp({ ...LOOPBACK_UPSTREAMS, METRICS_PORT: '0' });
    try {
      expect(quiet.app.telemetry.metricsEnabled).toBe(false);
      expect(quiet.app.telemetry.tracing).toBe(false);
      const org = await signUp(quiet, 'obs-off');
      const agent = await readyAgent(quiet, org, { capabilities: ['billing:read', 'shipping:create'] });
      await quiet.request('POST', `/api/v1/orgs/${org.orgId}/tools`, {
        token: org.adminToken,
        body: {
          action_type: 'shipping',
          connector: 'http',
          config: { url: `${receiverBase}/untraced`, allow_private_network: true },
        },
      });
      const response = await quiet.request('POST', '/api/v1/gateway/execute', {
        apiKey: agent.key,
        body: shipment(agent),
      });
      expect(response.body.result.success).toBe(true);
      const untraced = hits.filter((h) => h.path === '/untraced');
      expect(untraced).toHaveLength(1);
      expect(untraced[0].headers.traceparent).toBeUndefined();
      const { text } = await quiet.app.telemetry.scrape();
      expect(text).not.toMatch(/^agw_/m);
    } finally {
      await quiet.close();
    }
  });
});

describe('traces', () => {
  beforeEach(() => exporter.reset());

  test('an execute: request span → decision span → tool call and record append, with attributes', async () => {
    const org = await signUp(t, 'obs-trace');
    const agent = await readyAgent(t, org);
    exporter.reset();
    const response = await execute(t, agent);
    expect(response.status).toBe(200);

    const request = requestSpan(response.headers.get('x-request-id')!);
    expect(request.name).toBe('POST /api/v1/gateway/execute');
    expect(request.kind).toBe(SpanKind.SERVER);
    expect(request.parentSpanContext).toBeUndefined();
    expect(request.attributes).toMatchObject({
      'http.request.method': 'POST',
      'http.route': '/api/v1/gateway/execute',
      'http.response.status_code': 200,
    });
    const decision = only(
      childrenOf(request).filter((s) => s.name === 'gateway execute'),
      'decision span',
    );
    expect(decision.attributes).toMatchObject({
      'agw.mode': 'execute',
      'agw.channel': 'rest',
      'agw.decision': 'allow',
      'agw.executed': true,
      'agw.interaction_id': response.body.interaction_id,
      'agw.svc_id': agent.svcId,
      'agw.capability': 'billing:read',
    });
    const children = childrenOf(decision);
    const tool = only(
      children.filter((s) => s.name === 'execute_tool billing:read'),
      'tool call span',
    );
    expect(tool.attributes).toMatchObject({
      'gen_ai.operation.name': 'execute_tool',
      'gen_ai.tool.name': 'billing:read',
      'agw.connector': 'mock',
    });
    const record = only(
      children.filter((s) => s.name === 'record append'),
      'record append span',
    );
    expect(record.attributes).toMatchObject({
      'agw.interaction_id': response.body.interaction_id,
      'agw.decision': 'allow',
    });
    for (const span of [decision, tool, record]) expect(span.spanContext().traceId).toBe(request.spanContext().traceId);
  });

  test.each([LATEST_PROTOCOL_VERSION, '2026-07-28'])(
    'an MCP tools/call (%s): the server span `tools/call billing__read` with MCP attributes, the decision its child',
    async (revision) => {
      const org = await signUp(t, 'obs-mcp');
      const agent = await readyAgent(t, org);
      exporter.reset();
      const response = await mcpCall(agent, 'billing__read', { invoice: 'inv-3' }, {}, revision);
      expect(response.body.result.isError).toBe(false);
      const request = requestSpan(response.headers.get('x-request-id')!);
      expect(request.name).toBe('POST /mcp/:svc_id');
      const call = only(
        childrenOf(request).filter((s) => s.name === 'tools/call billing__read'),
        'MCP server span',
      );
      expect(call.kind).toBe(SpanKind.SERVER);
      expect(call.attributes).toMatchObject({
        'mcp.method.name': 'tools/call',
        'gen_ai.tool.name': 'billing__read',
        'gen_ai.operation.name': 'execute_tool',
        'mcp.protocol.version': revision,
        'jsonrpc.request.id': '7',
      });
      const decision = only(
        childrenOf(call).filter((s) => s.name === 'gateway execute'),
        'decision span',
      );
      expect(decision.attributes['agw.channel']).toBe('mcp');
    },
  );

  test('an http tool receives the traceparent of its tool call span, in the request’s trace', async () => {
    const org = await signUp(t, 'obs-http');
    const agent = await readyAgent(t, org, { capabilities: ['billing:read', 'shipping:create'] });
    await httpTool(org, 'shipping', '/ship');
    exporter.reset();
    const response = await execute(t, agent, shipment(agent));
    expect(response.body.result).toMatchObject({ success: true, data: { shipped: true } });

    const request = requestSpan(response.headers.get('x-request-id')!);
    const decision = only(
      childrenOf(request).filter((s) => s.name === 'gateway execute'),
      'decision span',
    );
    const tool = only(
      childrenOf(decision).filter((s) => s.name === 'execute_tool shipping:create'),
      'tool call span',
    );
    expect(tool.kind).toBe(SpanKind.CLIENT);
    const hit = hits.filter((h) => h.path === '/ship').at(-1)!;
    const [, traceId, parentId] = traceparentPattern.exec(String(hit.headers.traceparent)) ?? [];
    expect(traceId).toBe(request.spanContext().traceId);
    expect(parentId).toBe(tool.spanContext().spanId);
  });

  test.each([
    // The server/discover probe (refused), initialize, notifications/initialized, tools/call.
    [
      '/mcp-upstream',
      LATEST_PROTOCOL_VERSION,
      ['server/discover', 'initialize', 'notifications/initialized', 'tools/call'],
    ],
    ['/mcp-upstream-2026', '2026-07-28', ['server/discover', 'tools/call']],
  ])(
    'an mcp tool (%s, %s): the client span `tools/call {upstream tool}` with MCP attributes, its traceparent on every upstream request',
    async (path, revision, methods) => {
      const org = await signUp(t, 'obs-upstream');
      const agent = await readyAgent(t, org, { capabilities: ['billing:read', 'crm:find'] });
      const created = await t.request('POST', `/api/v1/orgs/${org.orgId}/tools`, {
        token: org.adminToken,
        body: {
          action_type: 'crm',
          connector: 'mcp',
          config: { url: `${receiverBase}${path}`, tool: 'lookup', allow_private_network: true },
        },
      });
      expect(created.status).toBe(201);
      exporter.reset();
      const before = hits.length;
      const response = await execute(t, agent, {
        svc_id: agent.svcId,
        agent_id: agent.svcId,
        action: { type: 'crm', tool: 'find', params: {} },
      });
      expect(response.body.result).toMatchObject({ success: true });

      const request = requestSpan(response.headers.get('x-request-id')!);
      const decision = only(
        childrenOf(request).filter((s) => s.name === 'gateway execute'),
        'decision span',
      );
      const tool = only(
        childrenOf(decision).filter((s) => s.name === 'tools/call lookup'),
        'MCP client span',
      );
      expect(tool.kind).toBe(SpanKind.CLIENT);
      expect(tool.attributes).toMatchObject({
        'mcp.method.name': 'tools/call',
        'gen_ai.tool.name': 'lookup',
        'gen_ai.operation.name': 'execute_tool',
        'mcp.protocol.version': revision,
        'agw.connector': 'mcp',
      });
      // Each request of the exchange carries the tool call span's context.
      const upstream = hits.slice(before).filter((h) => h.path === path && h.method === 'POST');
      expect(upstream.map((h) => JSON.parse(h.body).method)).toEqual(methods);
      for (const hit of upstream) {
        const [, traceId, parentId] = traceparentPattern.exec(String(hit.headers.traceparent)) ?? [];
        expect(traceId).toBe(request.spanContext().traceId);
        expect(parentId).toBe(tool.spanContext().spanId);
      }
    },
  );

  test('an incoming traceparent is continued: the request span is its child, and the trace goes on to the tool', async () => {
    const org = await signUp(t, 'obs-incoming');
    const agent = await readyAgent(t, org, { capabilities: ['billing:read', 'shipping:create'] });
    await httpTool(org, 'shipping', '/ship-continued');
    exporter.reset();
    const callerTrace = '4bf92f3577b34da6a3ce929d0e0e4736';
    const callerSpan = '00f067aa0ba902b7';
    const response = await t.request('POST', '/api/v1/gateway/execute', {
      apiKey: agent.key,
      body: shipment(agent),
      headers: { traceparent: `00-${callerTrace}-${callerSpan}-01` },
    });
    expect(response.status).toBe(200);
    const request = requestSpan(response.headers.get('x-request-id')!);
    expect(request.spanContext().traceId).toBe(callerTrace);
    expect(request.parentSpanContext?.spanId).toBe(callerSpan);
    expect(request.parentSpanContext?.isRemote).toBe(true);
    const hit = hits.filter((h) => h.path === '/ship-continued').at(-1)!;
    expect(traceparentPattern.exec(String(hit.headers.traceparent))?.[1]).toBe(callerTrace);
  });

  test('a webhook delivery carries the traceparent of its own span, a trace of its own', async () => {
    const org = await signUp(t, 'obs-webhook');
    const agent = await readyAgent(t, org);
    await createPolicy(org, {
      name: 'refunds need a human',
      effect: 'require_approval',
      target: { capabilities: ['billing:refund'] },
    });
    await t.request('POST', `/api/v1/orgs/${org.orgId}/webhooks`, {
      token: org.adminToken,
      body: { url: `${receiverBase}/hook-traced`, events: ['approval.requested'], allow_private_network: true },
    });
    exporter.reset();
    const denied = await execute(t, agent, actionBody(agent, 'refund'));
    expect(denied.body.decision).toBe('deny');
    const hit = await eventually(
      async () => hits.find((h) => h.path === '/hook-traced'),
      (found) => found !== undefined,
      'the webhook delivery',
    );
    const delivery = await eventually(
      async () => spans().find((s) => s.name === 'webhook approval.requested'),
      (found) => found !== undefined,
      'the delivery span',
    );
    expect(delivery!.kind).toBe(SpanKind.CLIENT);
    expect(delivery!.parentSpanContext).toBeUndefined();
    expect(delivery!.attributes).toMatchObject({
      'agw.webhook.event': 'approval.requested',
      'http.response.status_code': 200,
    });
    const [, traceId, parentId] = traceparentPattern.exec(String(hit!.headers.traceparent)) ?? [];
    expect(traceId).toBe(delivery!.spanContext().traceId);
    expect(parentId).toBe(delivery!.spanContext().spanId);
  });

  test('OTEL_TRACES_SAMPLER: a ratio of 0 records no new trace, yet a sampled caller’s trace is kept by parentbased_', async () => {
    const sampledExporter = new InMemorySpanExporter();
    const sampledTelemetry = createTelemetry({
      spanExporter: sampledExporter,
      spanProcessor: 'simple',
      sampler: parseEnv({ OTEL_TRACES_SAMPLER: 'parentbased_traceidratio', OTEL_TRACES_SAMPLER_ARG: '0' })
        .tracesSampler,
    });
    const sampled = await startTestApp(LOOPBACK_UPSTREAMS, { telemetry: sampledTelemetry });
    try {
      const org = await signUp(sampled, 'obs-sampler');
      const agent = await readyAgent(sampled, org, { capabilities: ['billing:read'] });
      sampledExporter.reset();
      const unsampled = await evaluate(sampled, agent, actionBody(agent));
      expect(unsampled.body.decision).toBe('allow');
      expect(sampledExporter.getFinishedSpans()).toEqual([]);
      const callerTrace = '0af7651916cd43dd8448eb211c80319c';
      const continued = await sampled.request('POST', '/api/v1/gateway/evaluate', {
        apiKey: agent.key,
        body: actionBody(agent),
        headers: { traceparent: `00-${callerTrace}-b7ad6b7169203331-01` },
      });
      expect(continued.body.decision).toBe('allow');
      const kept = sampledExporter.getFinishedSpans();
      expect(kept.map((span) => span.name)).toEqual(expect.arrayContaining(['gateway evaluate']));
      expect(new Set(kept.map((span) => span.spanContext().traceId))).toEqual(new Set([callerTrace]));
    } finally {
      await sampled.close();
      await sampledTelemetry.shutdown();
    }
  });
});

test('OTEL_TRACES_SAMPLER and its argument are checked at start', () => {
  expect(parseEnv({}).tracesSampler).toEqual({ name: 'parentbased_always_on', ratio: 1 });
  expect(parseEnv({ OTEL_TRACES_SAMPLER: 'TraceIdRatio', OTEL_TRACES_SAMPLER_ARG: '0.25' }).tracesSampler).toEqual({
    name: 'traceidratio',
    ratio: 0.25,
  });
  expect(() => parseEnv({ OTEL_TRACES_SAMPLER: 'sometimes' })).toThrow(/OTEL_TRACES_SAMPLER must be one of always_on/);
  expect(() => parseEnv({ OTEL_TRACES_SAMPLER: 'traceidratio', OTEL_TRACES_SAMPLER_ARG: '1.5' })).toThrow(
    /from 0 to 1/,
  );
  expect(() => parseEnv({ OTEL_TRACES_SAMPLER: 'traceidratio', OTEL_TRACES_SAMPLER_ARG: 'half' })).toThrow(
    /from 0 to 1/,
  );
});

describe('the service process', () => {
  test('serves /metrics on METRICS_HOST:METRICS_PORT, not on the public port, and closes it on SIGTERM', async () => {
    const dataDir = await migratedDataDir('agw-metrics-');
    try {
      const metricsPort = await freePort();
      const service = startService(await freePort(), {
        dataDir,
        env: { METRICS_PORT: String(metricsPort), METRICS_HOST: '127.0.0.1' },
      });
      await waitReady(service);
      const metrics = await fetch(`http://127.0.0.1:${metricsPort}/metrics`);
      expect(metrics.status).toBe(200);
      const samples = parseExposition(await metrics.text());
      // The readiness polls were counted.
      expect(
        sampleValue(samples, 'agw_http_requests_total', { method: 'GET', route: '/readyz', status: '200' }),
      ).toBeGreaterThanOrEqual(1);
      expect((await service.request('GET', '/metrics')).status).toBe(404);
      service.child.kill('SIGTERM');
      expect((await waitExit(service)).code).toBe(0);
      await expect(fetch(`http://127.0.0.1:${metricsPort}/metrics`)).rejects.toThrow();
    } finally {
      await rm(dataDir, { recursive: true, force: true });
    }
  });
});
