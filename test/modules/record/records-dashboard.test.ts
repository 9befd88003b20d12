import { RecordsDashboardDocument } from '../../generated/graphql.js';
import { startTestApp, type TestApp } from '../../support/app.js';
import { manifestPayload, signUp, type OrgFixture } from '../../support/fixtures.js';
import { actionBody, execute, readyAgent, type AgentFixture } from '../../support/gateway.js';
import { runOperation, StatementCounter } from '../../support/statements.js';

const statements = new StatementCounter();
let t: TestApp;
let org: OrgFixture;
beforeAll(async () => {
  t = await startTestApp({}, { onQuery: statements.observe });
  org = await signUp(t, 'records-dash');
});
afterAll(() => t.close());

const constraints = {
  max_actions_per_hour: 1000,
  max_actions_per_day: 10000,
  require_human_approval: ['billing:refund'],
};
const ready = () => readyAgent(t, org, { capabilities: ['billing:read', 'billing:refund'], constraints });

async function dashboard(limit: number) {
  const { result, count } = await statements.count(() =>
    runOperation(t, RecordsDashboardDocument, { orgId: org.orgId, limit }, org.adminToken),
  );
  return { records: result.organization.records, count };
}

type Act = 'read' | 'refund' | 'ghost';
async function act(agent: AgentFixture, what: Act) {
  const body =
    what === 'ghost'
      ? { ...actionBody(agent), svc_id: 'ghost-agent', agent_id: 'ghost-agent' }
      : actionBody(agent, what, { invoice: `inv-${what}` });
  const response = await execute(t, agent, body);
  expect(response.status).toBe(200);
  return response.body;
}

test('records with their manifest and approval cost the same statements for 5 items as for 50', async () => {
  const a = await ready();
  const b = await ready();
  const plan: [AgentFixture, Act][] = [];
  for (let i = 0; i < 15; i++) plan.push([a, 'read'], [b, i % 2 ? 'refund' : 'read'], [a, 'refund']);
  // The newest five hold every kind of relation: both agents, approvals, and no manifest at all.
  plan.push([a, 'read'], [b, 'refund'], [a, 'ghost'], [a, 'refund'], [b, 'read']);
  for (const [agent, what] of plan) await act(agent, what);

  const small = await dashboard(5);
  const large = await dashboard(50);
  expect(large.records.total).toBe(50);
  expect(large.records.items).toHaveLength(50);
  const manifests = new Map([
    [a.svcId, a.manifestId],
    [b.svcId, b.manifestId],
  ]);
  const approvals = await t.database.db.sql.query<{ id: string; status: string; capability: string }>(
    'SELECT id, status::text AS status, capability FROM approvals WHERE org_id = $1',
    [org.orgId],
  );
  const approvalById = new Map(approvals.map((row) => [row.id, row]));
  expect(approvals.length).toBeGreaterThanOrEqual(20);
  for (const item of large.records.items) {
    if (item.svc_id === 'ghost-agent') {
      expect(item.manifest).toBeNull();
    } else {
      expect(item.manifest).toMatchObject({
        manifest_id: manifests.get(item.svc_id),
        svc_id: item.svc_id,
        status: 'active',
        version: '1.0',
      });
    }
    if (item.approval_id) {
      const row = approvalById.get(item.approval_id)!;
      expect(item.approval).toEqual({
        approval_id: item.approval_id,
        status: row.status,
        capability: 'billing:refund',
      });
    } else {
      expect(item.approval).toBeNull();
    }
  }
  expect(small.records.items.map((i: { svc_id: string }) => i.svc_id)).toContain('ghost-agent');
  expect(small.records.items.filter((i: { approval: unknown }) => i.approval).length).toBeGreaterThanOrEqual(2);
  // organization + list + count + manifests (one query for every agent) + approvals (one query).
  expect(large.count).toBe(small.count);
  expect(large.count).toBeLessThanOrEqual(6);
});

test("a record's manifest is the version approved most recently before it, also after a newer version took over", async () => {
  const agent = await ready();
  const before = await act(agent, 'read');
  const next = manifestPayload({ svcId: agent.svcId, capabilities: ['billing:read', 'billing:refund'], constraints });
  (next.agent as { version: string }).version = '2.0.0';
  const registered = await t.request('POST', `/api/v1/orgs/${org.orgId}/manifests`, {
    token: org.adminToken,
    body: next,
  });
  expect(registered.status).toBe(201);
  const approved = await t.request(
    'POST',
    `/api/v1/orgs/${org.orgId}/manifests/${registered.body.manifest_id}/approve`,
    {
      token: org.adminToken,
      body: {},
    },
  );
  expect(approved.status).toBe(200);
  const after = await act(agent, 'read');
  const { records } = await dashboard(100);
  const byId = new Map(records.items.map((r: { record_id: string }) => [r.record_id, r]));
  expect(byId.get(before.interaction_id)).toMatchObject({
    manifest: { manifest_id: agent.manifestId, status: 'superseded' },
  });
  expect(byId.get(after.interaction_id)).toMatchObject({
    manifest: { manifest_id: registered.body.manifest_id, status: 'active' },
  });
});

test('the relations stay out of the REST record shapes', async () => {
  const list = await t.request('GET', '/api/v1/records?limit=3', { token: org.adminToken });
  expect(list.status).toBe(200);
  for (const item of list.body.items) {
    expect(item).not.toHaveProperty('manifest');
    expect(item).not.toHaveProperty('approval');
  }
  const audit = await t.request('GET', `/api/v1/orgs/${org.orgId}/audit-logs?limit=3`, { token: org.adminToken });
  for (const item of audit.body.items) expect(item).not.toHaveProperty('actor_user');
});
