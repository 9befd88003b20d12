import { Writable } from 'node:stream';
import { createRemoteJWKSet, jwtVerify } from 'jose';
import { createLogger } from '../../../src/logger.js';
import { LOOPBACK_UPSTREAMS, startTestApp, type TestApp } from '../../support/app.js';
import { signUp, type OrgFixture } from '../../support/fixtures.js';
import { actionBody, execute, readyAgent, type AgentFixture } from '../../support/gateway.js';
import {
  startAuthorizationServer,
  startProtectedMcpServer,
  type ProtectedMcpServer,
  type TestAuthorizationServer,
  TOOLS_SCOPE,
} from '../../support/oauth-upstream.js';
import { type Hit, type RecordingServer, startRecordingServer } from '../../support/recording-server.js';

/**
 * A tool with a client-credentials grant (docs/decisions/0068-upstream-connections.md): the
 * gateway asks panva's oidc-provider for a token bound to the upstream, sends it to an http and an
 * mcp upstream that verify it, holds it for the next calls, asks again once when the upstream
 * refuses it (401), and turns a refused grant into a failed, recorded call. The agent never sees
 * the token or the client secret.
 */

let as: TestAuthorizationServer;
let mcp: ProtectedMcpServer;
let api: RecordingServer;
const apiHits: Hit[] = [];
/** Tokens the http upstream no longer takes, as if revoked there. */
const refused = new Set<string>();
/** The http upstream takes no token at all. */
let refuseAll = false;
let t: TestApp;
let org: OrgFixture;
let agent: AgentFixture;
let tokenUrl: string;
/** Every line the service logs, searched for tokens and secrets at the end. */
let logged = '';
const sink = new Writable({
  write(chunk, _encoding, done) {
    logged += String(chunk);
    done();
  },
});
/** Every access token the upstreams were sent. */
const tokensSeen = new Set<string>();

const bearerOf = (hit: Hit) => /^Bearer (\S+)$/.exec(String(hit.headers.authorization ?? ''))?.[1];
const tokenRequests = () => as.hits.get('/token') ?? 0;

beforeAll(async () => {
  as = await startAuthorizationServer({
    resources: () => [mcp.url, `${api.base}/billing`],
    redirectUri: 'http://127.0.0.1:9/unused',
  });
  mcp = await startProtectedMcpServer({ issuer: as.issuer });
  const discovery = (await (await fetch(`${as.issuer}/.well-known/openid-configuration`)).json()) as {
    jwks_uri: string;
    token_endpoint: string;
  };
  tokenUrl = discovery.token_endpoint;
  const keys = createRemoteJWKSet(new URL(discovery.jwks_uri));
  // A machine API: it takes the provider's tokens for itself, except those it was told to refuse.
  api = await startRecordingServer(apiHits, async (hit, res) => {
    const token = bearerOf(hit);
    if (token) tokensSeen.add(token);
    const accepted =
      token !== undefined &&
      !refuseAll &&
      !refused.has(token) &&
      (await jwtVerify(token, keys, { issuer: as.issuer, audience: `${api.base}/billing` }).then(
        () => true,
        () => false,
      ));
    res.writeHead(accepted ? 200 : 401, { 'content-type': 'application/json' });
    res.end(JSON.stringify(accepted ? { charged: true } : { error: 'invalid_token' }));
  });
  t = await startTestApp(LOOPBACK_UPSTREAMS, { logger: createLogger('debug', sink) });
  org = await signUp(t);
  agent = await readyAgent(t, org, { tool: false, capabilities: ['billing:charge', 'crm:whoami'] });
});

afterAll(async () => {
  await t.close();
  await Promise.all([api.close(), mcp.close(), as.close()]);
});

const grant = (secret = as.machine.client_secret) => ({
  type: 'client_credentials',
  token_url: tokenUrl,
  client_id: as.machine.client_id,
  client_secret: secret,
  scopes: [TOOLS_SCOPE],
});

async function saveTool(actionType: string, connector: 'http' | 'mcp', url: string, auth: Record<string, unknown>) {
  const path = `/api/v1/orgs/${org.orgId}/tools`;
  const existing = await t.request('GET', path, { token: org.adminToken });
  const tool = existing.body.items.find((item: { action_type: string }) => item.action_type === actionType);
  const body = { action_type: actionType, connector, config: { url, allow_private_network: true, auth } };
  const saved = tool
    ? await t.request('PATCH', `${path}/${tool.tool_id}`, { token: org.adminToken, body: { config: body.config } })
    : await t.request('POST', path, { token: org.adminToken, body });
  expect([200, 201]).toContain(saved.status);
  return saved.body;
}

const call = (type: string, tool: string) =>
  execute(t, agent, { ...actionBody(agent, tool, {}), action: { type, tool, params: {} } });

test('an http tool: one token for several calls, bound to the upstream, never shown to the agent', async () => {
  await saveTool('billing', 'http', `${api.base}/billing`, grant());
  const before = tokenRequests();
  const first = await call('billing', 'charge');
  const second = await call('billing', 'charge');
  for (const answer of [first, second]) {
    expect(answer.status).toBe(200);
    expect(answer.body).toMatchObject({
      decision: 'allow',
      executed: true,
      result: { success: true, data: { charged: true } },
    });
  }
  expect(tokenRequests() - before).toBe(1);
  const tokens = apiHits.slice(-2).map(bearerOf);
  expect(tokens[0]).toBeDefined();
  expect(tokens[1]).toBe(tokens[0]);
  for (const answer of [first, second]) {
    expect(answer.text).not.toContain(tokens[0]!);
    expect(answer.text).not.toContain(as.machine.client_secret);
  }
  const records = await t.database.db.sql.query<{ row: string }>(
    'SELECT row_to_json(r)::text AS row FROM interaction_records r WHERE org_id = $1',
    [org.orgId],
  );
  expect(records.length).toBeGreaterThanOrEqual(2);
  for (const { row } of records) expect(row).not.toContain(tokens[0]!);
});

test('the upstream refuses the held token (401): one new token, one more try, and the call succeeds', async () => {
  await call('billing', 'charge');
  const held = bearerOf(apiHits.at(-1)!)!;
  refused.add(held);
  const before = tokenRequests();
  const hitsBefore = apiHits.length;
  const answer = await call('billing', 'charge');
  expect(answer.body).toMatchObject({ executed: true, result: { success: true, data: { charged: true } } });
  expect(tokenRequests() - before).toBe(1);
  const tries = apiHits.slice(hitsBefore).map(bearerOf);
  expect(tries).toHaveLength(2);
  expect(tries[0]).toBe(held);
  expect(tries[1]).not.toBe(held);

  // Refused whatever the token: one new token and one more try only, then the upstream's 401.
  refuseAll = true;
  try {
    const [tokensAsked, hitsAsked] = [tokenRequests(), apiHits.length];
    const last = await call('billing', 'charge');
    expect(last.body).toMatchObject({
      executed: true,
      result: { success: false, error: { code: 'TOOL_HTTP_ERROR', message: 'The tool answered HTTP 401' } },
    });
    expect([tokenRequests() - tokensAsked, apiHits.length - hitsAsked]).toEqual([1, 2]);
  } finally {
    refuseAll = false;
  }
});

test('an mcp tool: the token reaches the SDK server, which answers as the machine client, definitions read included', async () => {
  const tool = await saveTool('crm', 'mcp', mcp.url, grant());
  const answer = await call('crm', 'whoami');
  expect(answer.status).toBe(200);
  expect(answer.body).toMatchObject({ executed: true, result: { success: true } });
  expect(JSON.stringify(answer.body.result.data)).toContain(as.machine.client_id);
  const read = await t.request('GET', `/api/v1/orgs/${org.orgId}/tools/${tool.tool_id}`, { token: org.adminToken });
  expect(read.body.definitions_error ?? null).toBeNull();
});

test('a grant the authorization server refuses: a failed, recorded call that names the reason and no secret', async () => {
  const wrongSecret = 'not-the-machine-secret-0123';
  await saveTool('billing', 'http', `${api.base}/billing`, grant(wrongSecret));
  const hitsBefore = apiHits.length;
  const answer = await call('billing', 'charge');
  expect(answer.status).toBe(200);
  expect(answer.body).toMatchObject({
    decision: 'allow',
    executed: true,
    result: { success: false, error: { code: 'TOOL_AUTHORIZATION_FAILED' } },
  });
  expect(answer.body.result.error.message).toMatch(/authorization server did not grant a token/);
  expect(answer.text).not.toContain(wrongSecret);
  expect(apiHits.length).toBe(hitsBefore);
  const [record] = await t.database.db.sql.query<{ row: string }>(
    'SELECT row_to_json(r)::text AS row FROM interaction_records r WHERE id = $1',
    [answer.body.interaction_id],
  );
  // The record keeps the failed result's hash, and nothing of the grant.
  expect(JSON.parse(record.row)).toMatchObject({ executed: true, result_hash: expect.stringMatching(/^sha256:/) });
  expect(record.row).not.toContain(wrongSecret);
});

test('no token and no client secret in any line the service logged', () => {
  expect(logged.length).toBeGreaterThan(0);
  expect(tokensSeen.size).toBeGreaterThanOrEqual(2);
  for (const secret of [...tokensSeen, as.machine.client_secret, 'not-the-machine-secret-0123']) {
    expect(logged).not.toContain(secret);
  }
});
