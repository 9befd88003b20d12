/**
 * What deactivating an agent does, one effect at a time (docs/decisions/0020-agents.md): the gateway denies
 * it with AGENT_DEACTIVATED (still recording executes), its pending approvals are denied, its
 * capability tokens revoked, new manifests refused; records and history stay. Reactivation gives
 * gateway access back and leaves the tokens revoked. And last_seen_at, written at most once a minute.
 */
import { startTestApp, type TestApp } from '../../support/app.js';
import { manifestPayload, signUp, type OrgFixture } from '../../support/fixtures.js';
import { actionBody, evaluate, execute, readyAgent, type AgentFixture } from '../../support/gateway.js';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

const codes = (body: { reasons: { code: string }[] }) => body.reasons.map((r) => r.code);

async function deactivate(org: OrgFixture, agent: AgentFixture, reason = 'compromised key') {
  const response = await t.request('DELETE', `/api/v1/agents/${agent.svcId}?reason=${encodeURIComponent(reason)}`, {
    token: org.adminToken,
  });
  expect(response.status).toBe(204);
}

async function reactivate(org: OrgFixture, agent: AgentFixture) {
  const response = await t.request('POST', `/api/v1/agents/${agent.svcId}/reactivate`, {
    token: org.adminToken,
    body: {},
  });
  expect(response.status).toBe(200);
  return response.body;
}

describe('deactivating an agent', () => {
  test('the gateway denies it with AGENT_DEACTIVATED right after SVC_NOT_ALLOWED_FOR_KEY, and records the denied executes', async () => {
    const org = await signUp(t);
    const agent = await readyAgent(t, org);
    expect((await execute(t, agent)).body.decision).toBe('allow');
    await deactivate(org, agent, 'incident 42');

    const denied = await execute(t, agent);
    expect(denied.status).toBe(200);
    expect(denied.body).toMatchObject({ decision: 'deny', executed: false });
    expect(denied.body.reasons).toEqual([
      { code: 'AGENT_DEACTIVATED', message: `Agent "${agent.svcId}" is deactivated: incident 42`, details: null },
    ]);
    expect(codes((await evaluate(t, agent)).body)).toEqual(['AGENT_DEACTIVATED']);
    // Other reasons still follow, in their order.
    expect(codes((await execute(t, agent, actionBody(agent, 'delete'))).body)).toEqual([
      'AGENT_DEACTIVATED',
      'CAPABILITY_NOT_APPROVED',
    ]);

    const record = await t.request('GET', `/api/v1/records/${denied.body.interaction_id}`, { token: org.adminToken });
    expect(record.body).toMatchObject({
      status: 'denied',
      executed: false,
      reasons: [expect.objectContaining({ code: 'AGENT_DEACTIVATED' })],
    });
    const verified = await t.request('GET', `/api/v1/records/${denied.body.interaction_id}/verify`, {
      token: org.adminToken,
    });
    expect(verified.body.valid).toBe(true);
  });

  test('its pending approvals become denied with reason "agent deactivated"; decided ones stay', async () => {
    const org = await signUp(t);
    const agent = await readyAgent(t, org, {
      constraints: { max_actions_per_hour: 100, max_actions_per_day: 100, require_human_approval: ['billing:refund'] },
    });
    const other = await readyAgent(t, org, {
      constraints: { max_actions_per_hour: 100, max_actions_per_day: 100, require_human_approval: ['billing:refund'] },
    });
    const ask = async (who: AgentFixture, amount: number) =>
      (await execute(t, who, actionBody(who, 'refund', { amount }))).body.approval_id as string;
    const [first, second, approvedBefore, othersPending] = [
      await ask(agent, 1),
      await ask(agent, 2),
      await ask(agent, 3),
      await ask(other, 4),
    ];
    const approvals = `/api/v1/orgs/${org.orgId}/approvals`;
    expect(
      (await t.request('POST', `${approvals}/${approvedBefore}/approve`, { token: org.adminToken, body: {} })).status,
    ).toBe(200);

    await deactivate(org, agent);
    for (const id of [first, second]) {
      const approval = await t.request('GET', `${approvals}/${id}`, { token: org.adminToken });
      expect(approval.body).toMatchObject({
        status: 'denied',
        reason: 'agent deactivated',
        decided_at: expect.any(String),
      });
    }
    expect((await t.request('GET', `${approvals}/${approvedBefore}`, { token: org.adminToken })).body.status).toBe(
      'approved',
    );
    expect((await t.request('GET', `${approvals}/${othersPending}`, { token: org.adminToken })).body.status).toBe(
      'pending',
    );
    // The approved one cannot be used while the agent is deactivated.
    const used = await execute(t, agent, {
      ...actionBody(agent, 'refund', { amount: 3 }),
      approval_id: approvedBefore,
    });
    expect(codes(used.body)).toEqual(['AGENT_DEACTIVATED']);

    const audit = await t.request('GET', `/api/v1/orgs/${org.orgId}/audit-logs?action=agent.deactivated`, {
      token: org.adminToken,
    });
    expect(audit.body.items).toHaveLength(1);
    expect(audit.body.items[0].after).toMatchObject({
      status: 'deactivated',
      approvals_denied: 2,
      capability_tokens_revoked: 0,
    });
  });

  test('its capability tokens are revoked, and stay revoked after reactivation; other agents keep theirs', async () => {
    const org = await signUp(t);
    const agent = await readyAgent(t, org);
    const other = await readyAgent(t, org);
    const tokens = `/api/v1/orgs/${org.orgId}/capability-tokens`;
    const issue = async (svcId: string) => {
      const issued = await t.request('POST', tokens, {
        token: org.adminToken,
        body: { svc_id: svcId, capabilities: ['billing:read'], expires_in_seconds: 600 },
      });
      expect(issued.status).toBe(201);
      return issued.body as { token_id: string; token: string };
    };
    const [mine, theirs] = [await issue(agent.svcId), await issue(other.svcId)];
    const withToken = (who: AgentFixture, token: string) =>
      execute(t, who, { ...actionBody(who), capability_token: token });
    expect((await withToken(agent, mine.token)).body.decision).toBe('allow');

    await deactivate(org, agent);
    const listed = (await t.request('GET', tokens, { token: org.adminToken })).body.items as {
      token_id: string;
      revoked_at: string | null;
    }[];
    expect(listed.find((x) => x.token_id === mine.token_id)?.revoked_at).toEqual(expect.any(String));
    expect(listed.find((x) => x.token_id === theirs.token_id)?.revoked_at).toBeNull();

    await reactivate(org, agent);
    const after = await withToken(agent, mine.token);
    expect(after.body.reasons).toEqual([
      expect.objectContaining({ code: 'CAPABILITY_TOKEN_INVALID', message: 'The capability token has been revoked' }),
    ]);
    expect((await withToken(other, theirs.token)).body.decision).toBe('allow');
  });

  test('a new manifest for it is refused with 409; records and manifest history stay', async () => {
    const org = await signUp(t);
    const agent = await readyAgent(t, org);
    const done = await execute(t, agent);
    await deactivate(org, agent);

    const register = await t.request('POST', `/api/v1/orgs/${org.orgId}/manifests`, {
      token: org.adminToken,
      body: manifestPayload({ svcId: agent.svcId, capabilities: ['billing:read'] }),
    });
    expect(register.status).toBe(409);
    expect(register.body.error).toMatchObject({ code: 'CONFLICT', message: expect.stringMatching(/deactivated/) });
    const manifests = await t.request('GET', `/api/v1/orgs/${org.orgId}/manifests?svc_id=${agent.svcId}`, {
      token: org.adminToken,
    });
    expect(manifests.body.items).toHaveLength(1);

    expect(
      (await t.request('GET', `/api/v1/records/${done.body.interaction_id}`, { token: org.adminToken })).status,
    ).toBe(200);
    const history = await t.request('GET', `/api/v1/orgs/${org.orgId}/manifests/${agent.manifestId}/history`, {
      token: org.adminToken,
    });
    expect(history.status).toBe(200);
    expect(history.body.items.length).toBeGreaterThan(0);

    // Once reactivated, a new version can be registered again.
    await reactivate(org, agent);
    const again = await t.request('POST', `/api/v1/orgs/${org.orgId}/manifests`, {
      token: org.adminToken,
      body: manifestPayload({ svcId: agent.svcId, capabilities: ['billing:read'] }),
    });
    expect(again.status).toBe(201);
  });

  test('reactivation gives gateway access back', async () => {
    const org = await signUp(t);
    const agent = await readyAgent(t, org);
    await deactivate(org, agent);
    expect(codes((await execute(t, agent)).body)).toEqual(['AGENT_DEACTIVATED']);
    const back = await reactivate(org, agent);
    expect(back).toMatchObject({
      status: 'active',
      deactivated_at: null,
      deactivated_by: null,
      deactivation_reason: null,
    });
    expect((await execute(t, agent)).body).toMatchObject({ decision: 'allow', executed: true });
  });
});

describe('last_seen_at', () => {
  test('set by the first gateway request, then written at most once a minute', async () => {
    const org = await signUp(t);
    const agent = await readyAgent(t, org);
    const seen = async () =>
      (await t.request('GET', `/api/v1/agents/${agent.svcId}`, { token: org.adminToken })).body.last_seen_at as
        | string
        | null;
    expect(await seen()).toBeNull();
    const before = Date.now();
    await execute(t, agent);
    // The write is not awaited by the request: wait for it.
    let first = await seen();
    while (first === null && Date.now() - before < 5000) first = await seen();
    expect(Date.parse(first!)).toBeGreaterThanOrEqual(before - 5);
    await new Promise((resolve) => setTimeout(resolve, 50));
    await execute(t, agent);
    await evaluate(t, agent);
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(await seen()).toBe(first);
  });
});
