/**
 * The gateway's routes are answered by Node's server before yoga (src/http/direct-lane.ts). The
 * same requests sent to a server of the app's handler and to one of yoga alone get the same
 * answers, errors, words and headers; the lane's requests are logged, counted and traced as
 * yoga's are, and requests it must not take (a query string, a browser's when CORS is configured,
 * another method) are yoga's.
 */
import net from 'node:net';
import { InMemorySpanExporter } from '@opentelemetry/sdk-trace';
import pino from 'pino';
import { createTelemetry, type Telemetry } from '../src/observability/telemetry.js';
import { startTestApp, type TestApp } from './support/app.js';
import { comparableHeaders, exchange, laneServers, type Answer } from './support/lane-servers.js';
import { createKey, signUp, type OrgFixture } from './support/fixtures.js';
import { actionBody, readyAgent, type AgentFixture } from './support/gateway.js';

const exporter = new InMemorySpanExporter();
const logLines: Record<string, unknown>[] = [];
let telemetry: Telemetry;
let t: TestApp;
let org: OrgFixture;
let agent: AgentFixture;
let laneUrl: string;
let yogaUrl: string;
const servers = laneServers();
const MAX_BODY = 4096;
const ORIGIN = 'https://console.example';

beforeAll(async () => {
  telemetry = createTelemetry({ spanExporter: exporter, spanProcessor: 'simple' });
  const logger = pino({ level: 'info' }, { write: (line: string) => logLines.push(JSON.parse(line)) });
  t = await startTestApp({ MAX_BODY_BYTES: String(MAX_BODY), CORS_ALLOWED_ORIGINS: ORIGIN }, { telemetry, logger });
  org = await signUp(t, 'lane');
  agent = await readyAgent(t, org);
  laneUrl = await servers.listen(t.app.handler);
  yogaUrl = await servers.listen(t.app.yoga);
});

afterAll(async () => {
  servers.close();
  await t.close();
  await telemetry.shutdown();
});

interface Sent {
  path?: string;
  headers?: Record<string, string>;
  body?: string | Buffer;
  /** Sent without Content-Length, in chunks. */
  chunked?: boolean;
}

const send = (base: string, { path = '/api/v1/gateway/evaluate', ...sent }: Sent) =>
  exchange(`${base}${path}`, 'POST', sent);

/** What must be equal: the headers (lane-servers.ts), the body but its ids and times; the count left is compared on its own. */
const comparable = (answer: Answer) => ({
  status: answer.status,
  headers: comparableHeaders(answer),
  body: answer.text.replace(/"(int|apr|rec)_[A-Za-z0-9_-]+"/g, '"$1_…"').replace(/"\d{4}-\d\d-\d\dT[^"]+"/g, '"time"'),
});

const json = { 'content-type': 'application/json' };

test.each<[string, () => Sent]>([
  [
    'an allowed evaluate',
    () => ({ headers: { ...json, 'x-api-key': agent.key }, body: JSON.stringify(actionBody(agent)) }),
  ],
  [
    'an allowed execute, with its budget headers',
    () => ({
      path: '/api/v1/gateway/execute',
      headers: { ...json, 'x-api-key': agent.key },
      body: JSON.stringify(actionBody(agent)),
    }),
  ],
  [
    'a denied capability',
    () => ({ headers: { ...json, 'x-api-key': agent.key }, body: JSON.stringify(actionBody(agent, 'delete')) }),
  ],
  ['a body that is not JSON', () => ({ headers: { ...json, 'x-api-key': agent.key }, body: '{"svc_id": ' })],
  ['a body of the wrong types', () => ({ headers: { 'x-api-key': agent.key }, body: '{"svc_id": 3, "action": []}' })],
  ['a JSON array', () => ({ headers: { 'x-api-key': agent.key }, body: '[1]' })],
  ['an empty body', () => ({ headers: { 'x-api-key': agent.key } })],
  [
    'text the database cannot store',
    () => ({
      headers: { 'x-api-key': agent.key },
      body: JSON.stringify(actionBody(agent, 'read', { note: 'a\u0000b' })),
    }),
  ],
  [
    'a byte-order mark before the JSON',
    () => ({ headers: { 'x-api-key': agent.key }, body: `\uFEFF${JSON.stringify(actionBody(agent))}` }),
  ],
  ['no credentials', () => ({ headers: json, body: JSON.stringify(actionBody(agent)) })],
  ['an unknown API key', () => ({ headers: { 'x-api-key': 'agw_nope' }, body: '{}' })],
  ['a key and a bearer token', () => ({ headers: { 'x-api-key': agent.key, authorization: 'Bearer x' }, body: '{}' })],
  [
    'a declared body over the limit',
    () => ({ headers: { 'x-api-key': agent.key }, body: JSON.stringify({ pad: 'x'.repeat(MAX_BODY) }) }),
  ],
  [
    'a chunked body over the limit',
    () => ({ headers: { 'x-api-key': agent.key }, body: JSON.stringify({ pad: 'x'.repeat(MAX_BODY) }), chunked: true }),
  ],
  [
    'a chunked body within the limit',
    () => ({ headers: { 'x-api-key': agent.key }, body: JSON.stringify(actionBody(agent)), chunked: true }),
  ],
  [
    'a request id of the caller',
    () => ({
      headers: { 'x-api-key': agent.key, 'x-request-id': 'caller-id-1' },
      body: JSON.stringify(actionBody(agent)),
    }),
  ],
])('%s: the same answer before yoga as through it', async (_name, make) => {
  const request = make();
  const [lane, yoga] = [await send(laneUrl, request), await send(yogaUrl, request)];
  expect(comparable(lane)).toEqual(comparable(yoga));
  const remaining = [lane, yoga].map((answer) => answer.headers['x-ratelimit-remaining']);
  if (remaining[0] !== undefined) expect(Number(remaining[0])).toBe(Number(remaining[1]) + 1);
  else expect(remaining[1]).toBeUndefined();
  if (request.headers?.['x-request-id']) expect(lane.headers['x-request-id']).toBe(request.headers['x-request-id']);
});

test('a key without the scope is refused (403) the same way', async () => {
  const { key } = await createKey(t, org, ['gateway:evaluate']);
  const request = {
    path: '/api/v1/gateway/execute',
    headers: { 'x-api-key': key },
    body: JSON.stringify(actionBody(agent)),
  };
  const lane = await send(laneUrl, request);
  expect(lane.status).toBe(403);
  expect(comparable(lane)).toEqual(comparable(await send(yogaUrl, request)));
});

test('an execute through the lane is counted and recorded as one through yoga', async () => {
  const before = await t.request('GET', '/api/v1/records?limit=1000', { token: org.adminToken });
  const request = {
    path: '/api/v1/gateway/execute',
    headers: { 'x-api-key': agent.key },
    body: JSON.stringify(actionBody(agent, 'read', { invoice: 'lane-record' })),
  };
  const lane = await send(laneUrl, request);
  expect(lane.status).toBe(200);
  expect(Number(lane.headers['x-ratelimit-remaining'])).toBeGreaterThanOrEqual(0);
  expect(JSON.parse(lane.text)).toMatchObject({ decision: 'allow', executed: true });
  const after = await t.request('GET', '/api/v1/records?limit=1000', { token: org.adminToken });
  expect(after.body.items.length).toBe(before.body.items.length + 1);
  expect(after.body.items[0]).toMatchObject({ channel: 'rest', executed: true, capability: 'billing:read' });
});

test("the lane's requests are logged, counted and traced with their route", async () => {
  exporter.reset();
  const requestId = `lane-${Date.now()}`;
  const traceId = '4bf92f3577b34da6a3ce929d0e0e4736';
  const answer = await send(laneUrl, {
    headers: {
      'x-api-key': agent.key,
      'x-request-id': requestId,
      traceparent: `00-${traceId}-00f067aa0ba902b7-01`,
    },
    body: JSON.stringify(actionBody(agent)),
  });
  expect(answer.status).toBe(200);
  const line = logLines.find((entry) => entry.request_id === requestId && entry.msg === 'request');
  expect(line).toMatchObject({
    method: 'POST',
    route: 'POST /api/v1/gateway/evaluate',
    status: 200,
    org_id: org.orgId,
  });
  const span = exporter.getFinishedSpans().find((s) => s.attributes['agw.request_id'] === requestId);
  expect(span?.name).toBe('POST /api/v1/gateway/evaluate');
  expect(span?.spanContext().traceId).toBe(traceId);
  expect(span?.attributes['http.route']).toBe('/api/v1/gateway/evaluate');
  const { text } = await telemetry.scrape();
  expect(text).toMatch(/agw_http_requests_total\{[^}]*route="\/api\/v1\/gateway\/evaluate"/);
});

test('requests the lane must not take are yoga’s: a browser’s under CORS, a query string, another method', async () => {
  const body = JSON.stringify(actionBody(agent));
  const browser = await send(laneUrl, { headers: { 'x-api-key': agent.key, origin: ORIGIN }, body });
  expect(browser.status).toBe(200);
  expect(browser.headers['access-control-allow-origin']).toBe(ORIGIN);
  const withQuery = await send(laneUrl, {
    path: '/api/v1/gateway/evaluate?x=%00',
    headers: { 'x-api-key': agent.key },
    body,
  });
  expect(withQuery.status).toBe(422);
  const get = await fetch(`${laneUrl}/api/v1/gateway/evaluate`, { headers: { 'x-api-key': agent.key } });
  expect(get.status).toBe(405);
});

test('a client that breaks its body off costs nothing but its own request', async () => {
  const { port } = new URL(laneUrl);
  const errors = logLines.length;
  await new Promise<void>((resolve) => {
    const socket = net.connect(Number(port), '127.0.0.1', () => {
      socket.write(
        `POST /api/v1/gateway/execute HTTP/1.1\r\nHost: x\r\nx-api-key: ${agent.key}\r\ncontent-length: 500\r\n\r\n{"svc_id":`,
      );
      setTimeout(() => socket.destroy(), 50);
    });
    socket.on('close', () => resolve());
  });
  const next = await send(laneUrl, { headers: { 'x-api-key': agent.key }, body: JSON.stringify(actionBody(agent)) });
  expect(next.status).toBe(200);
  // Logged as the 400 it is, not as an unexpected error.
  const logged = logLines.slice(errors).filter((line) => line.level === 50);
  expect(logged).toEqual([]);
});
