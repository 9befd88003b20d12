import { ApprovalDashboardDocument } from '../../generated/graphql.js';
import { startTestApp, type TestApp } from '../../support/app.js';
import { addUser, signUp } from '../../support/fixtures.js';
import { actionBody, execute, readyAgent } from '../../support/gateway.js';
import { runOperation, StatementCounter } from '../../support/statements.js';

const statements = new StatementCounter();
let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({}, { onQuery: statements.observe });
});
afterAll(() => t.close());

const dashboard = (orgId: string, limit: number, token: string) =>
  statements.count(() => runOperation(t, ApprovalDashboardDocument, { orgId, limit }, token));

test('the approvals dashboard with agent, manifest and decider costs the same statements for 40 items as for 4', async () => {
  const org = await signUp(t);
  const operator = await addUser(t, org, 'operator');
  const agents = [];
  for (let i = 0; i < 4; i++) {
    agents.push(
      await readyAgent(t, org, {
        constraints: {
          max_actions_per_hour: 100,
          max_actions_per_day: 100,
          require_human_approval: ['billing:refund'],
        },
      }),
    );
  }
  const ids: string[] = [];
  for (let i = 0; i < 40; i++) {
    const agent = agents[i % agents.length];
    const asked = await execute(t, agent, actionBody(agent, 'refund', { n: i }));
    ids.push(asked.body.approval_id);
  }
  // Half decided by the operator, some by a key (no user), the rest pending.
  for (const id of ids.slice(0, 20)) {
    const decided = await t.request('POST', `/api/v1/orgs/${org.orgId}/approvals/${id}/approve`, {
      token: operator.token,
      body: {},
    });
    expect(decided.status).toBe(200);
  }

  const small = await dashboard(org.orgId, 4, org.adminToken);
  const large = await dashboard(org.orgId, 40, org.adminToken);
  const page = large.result.organization.approvals;
  expect(page).toMatchObject({ total: 40, pending_count: 20 });
  expect(page.items).toHaveLength(40);
  for (const item of page.items) {
    expect(item.manifest_detail).toMatchObject({ status: 'active', approved_by_user: { email: org.adminEmail } });
    expect(item.manifest.manifest_id).toBe(item.manifest_detail.manifest_id);
    if (item.status === 'approved') expect(item.decided_by_user).toEqual({ email: operator.email, role: 'operator' });
    else expect(item.decided_by_user).toBeNull();
  }
  // organization, list, count, pending count, then one batched query per relation level
  // (approvals re-read by Pothos' fallback loader, manifests, deciders, manifest approvers).
  expect(large.count).toBe(small.count);
  expect(large.count).toBeLessThanOrEqual(10);
});
