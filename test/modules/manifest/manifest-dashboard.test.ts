import { ManifestDashboardDocument } from '../../generated/graphql.js';
import { startTestApp, type TestApp } from '../../support/app.js';
import { addUser, createManifest, manifestPayload, signUp, type OrgFixture } from '../../support/fixtures.js';
import { runOperation, StatementCounter } from '../../support/statements.js';

const statements = new StatementCounter();
let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({}, { onQuery: statements.observe });
});
afterAll(() => t.close());

/** Statements Prisma sends while serving one dashboard query. */
async function countStatements(org: OrgFixture, limit: number) {
  const { result: data, count } = await statements.count(() =>
    runOperation(t, ManifestDashboardDocument, { orgId: org.orgId, limit }, org.adminToken),
  );
  return { data, count };
}

describe('dashboard queries resolve relations without N+1', () => {
  test('50 manifests with their history and approver cost the same few statements as 5', async () => {
    const org = await signUp(t);
    const operator = await addUser(t, org, 'operator');
    // 50 manifests: 25 agents with an approved first version and a pending second one.
    for (let i = 0; i < 25; i++) {
      const svcId = `dash-agent-${i}`;
      await createManifest(t, org, 'active', manifestPayload({ svcId }));
      const v2 = manifestPayload({ svcId, capabilities: ['billing:read'] });
      (v2.agent as { version: string }).version = '2.0.0';
      const registered = await t.request('POST', `/api/v1/orgs/${org.orgId}/manifests`, {
        token: operator.token,
        body: v2,
      });
      expect(registered.status).toBe(201);
    }

    const small = await countStatements(org, 5);
    const large = await countStatements(org, 50);
    expect(large.data.organization.manifests.items).toHaveLength(50);
    expect(large.data.organization.manifests.total).toBe(50);
    for (const item of large.data.organization.manifests.items) {
      expect(item.history.length).toBe(3);
      if (item.status === 'active') expect(item.approved_by_user?.email).toBe(org.adminEmail);
      else expect(item.approved_by_user).toBeNull();
    }
    expect(large.data.organization.manifests.items.filter((m) => m.status === 'pending')[0].history[0]).toMatchObject({
      status: 'pending',
      changed_by: operator.email,
    });
    // organization + list + count + history (one query for all agents) + approvers (batched).
    expect(large.count).toBe(small.count);
    expect(large.count).toBeLessThanOrEqual(6);
  });
});

describe('concurrency', () => {
  test('of two concurrent approvals of one manifest exactly one succeeds', async () => {
    const org = await signUp(t);
    const operator = await addUser(t, org, 'operator');
    for (let round = 0; round < 5; round++) {
      const { manifestId } = await createManifest(t, org, 'pending');
      const path = `/api/v1/orgs/${org.orgId}/manifests/${manifestId}/approve`;
      const results = await Promise.all([
        t.request('POST', path, { token: org.adminToken, body: { notes: 'admin' } }),
        t.request('POST', path, { token: operator.token, body: { notes: 'operator' } }),
      ]);
      const statuses = results.map((r) => r.status).sort();
      expect(statuses).toEqual([200, 409]);
      const loser = results.find((r) => r.status === 409)!;
      expect(loser.body.error).toMatchObject({
        code: 'INVALID_STATE_TRANSITION',
        details: { from: 'active', to: 'active' },
      });
      const history = await t.request('GET', `/api/v1/orgs/${org.orgId}/manifests/${manifestId}/history`, {
        token: org.adminToken,
      });
      expect(history.body.items.filter((e: { status: string }) => e.status === 'active')).toHaveLength(1);
      const audits = await t.database.db.sql.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM audit_logs WHERE target_id = $1 AND action = 'manifest.approved'",
        [manifestId],
      );
      expect(audits[0].n).toBe(1);
    }
  });

  test('concurrent approvals of two versions of one agent leave exactly one current manifest', async () => {
    const org = await signUp(t);
    const svcId = 'race-agent';
    const first = await createManifest(t, org, 'active', manifestPayload({ svcId }));
    const second = manifestPayload({ svcId });
    (second.agent as { version: string }).version = '2.0.0';
    const v2 = await t.request('POST', `/api/v1/orgs/${org.orgId}/manifests`, { token: org.adminToken, body: second });
    const base = `/api/v1/orgs/${org.orgId}/manifests`;
    const [approve, suspend] = await Promise.all([
      t.request('POST', `${base}/${v2.body.manifest_id}/approve`, { token: org.adminToken, body: {} }),
      t.request('POST', `${base}/${first.manifestId}/suspend`, { token: org.adminToken, body: { reason: 'race' } }),
    ]);
    expect(approve.status).toBe(200);
    expect([200, 409]).toContain(suspend.status);
    const rows = await t.database.db.sql.query<{ status: string }>(
      "SELECT status FROM manifests WHERE org_id = $1 AND svc_id = $2 AND status IN ('active', 'suspended')",
      [org.orgId, svcId],
    );
    expect(rows).toEqual([{ status: 'active' }]);
    const old = await t.request('GET', `${base}/${first.manifestId}`, { token: org.adminToken });
    expect(old.body.status).toBe('superseded');
  });

  test('of concurrent registrations for one agent id exactly one is pending', async () => {
    const org = await signUp(t);
    const payload = manifestPayload({ svcId: 'burst-agent' });
    const results = await Promise.all(
      Array.from({ length: 6 }, () =>
        t.request('POST', `/api/v1/orgs/${org.orgId}/manifests`, { token: org.adminToken, body: payload }),
      ),
    );
    expect(results.map((r) => r.status).sort()).toEqual([201, 409, 409, 409, 409, 409]);
    for (const r of results.filter((x) => x.status === 409)) expect(r.body.error.code).toBe('CONFLICT');
  });
});
