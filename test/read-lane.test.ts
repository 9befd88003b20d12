/**
 * The operators' reads (every GET route SOFA serves) are answered by Node's server before yoga
 * (src/http/direct-lane.ts, decision 0078). Every such route, with the callers and the query
 * strings clients send (right, wrong, repeated, nested, empty), gets the same answer, words and
 * headers from a server of the app's handler as from one of yoga alone; the lane's reads are
 * logged and traced as yoga's are, and the requests it must not take are yoga's.
 */
import { InMemorySpanExporter } from '@opentelemetry/sdk-trace';
import pino from 'pino';
import { publicPath } from '../src/api/rest-routes.js';
import { restRoutes } from '../src/http/schema.js';
import { createTelemetry, type Telemetry } from '../src/observability/telemetry.js';
import { startTestApp, type TestApp } from './support/app.js';
import { comparableHeaders, exchange, laneServers, type Answer } from './support/lane-servers.js';
import { signUp, type OrgFixture } from './support/fixtures.js';
import { actionBody, readyAgent, type AgentFixture } from './support/gateway.js';

const exporter = new InMemorySpanExporter();
const logLines: Record<string, unknown>[] = [];
let telemetry: Telemetry;
let t: TestApp;
let org: OrgFixture;
let other: OrgFixture;
let agent: AgentFixture;
let laneUrl: string;
let yogaUrl: string;
/** Path parameters' values: the fixture's own where it has one. */
const values: Record<string, string> = {};
const servers = laneServers();
const ORIGIN = 'https://console.example';

beforeAll(async () => {
  telemetry = createTelemetry({ spanExporter: exporter, spanProcessor: 'simple' });
  const logger = pino({ level: 'info' }, { write: (line: string) => logLines.push(JSON.parse(line)) });
  t = await startTestApp({ CORS_ALLOWED_ORIGINS: ORIGIN }, { telemetry, logger });
  org = await signUp(t, 'reads');
  other = await signUp(t, 'others');
  agent = await readyAgent(t, org);
  for (const action of ['read', 'read', 'delete'])
    await t.request('POST', '/api/v1/gateway/execute', { apiKey: agent.key, body: actionBody(agent, action) });
  const records = await t.request('GET', '/api/v1/records?limit=5', { token: org.adminToken });
  const tools = await t.request('GET', `/api/v1/orgs/${org.orgId}/tools`, { token: org.adminToken });
  const agents = await t.request('GET', '/api/v1/agents', { token: org.adminToken });
  Object.assign(values, {
    org_id: org.orgId,
    svc_id: agent.svcId,
    manifest_id: agent.manifestId,
    record_id: records.body.items[0].record_id,
    tool_id: tools.body.items[0].tool_id,
    agent_id: agents.body.items[0].agent_id,
  });
  laneUrl = await servers.listen(t.app.handler);
  yogaUrl = await servers.listen(t.app.yoga);
});

afterAll(async () => {
  servers.close();
  await t.close();
  await telemetry.shutdown();
});

const get = (base: string, path: string, headers: Record<string, string> = {}) =>
  exchange(`${base}${path}`, 'GET', { headers });

const comparable = (answer: Answer) => ({
  status: answer.status,
  headers: comparableHeaders(answer),
  body: answer.text,
});

const getRoutes = [...restRoutes.values()].filter((route) => route.method === 'GET').map(publicPath);

/** The route's path with the fixture's values, `nope` where it has none. */
const filled = (path: string) => path.replace(/:([A-Za-z0-9_]+)/g, (_, name: string) => values[name] ?? 'nope');

/** Reads the lane answered (counted by wrapping the app's `reads.answer`, which the lane calls). */
let laneAnswers = 0;

async function expectSame(path: string, headers: Record<string, string>) {
  const lane = await get(laneUrl, path, headers);
  const yoga = await get(yogaUrl, path, headers);
  expect({ path, ...comparable(lane) }).toEqual({ path, ...comparable(yoga) });
  return lane;
}

beforeAll(() => {
  const answer = t.app.reads.answer;
  t.app.reads.answer = (...args) => {
    laneAnswers++;
    return answer(...args);
  };
});

test('the schema has the reads this test covers, and the lane takes each of them', () => {
  expect(getRoutes.length).toBeGreaterThan(30);
  expect(getRoutes).toEqual(expect.arrayContaining(['/api/v1/orgs/:org_id', '/api/v1/records', '/api/v1/agents']));
  for (const route of getRoutes) {
    const url = new URL(filled(route), 'http://lane');
    expect([route, t.app.reads.find('GET', url)?.label]).toEqual([route, `GET ${route}`]);
    expect([route, t.app.reads.find('POST', url)]).toEqual([route, undefined]);
  }
  // Not a read SOFA serves: a streamed route, the gateway's, no route at all.
  for (const path of ['/api/v1/records/export', '/api/v1/gateway/evaluate', '/api/v1/nothing', '/healthz'])
    expect([path, t.app.reads.find('GET', new URL(path, 'http://lane'))]).toEqual([path, undefined]);
});

test('every GET route, as the admin, an agent’s key, another org’s admin and nobody: the same answer both ways', async () => {
  const statuses = new Set<number>();
  for (const route of getRoutes) {
    const path = filled(route);
    for (const headers of <Record<string, string>[]>[
      { authorization: `Bearer ${org.adminToken}` },
      { 'x-api-key': agent.key },
      { authorization: `Bearer ${other.adminToken}` },
      {},
      { authorization: 'Bearer not-a-token' },
    ]) {
      statuses.add((await expectSame(path, headers)).status);
    }
  }
  // Answers of every kind were compared: found, refused, missing, unauthenticated; the lane gave them.
  expect([...statuses]).toEqual(expect.arrayContaining([200, 401, 403, 404]));
  expect(laneAnswers).toBe(getRoutes.length * 5);
});

test.each([
  ['/api/v1/records?limit=2'],
  ['/api/v1/records?limit=abc'],
  ['/api/v1/records?limit=1&limit=2'],
  ['/api/v1/records?limit='],
  ['/api/v1/records?limit[x]=1'],
  ['/api/v1/records?limit%5Bx%5D=1'],
  ['/api/v1/records?unknown=1&limit=1'],
  ['/api/v1/records?from=2026-01-01T00:00:00Z&to=2099-01-01T00:00:00Z'],
  ['/api/v1/records?from=yesterday'],
  ['/api/v1/records?cursor=not-a-cursor'],
  ['/api/v1/records?capability=billing:read&decision=allow'],
  ['/api/v1/records?executed=true'],
  ['/api/v1/records?executed=yes'],
  ['/api/v1/records?x=%00'],
  ['/api/v1/agents?limit=1'],
  ['/api/v1/orgs/ORG/audit-logs?limit=2'],
  ['/api/v1/orgs/ORG/audit-logs?action=org.created'],
  ['/api/v1/orgs/ORG/manifests?status=active'],
  ['/api/v1/orgs/ORG/manifests?status=nonsense'],
  ['/api/v1/orgs/%4f%52%47'],
  ['/api/v1/orgs/ORG/../ORG'],
  ['/api/v1/orgs/ORG/'],
])('%s: the same answer both ways', async (path) => {
  const answer = await expectSame(path.replace(/ORG/g, org.orgId), { authorization: `Bearer ${org.adminToken}` });
  expect(answer.status).toBeLessThan(500);
});

test("the lane's reads are logged and traced with their route, and counted against the operator limit", async () => {
  exporter.reset();
  const requestId = `read-${Date.now()}`;
  const traceId = '4bf92f3577b34da6a3ce929d0e0e4736';
  const headers = {
    authorization: `Bearer ${org.adminToken}`,
    'x-request-id': requestId,
    traceparent: `00-${traceId}-00f067aa0ba902b7-01`,
  };
  const first = await get(laneUrl, `/api/v1/orgs/${org.orgId}`, headers);
  const second = await get(laneUrl, `/api/v1/orgs/${org.orgId}`, headers);
  expect([first.status, second.status]).toEqual([200, 200]);
  expect(JSON.parse(first.text)).toMatchObject({ org_id: org.orgId, admin_user: { role: 'admin' } });
  expect(Number(first.headers['x-ratelimit-remaining'])).toBe(Number(second.headers['x-ratelimit-remaining']) + 1);
  const line = logLines.find((entry) => entry.request_id === requestId && entry.msg === 'request');
  expect(line).toMatchObject({ method: 'GET', route: 'GET /api/v1/orgs/:org_id', status: 200, org_id: org.orgId });
  const span = exporter.getFinishedSpans().find((s) => s.attributes['agw.request_id'] === requestId);
  expect(span?.name).toBe('GET /api/v1/orgs/:org_id');
  expect(span?.spanContext().traceId).toBe(traceId);
});

test('reads the lane must not take are yoga’s: a browser’s under CORS, a stream, a path that is no route', async () => {
  const auth = { authorization: `Bearer ${org.adminToken}` };
  const browser = await get(laneUrl, `/api/v1/orgs/${org.orgId}`, { ...auth, origin: ORIGIN });
  expect(browser.status).toBe(200);
  expect(browser.headers['access-control-allow-origin']).toBe(ORIGIN);
  const stream = await get(laneUrl, '/api/v1/records/export', auth);
  expect(stream.status).toBe(200);
  expect(stream.headers['content-type']).toMatch(/ndjson|jsonl|x-ndjson/);
  const before = laneAnswers;
  const unknown = await expectSame('/api/v1/nothing-here', auth);
  expect(unknown.status).toBe(404);
  const wrongMethod = await expectSame('/api/v1/gateway/evaluate', { 'x-api-key': agent.key });
  expect(wrongMethod.status).toBe(405);
  expect(laneAnswers).toBe(before);
});
