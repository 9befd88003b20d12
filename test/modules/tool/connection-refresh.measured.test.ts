/**
 * What a call pays when its tool's OAuth connection must refresh the token first (issue 43;
 * docs/decisions/0068-upstream-connections.md): REST executes of an mcp tool whose org connection
 * was made through a browser at panva's `oidc-provider` (rotating refresh tokens, ES256 JWT access
 * tokens), whose upstream is an MCP server of the official SDK that verifies every token. Executes
 * with a fresh token alternate with executes whose held token was made to expire just before, so
 * that each of those refreshes once at the provider, under the connection's lease, before its
 * call; alternated so that whatever else the machine does weighs on both. A refreshed token is
 * also a new pooled upstream client (the pool's key includes the Authorization header it sends),
 * so the difference includes that client's first exchange.
 *
 * Each execute is timed by an HTTP client on loopback. The times are printed, never held to a
 * bound (a shared machine moves them more than the refresh costs); what is asserted is that every
 * call reached the upstream as the connection's account, that the provider's /token was asked
 * exactly once per forced expiry and never otherwise, and that the connection stays connected.
 */
import { randomBytes } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { LOOPBACK_UPSTREAMS, type RequestOptions, startTestApp, type TestApp } from '../../support/app.js';
import { backend } from '../../support/database.js';
import { createKey, createManifest, manifestPayload, signUp, type OrgFixture } from '../../support/fixtures.js';
import {
  type ProtectedMcpServer,
  startAuthorizationServer,
  startProtectedMcpServer,
  createConnectedMcpTool,
  type TestAuthorizationServer,
} from '../../support/oauth-upstream.js';
import { CookieJar, signInAtProvider } from '../../support/oidc-provider.js';

/** Executes of each kind. */
const CALLS = 30;
/** Executes before the measured ones: the first calls compile code and open the upstream's client. */
const WARM_UP = 5;
const ENV = { ...LOOPBACK_UPSTREAMS, KEY_ENCRYPTION_KEY: randomBytes(32).toString('hex') };

let t: TestApp;
let server: http.Server;
let base: string;
let as: TestAuthorizationServer;
let upstream: ProtectedMcpServer;
let org: OrgFixture;
let toolId: string;
let connectionId: string;
let executeBody: string;
let apiKey: string;

beforeAll(async () => {
  t = await startTestApp(ENV);
  server = http.createServer(t.app.yoga);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const resources: string[] = [];
  as = await startAuthorizationServer({
    resources: () => resources,
    redirectUri: t.app.services.tools.upstreamRedirectUri,
  });
  upstream = await startProtectedMcpServer({ issuer: as.issuer });
  resources.push(upstream.url);
  org = await signUp(t, 'conn-refresh');
  toolId = await createConnectedMcpTool(request, org, { actionType: 'files', url: upstream.url, connection: 'org' });
  const { svcId } = await createManifest(
    t,
    org,
    'active',
    manifestPayload({
      capabilities: ['files:whoami'],
      constraints: { max_actions_per_hour: 10_000, max_actions_per_day: 10_000 },
    }),
  );
  executeBody = JSON.stringify({
    svc_id: svcId,
    agent_id: svcId,
    action: { type: 'files', tool: 'whoami', params: {} },
  });
  apiKey = (await createKey(t, org, ['gateway:execute'])).key;
  connectionId = await connectOrg('alice');
  // Its first connection has the tool read its upstream's definitions in the background: done
  // before anything is timed.
  const definitionsRead = async () =>
    (await request('GET', `/api/v1/orgs/${org.orgId}/tools/${toolId}`, { token: org.adminToken })).body
      .definitions_checked_at !== null;
  const deadline = Date.now() + 30_000;
  while (!(await definitionsRead())) {
    if (Date.now() > deadline) throw new Error('the tool never read its definitions');
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}, 60_000);

afterAll(async () => {
  server?.closeAllConnections();
  await new Promise((resolve) => server?.close(resolve));
  await t?.close();
  await upstream?.close();
  await as?.close();
});

async function request(method: string, path: string, options: RequestOptions = {}) {
  const response = await t.request(method, path, options);
  if (response.status >= 400) throw new Error(`${method} ${path}: ${response.status} ${response.text}`);
  return response;
}

/** An admin connects the org's account through the browser: the gateway's start page, the provider, the callback. */
async function connectOrg(login: string): Promise<string> {
  const started = await request('POST', `/api/v1/orgs/${org.orgId}/tools/${toolId}/connections`, {
    token: org.adminToken,
  });
  const jar = new CookieJar();
  const start = new URL(started.body.authorization_url);
  const opened = await t.request('GET', `${start.pathname}${start.search}`);
  jar.take(new Response(null, { headers: opened.headers }));
  const answer = await signInAtProvider(
    opened.headers.get('location')!,
    login,
    t.app.services.tools.upstreamRedirectUri,
  );
  const back = await t.request('GET', `${answer.pathname}${answer.search}`, { headers: { cookie: jar.header() } });
  expect(new URL(back.headers.get('location')!, base).searchParams.get('result')).toBe('connected');
  return started.body.connection_id;
}

const tokenRequests = () => as.hits.get('/token') ?? 0;

/** One execute over HTTP, timed from the client; it must reach the upstream as the connected account. */
async function timedExecute(): Promise<number> {
  const started = performance.now();
  const response = await fetch(`${base}/api/v1/gateway/execute`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': apiKey },
    body: executeBody,
  });
  const body = (await response.json()) as Record<string, any>;
  const ms = performance.now() - started;
  expect({ status: response.status, body }).toMatchObject({
    status: 200,
    body: {
      decision: 'allow',
      executed: true,
      result: { success: true, data: { structuredContent: { sub: 'alice' } } },
    },
  });
  return ms;
}

/** The held token as if at its expiry (the provider's is still good): the next call refreshes it first. */
const expireHeldToken = () =>
  t.database.db.sql.query("UPDATE tool_connections SET token_expires_at = now() - interval '1 second' WHERE id = $1", [
    connectionId,
  ]);

function quantile(samples: number[], q: number): number {
  const sorted = [...samples].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
}

test(`${CALLS} executes whose connection refreshes its token first, against ${CALLS} with a fresh token (${backend})`, async () => {
  for (let i = 0; i < WARM_UP; i++) await timedExecute();
  // A refresh too: its code compiled, the upstream's JWKS fetched for the provider's key, before timing.
  await expireHeldToken();
  await timedExecute();
  const fresh: number[] = [];
  const refreshed: number[] = [];
  const upstreamRequests = { fresh: 0, refreshed: 0 };
  const asked = { fresh: 0, refreshed: 0 };
  for (let i = 0; i < CALLS; i++) {
    let tokens = tokenRequests();
    let hits = upstream.hits.length;
    fresh.push(await timedExecute());
    asked.fresh += tokenRequests() - tokens;
    upstreamRequests.fresh += upstream.hits.length - hits;
    await expireHeldToken();
    tokens = tokenRequests();
    hits = upstream.hits.length;
    refreshed.push(await timedExecute());
    asked.refreshed += tokenRequests() - tokens;
    upstreamRequests.refreshed += upstream.hits.length - hits;
  }
  const [row] = await t.database.db.sql.query<{ status: string; token_expires_at: Date }>(
    'SELECT status, token_expires_at FROM tool_connections WHERE id = $1',
    [connectionId],
  );
  expect({ asked, status: row.status }).toEqual({ asked: { fresh: 0, refreshed: CALLS }, status: 'connected' });
  expect(row.token_expires_at.getTime()).toBeGreaterThan(Date.now() + 60_000);

  const ms = (value: number) => value.toFixed(1);
  const signed = (value: number) => `${value < 0 ? '' : '+'}${ms(value)}`;
  const line = (samples: number[]) =>
    `p50 ${ms(quantile(samples, 0.5))} ms, p95 ${ms(quantile(samples, 0.95))} ms, max ${ms(Math.max(...samples))} ms`;
  console.log(
    `${expect.getState().currentTestName}:\n` +
      `  fresh token:      ${line(fresh)}; ${(upstreamRequests.fresh / CALLS).toFixed(1)} upstream requests per call\n` +
      `  refreshed first:  ${line(refreshed)}; ${(upstreamRequests.refreshed / CALLS).toFixed(1)} upstream requests per call, one /token each\n` +
      `  difference:       p50 ${signed(quantile(refreshed, 0.5) - quantile(fresh, 0.5))} ms, ` +
      `p95 ${signed(quantile(refreshed, 0.95) - quantile(fresh, 0.95))} ms`,
  );
}, 120_000);
