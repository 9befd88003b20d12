/**
 * Nothing runs unrecorded: input the database cannot store is refused before anything is counted
 * or called (not after the tool ran), one bad record cannot fail the records of other requests,
 * and a tool answer the gateway cannot hash is a failed result that is still recorded.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { NewRecord } from '../../../src/modules/record/record.service.js';
import { LOOPBACK_UPSTREAMS, startTestApp, type TestApp } from '../../support/app.js';
import { signUp, type OrgFixture } from '../../support/fixtures.js';
import { actionBody, execute, readyAgent, type AgentFixture } from '../../support/gateway.js';

let t: TestApp;
let receiver: http.Server;
let calls = 0;
let answer = '{"ok":true}';
let toolUrl: string;

beforeAll(async () => {
  t = await startTestApp(LOOPBACK_UPSTREAMS);
  receiver = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      calls++;
      res.writeHead(200, { 'content-type': 'application/json' }).end(answer);
    });
  });
  await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
  toolUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/tool`;
});
afterAll(async () => {
  await t.close();
  await new Promise((resolve) => receiver.close(resolve));
});

/** An agent whose `billing` actions go to the local receiver. */
async function httpAgent(
  limits = { max_actions_per_hour: 1000, max_actions_per_day: 1000 },
): Promise<{ org: OrgFixture; agent: AgentFixture }> {
  const org = await signUp(t, 'integrity');
  const agent = await readyAgent(t, org, { tool: false, constraints: limits });
  const tool = await t.request('POST', `/api/v1/orgs/${org.orgId}/tools`, {
    token: org.adminToken,
    body: { action_type: 'billing', connector: 'http', config: { url: toolUrl, allow_private_network: true } },
  });
  expect(tool.status).toBe(201);
  return { org, agent };
}

const recordsOf = async (org: OrgFixture) =>
  (await t.request('GET', '/api/v1/records?limit=1000', { token: org.adminToken })).body as {
    items: { record_id: string; status: string }[];
    total: number;
  };

describe('input the database cannot store never reaches the tool', () => {
  const raw = (agent: AgentFixture, params: string) =>
    `{"svc_id":"${agent.svcId}","agent_id":"${agent.svcId}","action":{"type":"billing","tool":"read","params":${params}}}`;
  const cases: [string, (agent: AgentFixture) => string, string][] = [
    ['NUL in a param value', (a) => raw(a, '{"note":"a\\u0000b"}'), 'action.params.note'],
    ['an unpaired surrogate in a param value', (a) => raw(a, '{"note":"x\\ud800"}'), 'action.params.note'],
    ['NUL in a param key', (a) => raw(a, '{"k\\u0000":1}'), 'action.params'],
    [
      'params nested 3,000 deep',
      (a) => raw(a, `{"deep":${'['.repeat(3000)}${']'.repeat(3000)}}`),
      'action.params.deep',
    ],
    [
      'an unpaired surrogate in agent_id',
      (a) => `{"svc_id":"${a.svcId}","agent_id":"x\\ud800","action":{"type":"billing","tool":"read"}}`,
      'agent_id',
    ],
  ];

  test.each(cases)('%s: 422, no tool call, no budget counted, no record', async (_, body, field) => {
    const { org, agent } = await httpAgent({ max_actions_per_hour: 5, max_actions_per_day: 5 });
    const before = calls;
    const refused = await execute(t, agent, body(agent));
    expect(refused.status).toBe(422);
    expect(refused.body.error).toMatchObject({
      code: 'VALIDATION_ERROR',
      details: {
        errors: [
          expect.objectContaining({ field: expect.stringMatching(new RegExp(`^${field.replace(/[.[\]]/g, '\\$&')}`)) }),
        ],
      },
    });
    expect(calls).toBe(before);
    expect((await recordsOf(org)).total).toBe(0);
    // The budget is untouched: the next allowed execute is the first of the hour.
    const next = await execute(t, agent);
    expect(next.body.decision).toBe('allow');
    expect(next.headers.get('x-ratelimit-remaining')).toBe('4');
    expect(calls).toBe(before + 1);
  });

  test('the same inputs over GraphQL variables are refused before the tool too', async () => {
    const { org, agent } = await httpAgent();
    const before = calls;
    const response = await t.graphql(
      'mutation($action: GatewayActionInput!) { gateway_execute(svc_id: "' +
        agent.svcId +
        '", agent_id: "' +
        agent.svcId +
        '", action: $action) { decision } }',
      { action: { type: 'billing', tool: 'read', params: { note: 'a\u0000b' } } },
      { apiKey: agent.key },
    );
    expect(response.body.errors?.[0]?.extensions?.code).toBe('VALIDATION_ERROR');
    expect(calls).toBe(before);
    expect((await recordsOf(org)).total).toBe(0);
  });
});

test('a tool answer nested deeper than 64 levels is a failed result, and the call is recorded', async () => {
  const { org, agent } = await httpAgent();
  answer = `{"deep":${'['.repeat(5000)}${']'.repeat(5000)}}`;
  try {
    const response = await execute(t, agent);
    expect(response.status).toBe(200);
    expect(response.body).toMatchObject({
      decision: 'allow',
      executed: true,
      result: { success: false, error: { code: 'TOOL_RESPONSE_INVALID' } },
    });
    const records = await recordsOf(org);
    expect(records.items.map((r) => r.record_id)).toEqual([response.body.interaction_id]);
  } finally {
    answer = '{"ok":true}';
  }
});

test('a request with an unstorable agent_id beside 60 valid executes of its org: the 60 are allowed and recorded', async () => {
  const org = await signUp(t, 'poison');
  const agent = await readyAgent(t, org);
  const poisoned = `{"svc_id":"${agent.svcId}","agent_id":"x\\ud800","action":{"type":"billing","tool":"read"}}`;
  const responses = await Promise.all([
    ...Array.from({ length: 30 }, (_, i) => execute(t, agent, actionBody(agent, 'read', { i }))),
    execute(t, agent, poisoned),
    ...Array.from({ length: 30 }, (_, i) => execute(t, agent, actionBody(agent, 'read', { i: 30 + i }))),
  ]);
  expect(responses[30].status).toBe(422);
  const valid = responses.filter((_, i) => i !== 30);
  expect(valid.map((r) => `${r.status} ${r.body.decision}`)).toEqual(Array(60).fill('200 allow'));
  const records = await recordsOf(org);
  expect(records.total).toBe(60);
  expect(new Set(records.items.map((r) => r.record_id))).toEqual(new Set(valid.map((r) => r.body.interaction_id)));
});

test('the record queue: one record that cannot be stored fails alone, its batch neighbours are written in one chain', async () => {
  const org = await signUp(t, 'batch');
  const entry = (agentId: string): NewRecord => ({
    orgId: org.orgId,
    svcId: 'agent-a',
    agentId,
    actionType: 'billing',
    tool: 'read',
    capability: 'billing:read',
    paramsHash: `sha256:${'1'.repeat(64)}`,
    params: { ok: true },
    decision: 'deny',
    executed: false,
    // What an AGENT_MISMATCH reason would carry: the caller's text inside the message.
    reasons: [{ code: 'AGENT_MISMATCH', message: `agent_id "${agentId}" does not match` }],
    resultHash: null,
    approvalId: null,
    policies: [],
    labels: [],
    originalResultHash: null,
    redactions: [],
    confirmation: null,
    channel: 'rest',
    connection: null,
  });
  const appends = Array.from({ length: 61 }, (_, i) =>
    t.app.services.records.append(`int_batch_${i}`, entry(i === 30 ? 'x\ud800' : `agent-${i}`), true),
  );
  const outcomes = await Promise.allSettled(appends);
  expect(outcomes[30]).toMatchObject({
    status: 'rejected',
    reason: expect.objectContaining({ message: expect.stringContaining('cannot be stored') }),
  });
  expect(outcomes.filter((o) => o.status === 'fulfilled')).toHaveLength(60);
  const chain = await t.database.db.sql.query<{ seq: string; prev_hash: string; record_hash: string }>(
    'SELECT seq::text AS seq, prev_hash, record_hash FROM interaction_records WHERE org_id = $1 ORDER BY interaction_records.seq',
    [org.orgId],
  );
  expect(chain.map((r) => Number(r.seq))).toEqual(Array.from({ length: 60 }, (_, i) => i + 1));
  chain.forEach((row, i) => i > 0 && expect(row.prev_hash).toBe(chain[i - 1].record_hash));
});

test('a batch whose write fails in the database retries its records one by one', async () => {
  const org = await signUp(t, 'retry');
  const base: NewRecord = {
    orgId: org.orgId,
    svcId: 'agent-a',
    agentId: 'agent-a',
    actionType: 'billing',
    tool: 'read',
    capability: 'billing:read',
    paramsHash: `sha256:${'2'.repeat(64)}`,
    params: {},
    decision: 'deny',
    executed: false,
    reasons: [],
    resultHash: null,
    approvalId: null,
    policies: [],
    labels: [],
    originalResultHash: null,
    redactions: [],
    confirmation: null,
    channel: 'rest',
    connection: null,
  };
  // A duplicate record id passes every check in the process and fails only in the database.
  await t.app.services.records.append('int_dup', base, true);
  const outcomes = await Promise.allSettled([
    t.app.services.records.append('int_r1', base, true),
    t.app.services.records.append('int_dup', base, true),
    t.app.services.records.append('int_r2', base, true),
  ]);
  expect(outcomes.map((o) => o.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
  expect((await recordsOf(org)).total).toBe(3);
});
