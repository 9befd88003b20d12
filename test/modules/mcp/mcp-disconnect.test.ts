/**
 * A client that hangs up in the middle of a call gives its org's turn back: the org's later
 * requests still run. Each channel is tried with the org allowed two requests at once, against a
 * tool that answers slowly; each call is cut off once its tool has received it, so it is cut off
 * while its tool runs however slow the machine. The calls cut off still end with their record.
 */
import { EventEmitter } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { LOOPBACK_UPSTREAMS, startTestApp, type TestApp } from '../../support/app.js';
import { signUp, type OrgFixture } from '../../support/fixtures.js';
import { actionBody, readyAgent, type AgentFixture } from '../../support/gateway.js';

const TOOL_DELAY_MS = 400;
let t: TestApp;
let server: http.Server;
let tool: http.Server;
let base: string;
let org: OrgFixture;
let agent: AgentFixture;
/** Emits `call` with the `id` argument of each call the tool receives. */
const toolCalls = new EventEmitter();

beforeAll(async () => {
  t = await startTestApp({ ...LOOPBACK_UPSTREAMS, ORG_MAX_CONCURRENCY: '2' });
  server = http.createServer(t.app.yoga);
  tool = http.createServer(async (req, res) => {
    let body = '';
    for await (const chunk of req) body += chunk;
    toolCalls.emit('call', JSON.parse(body).action.params.id);
    setTimeout(() => res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}'), TOOL_DELAY_MS);
  });
  await Promise.all([server, tool].map((s) => new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve))));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  org = await signUp(t, 'hang-up');
  agent = await readyAgent(t, org, { tool: false });
  const created = await t.request('POST', `/api/v1/orgs/${org.orgId}/tools`, {
    token: org.adminToken,
    body: {
      action_type: 'billing',
      connector: 'http',
      config: { url: `http://127.0.0.1:${(tool.address() as AddressInfo).port}/`, allow_private_network: true },
    },
  });
  expect(created.status).toBe(201);
});

afterAll(async () => {
  server.closeAllConnections();
  tool.closeAllConnections();
  await Promise.all([server, tool].map((s) => new Promise((resolve) => s.close(resolve))));
  await t?.close();
});

const toolCall = (id: number) => ({
  jsonrpc: '2.0',
  id,
  method: 'tools/call',
  params: { name: 'billing__read', arguments: { id } },
});

const MODERN_META = {
  'io.modelcontextprotocol/protocolVersion': '2026-07-28',
  'io.modelcontextprotocol/clientInfo': { name: 'raw', version: '1' },
  'io.modelcontextprotocol/clientCapabilities': {},
};

/** One request of each channel, as its clients send it. */
const channels: Record<string, (id: number) => { path: string; headers: Record<string, string>; body: unknown }> = {
  'REST execute': (id) => ({ path: '/api/v1/gateway/execute', headers: {}, body: actionBody(agent, 'read', { id }) }),
  'MCP 2025-11-25': (id) => ({
    path: `/mcp/${agent.svcId}`,
    headers: { 'mcp-protocol-version': '2025-11-25', accept: 'application/json, text/event-stream' },
    body: toolCall(id),
  }),
  'MCP 2026-07-28': (id) => ({
    path: `/mcp/${agent.svcId}`,
    headers: {
      'mcp-protocol-version': '2026-07-28',
      'mcp-method': 'tools/call',
      'mcp-name': 'billing__read',
      accept: 'application/json, text/event-stream',
    },
    body: { ...toolCall(id), params: { ...toolCall(id).params, _meta: MODERN_META } },
  }),
};

function send(channel: string, id: number, signal?: AbortSignal) {
  const { path, headers, body } = channels[channel](id);
  return fetch(`${base}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': agent.key, ...headers },
    body: JSON.stringify(body),
    signal,
  });
}

/** The response, or 'no answer' when none came within `ms`. */
async function within(ms: number, response: Promise<Response>): Promise<number | 'no answer'> {
  const timeout = new Promise<'no answer'>((resolve) => setTimeout(() => resolve('no answer'), ms).unref());
  return Promise.race([response.then(async (r) => (await r.text(), r.status)), timeout]);
}

/** Polls until the org has `count` records, or 10 s passed; the count then. */
async function untilRecords(count: number): Promise<number> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const now = await recordCount();
    if (now >= count || Date.now() > deadline) return now;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

const recordCount = async () =>
  Number(
    (
      await t.database.db.sql.query<{ n: string }>(
        'SELECT count(*)::text AS n FROM interaction_records WHERE org_id = $1',
        [org.orgId],
      )
    )[0].n,
  );

test.each(Object.keys(channels))(
  '%s: calls cut off while the tool runs leave the org its turns, and are recorded',
  async (channel) => {
    const before = await recordCount();
    const first = await send(channel, 1);
    expect(first.status).toBe(200);
    await first.text();
    // Four calls, twice the org's concurrency, each cut off once its tool has it: two at first, two
    // once those two's tools answered.
    const hangUps = new Map(Array.from({ length: 4 }, (_, i) => [10 + i, new AbortController()]));
    const hangUp = (id: number) => hangUps.get(id)?.abort();
    toolCalls.on('call', hangUp);
    const cut = await Promise.allSettled([...hangUps].map(([id, controller]) => send(channel, id, controller.signal)));
    toolCalls.off('call', hangUp);
    expect(cut.map((outcome) => outcome.status)).toEqual(Array(4).fill('rejected'));
    // Were a turn kept by a call that nobody answers, these would wait for ever.
    const after = await Promise.all(Array.from({ length: 3 }, (_, i) => within(10_000, send(channel, 20 + i))));
    expect(after).toEqual([200, 200, 200]);
    // The calls cut off ran their tool all the same: each has its record.
    expect(await untilRecords(before + 8)).toBe(before + 8);
  },
);
