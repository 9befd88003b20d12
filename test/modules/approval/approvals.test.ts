/**
 * The human approval queue end to end over HTTP: an agent asks through execute, operators list,
 * read and decide, the agent polls and runs the identical action once; denial, expiry (lazy and
 * by the sweep), the org's TTL setting, and who may decide.
 */
import { createHmac } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { LOOPBACK_UPSTREAMS, startTestApp, type TestApp } from '../../support/app.js';
import { addUser, createKey, signUp, type OrgFixture } from '../../support/fixtures.js';
import { actionBody, execute, readyAgent, type AgentFixture } from '../../support/gateway.js';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp(LOOPBACK_UPSTREAMS);
});
afterAll(() => t.close());

const humanInTheLoop = {
  max_actions_per_hour: 100,
  max_actions_per_day: 100,
  require_human_approval: ['billing:refund'],
};

async function ask(_org: OrgFixture, agent: AgentFixture, params: Record<string, unknown> = { amount: 40 }) {
  const asked = await execute(t, agent, actionBody(agent, 'refund', params));
  expect(asked.status).toBe(200);
  expect(asked.body.reasons.map((r: { code: string }) => r.code)).toEqual(['APPROVAL_REQUIRED']);
  return asked.body.approval_id as string;
}

const approvalPath = (org: OrgFixture, id: string) => `/api/v1/orgs/${org.orgId}/approvals/${id}`;
const poll = (agent: AgentFixture, id: string) =>
  t.request('GET', `/api/v1/gateway/approvals/${id}`, { apiKey: agent.key });

describe('the approval lifecycle', () => {
  test('ask → list → read → approve → the agent polls → executes once → a second use is denied', async () => {
    const org = await signUp(t);
    const agent = await readyAgent(t, org, { constraints: humanInTheLoop });
    const approvalId = await ask(org, agent);

    const listed = await t.request('GET', `/api/v1/orgs/${org.orgId}/approvals?status=pending`, {
      token: org.adminToken,
    });
    expect(listed.status).toBe(200);
    expect(listed.body).toMatchObject({ total: 1, pending_count: 1 });
    expect(listed.body.items.map((a: { approval_id: string }) => a.approval_id)).toEqual([approvalId]);

    const one = await t.request('GET', approvalPath(org, approvalId), { token: org.adminToken });
    expect(one.status).toBe(200);
    expect(one.body).toMatchObject({
      approval_id: approvalId,
      status: 'pending',
      svc_id: agent.svcId,
      agent_id: agent.svcId,
      capability: 'billing:refund',
      action: { type: 'billing', tool: 'refund', params: { amount: 40 } },
      action_hash: expect.stringMatching(/^sha256:[0-9a-f]{64}$/),
      agent: { svc_id: agent.svcId, agent_id: agent.svcId, name: expect.any(String) },
      manifest: { manifest_id: agent.manifestId, agent_version: expect.any(String), status: 'active' },
      requested_by: expect.stringMatching(/^key_/),
      decided_by: null,
      decided_at: null,
    });
    expect(one.body.reasons).toEqual([
      { code: 'APPROVAL_REQUIRED', message: expect.stringContaining('billing:refund') },
    ]);
    expect(Date.parse(one.body.expires_at) - Date.parse(one.body.requested_at)).toBe(24 * 3600 * 1000);

    const waiting = await poll(agent, approvalId);
    expect(waiting.status).toBe(200);
    expect(waiting.body).toMatchObject({ approval_id: approvalId, status: 'pending', decided_at: null, reason: null });

    const operator = await addUser(t, org, 'operator');
    const approved = await t.request('POST', `${approvalPath(org, approvalId)}/approve`, {
      token: operator.token,
      body: { notes: 'customer confirmed by phone' },
    });
    expect(approved.status).toBe(200);
    expect(approved.body).toMatchObject({
      status: 'approved',
      decided_by: operator.email,
      notes: 'customer confirmed by phone',
      decided_at: expect.any(String),
    });

    const polled = await poll(agent, approvalId);
    expect(polled.body).toMatchObject({ status: 'approved', decided_at: approved.body.decided_at, reason: null });

    const run = await execute(t, agent, { ...actionBody(agent, 'refund', { amount: 40 }), approval_id: approvalId });
    expect(run.body).toMatchObject({ decision: 'allow', executed: true, approval_id: approvalId });
    const again = await execute(t, agent, { ...actionBody(agent, 'refund', { amount: 40 }), approval_id: approvalId });
    expect(again.body.decision).toBe('deny');
    expect(again.body.reasons[0]).toMatchObject({
      code: 'APPROVAL_REQUIRED',
      message: expect.stringMatching(/already been used/),
    });

    expect((await poll(agent, approvalId)).body.status).toBe('consumed');
    const after = await t.request('GET', `/api/v1/orgs/${org.orgId}/approvals`, { token: org.adminToken });
    expect(after.body).toMatchObject({ total: 1, pending_count: 0 });
    expect(after.body.items[0]).toMatchObject({ status: 'consumed', consumed_at: expect.any(String) });

    // The decision is audited in its transaction.
    const [audit] = await t.database.db.sql.query<{ action: string; actor_label: string; target_id: string }>(
      "SELECT action, actor_label, target_id FROM audit_logs WHERE org_id = $1 AND action LIKE 'approval.%'",
      [org.orgId],
    );
    expect(audit).toEqual({ action: 'approval.approved', actor_label: operator.email, target_id: approvalId });
  });

  test('deny needs a reason, which the agent sees; the action stays refused', async () => {
    const org = await signUp(t);
    const agent = await readyAgent(t, org, { constraints: humanInTheLoop });
    const approvalId = await ask(org, agent);

    const noReason = await t.request('POST', `${approvalPath(org, approvalId)}/deny`, {
      token: org.adminToken,
      body: { reason: '  ' },
    });
    expect(noReason.status).toBe(422);
    expect(noReason.body.error.details.errors).toEqual([{ field: 'reason', message: expect.any(String) }]);

    const denied = await t.request('POST', `${approvalPath(org, approvalId)}/deny`, {
      token: org.adminToken,
      body: { reason: 'refunds above 30 need a ticket' },
    });
    expect(denied.status).toBe(200);
    expect(denied.body).toMatchObject({
      status: 'denied',
      reason: 'refunds above 30 need a ticket',
      decided_by: org.adminEmail,
    });
    expect((await poll(agent, approvalId)).body).toMatchObject({
      status: 'denied',
      reason: 'refunds above 30 need a ticket',
    });

    const tried = await execute(t, agent, { ...actionBody(agent, 'refund', { amount: 40 }), approval_id: approvalId });
    expect(tried.body.decision).toBe('deny');
    expect(tried.body.reasons[0].message).toMatch(/denied/);
  });

  test('a second decision is 409, also when two arrive at once', async () => {
    const org = await signUp(t);
    const agent = await readyAgent(t, org, { constraints: humanInTheLoop });
    const first = await ask(org, agent, { amount: 1 });
    expect(
      (await t.request('POST', `${approvalPath(org, first)}/approve`, { token: org.adminToken, body: {} })).status,
    ).toBe(200);
    for (const [verb, body] of [
      ['approve', {}],
      ['deny', { reason: 'changed my mind' }],
    ] as const) {
      const second = await t.request('POST', `${approvalPath(org, first)}/${verb}`, { token: org.adminToken, body });
      expect(second.status).toBe(409);
      expect(second.body.error).toMatchObject({ code: 'INVALID_STATE_TRANSITION', details: { from: 'approved' } });
    }

    const raced = await ask(org, agent, { amount: 2 });
    const results = await Promise.all([
      t.request('POST', `${approvalPath(org, raced)}/approve`, { token: org.adminToken, body: {} }),
      t.request('POST', `${approvalPath(org, raced)}/deny`, { token: org.adminToken, body: { reason: 'no' } }),
      t.request('POST', `${approvalPath(org, raced)}/approve`, { token: org.adminToken, body: {} }),
    ]);
    expect(results.map((r) => r.status).sort()).toEqual([200, 409, 409]);
    const audits = await t.database.db.sql.query('SELECT id FROM audit_logs WHERE org_id = $1 AND target_id = $2', [
      org.orgId,
      raced,
    ]);
    expect(audits).toHaveLength(1);
  });

  test('list filters by status and svc_id, pages, and validates its parameters', async () => {
    const org = await signUp(t);
    const agent = await readyAgent(t, org, { constraints: humanInTheLoop });
    const ids = [];
    for (let i = 0; i < 3; i++) ids.push(await ask(org, agent, { amount: i }));
    await t.request('POST', `${approvalPath(org, ids[0])}/deny`, { token: org.adminToken, body: { reason: 'no' } });

    const list = (query: string) =>
      t.request('GET', `/api/v1/orgs/${org.orgId}/approvals${query}`, { token: org.adminToken });
    const pending = await list('?status=pending');
    expect(pending.body).toMatchObject({ total: 2, pending_count: 2 });
    expect(pending.body.items.map((a: { approval_id: string }) => a.approval_id)).toEqual([ids[2], ids[1]]);
    expect((await list('?status=denied')).body.items.map((a: { approval_id: string }) => a.approval_id)).toEqual([
      ids[0],
    ]);
    expect((await list(`?svc_id=${agent.svcId}&limit=1&offset=1`)).body).toMatchObject({
      total: 3,
      items: [{ approval_id: ids[1] }],
    });
    expect((await list('?svc_id=someone-else')).body).toMatchObject({ total: 0, items: [], pending_count: 2 });
    const bad = await list('?status=maybe&limit=0');
    expect(bad.status).toBe(422);
    const badLimit = await list('?limit=500');
    expect(badLimit.status).toBe(422);
    expect(badLimit.body.error.details.errors).toEqual([{ field: 'limit', message: expect.any(String) }]);
  });
});

describe('expiry', () => {
  test('a pending approval past its TTL reads as expired and cannot be decided', async () => {
    const org = await signUp(t);
    const agent = await readyAgent(t, org, { constraints: humanInTheLoop });
    const approvalId = await ask(org, agent);
    await t.database.db.sql.query("UPDATE approvals SET expires_at = now() - interval '1 second' WHERE id = $1", [
      approvalId,
    ]);

    // Lazily, on the next read.
    expect((await poll(agent, approvalId)).body.status).toBe('expired');
    const listed = await t.request('GET', `/api/v1/orgs/${org.orgId}/approvals`, { token: org.adminToken });
    expect(listed.body).toMatchObject({ pending_count: 0, items: [{ approval_id: approvalId, status: 'expired' }] });
    const late = await t.request('POST', `${approvalPath(org, approvalId)}/approve`, {
      token: org.adminToken,
      body: {},
    });
    expect(late.status).toBe(409);
    expect(late.body.error.details).toEqual({ from: 'expired', to: 'approved' });
  });

  test('the periodic sweep expires approvals nobody reads', async () => {
    const swept = await startTestApp({ ...LOOPBACK_UPSTREAMS, APPROVAL_SWEEP_SECONDS: '1' }, { db: t.database.db });
    try {
      const org = await signUp(swept);
      const agent = await readyAgent(swept, org, { constraints: humanInTheLoop });
      const approvalId = await ask(org, agent);
      await t.database.db.sql.query("UPDATE approvals SET expires_at = now() - interval '1 second' WHERE id = $1", [
        approvalId,
      ]);
      const status = async () =>
        (
          await t.database.db.sql.query<{ status: string }>('SELECT status FROM approvals WHERE id = $1', [approvalId])
        )[0].status;
      const deadline = Date.now() + 10_000;
      while ((await status()) !== 'expired' && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
      expect(await status()).toBe('expired');
    } finally {
      await swept.app.stop();
    }
  });

  test("the org's approval TTL sets expires_at; it is validated and audited", async () => {
    const org = await signUp(t);
    const agent = await readyAgent(t, org, { constraints: humanInTheLoop });
    const invalid = await t.request('PATCH', `/api/v1/orgs/${org.orgId}`, {
      token: org.adminToken,
      body: { approval_ttl_seconds: 30 },
    });
    expect(invalid.status).toBe(422);
    expect(invalid.body.error.details.errors).toEqual([{ field: 'approval_ttl_seconds', message: expect.any(String) }]);
    const patched = await t.request('PATCH', `/api/v1/orgs/${org.orgId}`, {
      token: org.adminToken,
      body: { approval_ttl_seconds: 600 },
    });
    expect(patched.status).toBe(200);
    expect(patched.body.approval_ttl_seconds).toBe(600);

    const approvalId = await ask(org, agent);
    const one = await t.request('GET', approvalPath(org, approvalId), { token: org.adminToken });
    expect(Date.parse(one.body.expires_at) - Date.parse(one.body.requested_at)).toBe(600_000);
    const [audit] = await t.database.db.sql.query<{
      before: { approval_ttl_seconds: number };
      after: { approval_ttl_seconds: number };
    }>("SELECT before, after FROM audit_logs WHERE org_id = $1 AND action = 'org.updated'", [org.orgId]);
    expect([audit.before.approval_ttl_seconds, audit.after.approval_ttl_seconds]).toEqual([86400, 600]);
  });
});

describe('who may decide', () => {
  test('a key with approvals:write decides; a key limited to the asking agent is refused; viewers are refused', async () => {
    const org = await signUp(t);
    const agent = await readyAgent(t, org, { constraints: humanInTheLoop });
    const first = await ask(org, agent, { amount: 1 });
    const second = await ask(org, agent, { amount: 2 });

    const ownAgentKey = await createKey(t, org, ['approvals:read', 'approvals:write'], { svc_ids: [agent.svcId] });
    const refused = await t.request('POST', `${approvalPath(org, first)}/approve`, {
      apiKey: ownAgentKey.key,
      body: {},
    });
    expect(refused.status).toBe(403);
    expect((await poll(agent, first)).body.status).toBe('pending');

    const viewer = await addUser(t, org, 'viewer');
    expect(
      (await t.request('POST', `${approvalPath(org, first)}/approve`, { token: viewer.token, body: {} })).status,
    ).toBe(403);
    // Viewers may read the queue.
    expect((await t.request('GET', approvalPath(org, first), { token: viewer.token })).status).toBe(200);

    const reviewerKey = await createKey(t, org, ['approvals:write']);
    const approved = await t.request('POST', `${approvalPath(org, second)}/approve`, {
      apiKey: reviewerKey.key,
      body: {},
    });
    expect(approved.status).toBe(200);
    expect(approved.body.decided_by).toBe(reviewerKey.keyId);
  });

  test('agents poll only approvals of their own agents and their own org', async () => {
    const org = await signUp(t);
    const agent = await readyAgent(t, org, { constraints: humanInTheLoop });
    const approvalId = await ask(org, agent);
    const otherAgentKey = await createKey(t, org, ['gateway:execute'], { svc_ids: ['another-agent'] });
    expect(
      (await t.request('GET', `/api/v1/gateway/approvals/${approvalId}`, { apiKey: otherAgentKey.key })).status,
    ).toBe(404);

    const other = await signUp(t);
    const otherOrgAgent = await readyAgent(t, other, { constraints: humanInTheLoop });
    expect((await poll(otherOrgAgent, approvalId)).status).toBe(404);
    expect((await t.request('GET', approvalPath(org, approvalId), { token: other.adminToken })).status).toBe(404);
    // Operators read the queue, not the agent's poll endpoint.
    expect((await t.request('GET', `/api/v1/gateway/approvals/${approvalId}`, { token: org.adminToken })).status).toBe(
      403,
    );
  });
});

describe('webhooks for approvals', () => {
  test('approval.requested and approval.decided reach a subscribed receiver, signed, after a failed first attempt', async () => {
    const hits: { headers: http.IncomingHttpHeaders; body: string }[] = [];
    const receiver = http.createServer((req, res) => {
      let body = '';
      req.on('data', (chunk) => (body += chunk));
      req.on('end', () => {
        hits.push({ headers: req.headers, body });
        // The very first attempt fails: the dispatcher must retry it.
        res.writeHead(hits.length === 1 ? 503 : 204).end();
      });
    });
    await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
    const notified = await startTestApp(
      { ...LOOPBACK_UPSTREAMS, WEBHOOK_POLL_MS: '50', WEBHOOK_RETRY_BASE_MS: '100' },
      { db: t.database.db },
    );
    try {
      const org = await signUp(notified);
      const agent = await readyAgent(notified, org, { constraints: humanInTheLoop });
      const hook = await notified.request('POST', `/api/v1/orgs/${org.orgId}/webhooks`, {
        token: org.adminToken,
        body: {
          url: `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/approvals`,
          events: ['approval.requested', 'approval.decided'],
          allow_private_network: true,
        },
      });
      expect(hook.status).toBe(201);

      const asked = await execute(notified, agent, actionBody(agent, 'refund', { amount: 7 }));
      const approvalId = asked.body.approval_id as string;
      const decided = await notified.request('POST', `/api/v1/orgs/${org.orgId}/approvals/${approvalId}/approve`, {
        token: org.adminToken,
        body: { notes: 'ok' },
      });
      expect(decided.status).toBe(200);

      const deadline = Date.now() + 15_000;
      const delivered = () => hits.filter((h) => h !== hits[0]).map((h) => JSON.parse(h.body).event as string);
      while (
        !(delivered().includes('approval.requested') && delivered().includes('approval.decided')) &&
        Date.now() < deadline
      ) {
        await new Promise((r) => setTimeout(r, 50));
      }
      const events = new Map(hits.slice(1).map((h) => [JSON.parse(h.body).event as string, h]));
      const requested = events.get('approval.requested')!;
      const decision = events.get('approval.decided')!;
      expect(JSON.parse(requested.body)).toMatchObject({
        event: 'approval.requested',
        org_id: org.orgId,
        data: {
          approval_id: approvalId,
          status: 'pending',
          svc_id: agent.svcId,
          capability: 'billing:refund',
          action: { params: { amount: 7 } },
        },
      });
      expect(JSON.parse(decision.body)).toMatchObject({
        event: 'approval.decided',
        data: { approval_id: approvalId, status: 'approved', decided_by: org.adminEmail, notes: 'ok' },
      });
      for (const hit of [requested, decision]) {
        const expected = createHmac('sha256', hook.body.secret)
          .update(`${hit.headers['x-webhook-timestamp']}.${hit.body}`)
          .digest('hex');
        expect(hit.headers['x-webhook-signature']).toBe(`sha256=${expected}`);
      }
      // The failed first attempt was retried under the same delivery id and shows in the deliveries.
      const retried = hits.filter((h) => h.headers['x-webhook-delivery'] === hits[0].headers['x-webhook-delivery']);
      expect(retried).toHaveLength(2);
      const listDeliveries = () =>
        notified.request('GET', `/api/v1/orgs/${org.orgId}/webhooks/${hook.body.webhook_id}/deliveries`, {
          token: org.adminToken,
        });
      let deliveries = await listDeliveries();
      // The receiver answered; the dispatcher records the outcome right after.
      while (deliveries.body.items.some((d: { status: string }) => d.status !== 'delivered') && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 50));
        deliveries = await listDeliveries();
      }
      expect(
        deliveries.body.items.map((d: { status: string; attempts: number }) => [d.status, d.attempts]).sort(),
      ).toEqual([
        ['delivered', 1],
        ['delivered', 2],
      ]);
    } finally {
      await notified.app.stop();
      receiver.close();
    }
  });
});
