/**
 * Policies that see more than one call (docs/decisions/0086-policy-history-and-labels.md): label
 * policies marking decisions, records and the agent's history; history policies reading what the
 * agent did before (the "lethal trifecta": a read of private data, then a send); the content
 * detectors in conditions within the evaluation budget; and what the API refuses.
 */
import { createInterface } from 'node:readline';
import { Readable } from 'node:stream';
import { canonicalHash } from '../../../src/lib/canonical-json.js';
import { verifyExport } from '../../../src/modules/record/record-export.js';
import { startTestApp, type TestApp } from '../../support/app.js';
import { signUp, type OrgFixture } from '../../support/fixtures.js';
import { readyAgent, type AgentFixture } from '../../support/gateway.js';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

async function createPolicy(org: OrgFixture, body: Record<string, unknown>) {
  const created = await t.request('POST', '/api/v1/policies', { token: org.adminToken, body });
  if (created.status !== 201) throw new Error(`policy failed: ${created.status} ${created.text}`);
  return created.body as { policy_id: string; name: string };
}

/** An org whose agent may read files, send email and read billing, each a mock tool. */
async function world() {
  const org = await signUp(t, 'history');
  const agent = await readyAgent(t, org, { capabilities: ['files:read', 'email:send', 'billing:read'] });
  for (const type of ['files', 'email']) {
    const tool = await t.request('POST', `/api/v1/orgs/${org.orgId}/tools`, {
      token: org.adminToken,
      body: { action_type: type, connector: 'mock', config: { response: { ok: true } } },
    });
    expect(tool.status).toBe(201);
  }
  return { org, agent };
}

const call = (agent: AgentFixture, capability: string, params: Record<string, unknown> = {}) => {
  const [type, tool] = capability.split(':');
  return { svc_id: agent.svcId, agent_id: agent.svcId, action: { type, tool, params } };
};
const run = (agent: AgentFixture, capability: string, params?: Record<string, unknown>, mode = 'execute') =>
  t.request('POST', `/api/v1/gateway/${mode}`, { apiKey: agent.key, body: call(agent, capability, params) });
const codes = (body: { reasons: { code: string }[] }) => body.reasons.map((r) => r.code);

/** The trifecta's two policies: reads of files are `private`; no email after a private read within the hour. */
async function trifecta(org: OrgFixture) {
  await createPolicy(org, {
    name: 'private reads',
    effect: 'label',
    labels: ['private'],
    target: { capabilities: ['files:*'] },
  });
  return createPolicy(org, {
    name: 'no email after private data',
    effect: 'deny',
    target: { capabilities: ['email:*'] },
    history_window_seconds: 3600,
    condition: 'history.exists(h, "private" in h.labels)',
    message: 'this agent read private data',
  });
}

describe('the API', () => {
  test('a label policy needs 1 to 10 distinct valid labels; other effects take none', async () => {
    const org = await signUp(t, 'labels');
    const refused = async (body: Record<string, unknown>, field: string) => {
      const response = await t.request('POST', '/api/v1/policies', { token: org.adminToken, body });
      expect(response.status).toBe(422);
      expect(response.body.error.details.errors.map((e: { field: string }) => e.field)).toContain(field);
    };
    await refused({ name: 'a', effect: 'label' }, 'labels');
    await refused({ name: 'a', effect: 'label', labels: [] }, 'labels');
    await refused({ name: 'a', effect: 'label', labels: Array.from({ length: 11 }, (_, i) => `l${i}`) }, 'labels');
    await refused({ name: 'a', effect: 'label', labels: ['Private'] }, 'labels[0]');
    await refused({ name: 'a', effect: 'label', labels: ['ok', 'x'.repeat(41)] }, 'labels[1]');
    await refused({ name: 'a', effect: 'label', labels: ['pii', 'pii'] }, 'labels[1]');
    await refused({ name: 'a', effect: 'deny', labels: ['pii'] }, 'labels');
    const created = await t.request('POST', '/api/v1/policies', {
      token: org.adminToken,
      body: { name: 'pii', effect: 'label', labels: ['pii', 'customer-data'] },
    });
    expect(created.status).toBe(201);
    expect(created.body).toMatchObject({
      effect: 'label',
      labels: ['pii', 'customer-data'],
      history_window_seconds: null,
    });
    const audit = await t.request('GET', `/api/v1/orgs/${org.orgId}/audit-logs?action=policy.created`, {
      token: org.adminToken,
    });
    expect(audit.body.items[0].after).toMatchObject({ labels: ['pii', 'customer-data'], history_window_seconds: null });
  });

  test('history_window_seconds is 1 to 86400, and only a policy with one may read `history`', async () => {
    const org = await signUp(t, 'window');
    for (const window of [0, 86_401, 1.5, '60']) {
      const response = await t.request('POST', '/api/v1/policies', {
        token: org.adminToken,
        body: { name: 'w', effect: 'deny', history_window_seconds: window },
      });
      expect(response.status).toBe(422);
      expect(response.body.error.details.errors[0].field).toBe('history_window_seconds');
    }
    const without = await t.request('POST', '/api/v1/policies', {
      token: org.adminToken,
      body: { name: 'w', effect: 'deny', condition: 'history.size() > 3' },
    });
    expect(without.status).toBe(422);
    expect(without.body.error.details.errors[0]).toMatchObject({ field: 'condition' });
    expect(without.body.error.details.errors[0].message).toMatch(/history/);
    const withWindow = await t.request('POST', '/api/v1/policies', {
      token: org.adminToken,
      body: { name: 'w', effect: 'deny', condition: 'history.size() > 3', history_window_seconds: 60 },
    });
    expect(withWindow.status).toBe(201);
    expect(withWindow.body.history_window_seconds).toBe(60);
  });

  test('the records listing refuses a label that cannot be one', async () => {
    const org = await signUp(t, 'label-filter');
    const response = await t.request('GET', '/api/v1/records?label=NOT%20A%20LABEL', { token: org.adminToken });
    expect(response.status).toBe(422);
    expect(response.body.error.details.errors[0].field).toBe('label');
  });
});

describe('labels', () => {
  test('in the decision (sorted, distinct), the signed record, the listing filter and the export; shadow ones only reported', async () => {
    const { org, agent } = await world();
    await createPolicy(org, {
      name: 'b',
      effect: 'label',
      labels: ['private', 'files'],
      target: { capabilities: ['files:*'] },
    });
    await createPolicy(org, {
      name: 'a',
      effect: 'label',
      labels: ['private'],
      condition: 'params.path.startsWith("/home")',
    });
    await createPolicy(org, { name: 'c', effect: 'label', labels: ['tried'], mode: 'shadow' });

    const read = await run(agent, 'files:read', { path: '/home/me/notes' });
    expect(read.status).toBe(200);
    expect(read.body).toMatchObject({ decision: 'allow', executed: true, labels: ['files', 'private'] });
    expect(read.body.policies.map((p: { name: string; mode: string }) => `${p.name}:${p.mode}`).sort()).toEqual([
      'a:enforce',
      'b:enforce',
      'c:shadow',
    ]);
    const evaluated = await run(agent, 'files:read', { path: '/tmp/x' }, 'evaluate');
    expect(evaluated.body.labels).toEqual(['files', 'private']);
    const plain = await run(agent, 'billing:read', { path: '/tmp' });
    expect(plain.body.labels).toEqual([]);

    const record = await t.request('GET', `/api/v1/records/${read.body.interaction_id}`, { token: org.adminToken });
    expect(record.body.labels).toEqual(['files', 'private']);
    const verified = await t.request('GET', `/api/v1/records/${read.body.interaction_id}/verify`, {
      token: org.adminToken,
    });
    expect(verified.body.valid).toBe(true);
    const unlabelled = await t.request('GET', `/api/v1/records/${plain.body.interaction_id}`, {
      token: org.adminToken,
    });
    expect(unlabelled.body.labels).toEqual([]);

    const listed = await t.request('GET', '/api/v1/records?label=private', { token: org.adminToken });
    expect(listed.body.items.map((r: { record_id: string }) => r.record_id)).toEqual([read.body.interaction_id]);
    const none = await t.request('GET', '/api/v1/records?label=tried', { token: org.adminToken });
    expect(none.body.items).toEqual([]);

    // Offline, the export's bodies carry the labels (absent where there are none) and verify.
    const exported = await t.request('GET', '/api/v1/records/export', { token: org.adminToken });
    expect(exported.status).toBe(200);
    const lines = exported.text.trim().split('\n');
    const bodies = lines.slice(1).map((line) => JSON.parse(line).body);
    expect(bodies.map((body: { labels?: string[] }) => body.labels ?? null)).toEqual([['files', 'private'], null]);
    expect(await verifyExport(createInterface({ input: Readable.from(lines.join('\n')) }))).toMatchObject({
      ok: true,
      count: 2,
    });
  });
});

describe('history', () => {
  test('the lethal trifecta: a send is allowed until the agent reads private data, then denied', async () => {
    const { org, agent } = await world();
    const guard = await trifecta(org);
    const before = await run(agent, 'email:send', { to: 'a@example.com' });
    expect(before.body).toMatchObject({ decision: 'allow', executed: true });
    const read = await run(agent, 'files:read', { path: '/secret' });
    expect(read.body).toMatchObject({ decision: 'allow', labels: ['private'] });
    // Evaluate reads the same history and writes nothing.
    const tried = await run(agent, 'email:send', { to: 'b@example.com' }, 'evaluate');
    expect(codes(tried.body)).toEqual(['POLICY_DENIED']);
    const after = await run(agent, 'email:send', { to: 'b@example.com' });
    expect(after.body).toMatchObject({ decision: 'deny', executed: false });
    expect(after.body.reasons[0]).toMatchObject({
      code: 'POLICY_DENIED',
      message: 'Denied by policy "no email after private data": this agent read private data',
      details: { policy_id: guard.policy_id },
    });
    // Another agent of the org has its own history.
    const other = await readyAgent(t, org, { capabilities: ['email:send'] });
    expect((await run(other, 'email:send')).body).toMatchObject({ decision: 'allow' });
  });

  test('each process keeps the history it read and reads only what came after: calls alternating between two see every entry', async () => {
    const { org, agent } = await world();
    const other = await startTestApp({}, { db: t.database.db });
    try {
      await createPolicy(org, {
        name: 'count',
        effect: 'label',
        labels: ['seen'],
        target: { capabilities: ['email:*'] },
        history_window_seconds: 3600,
        // Every earlier entry, the one the other process wrote just before too, newest last.
        condition:
          'history.size() == int(params.n) && (history.size() < 2 || history[history.size() - 1].at >= history[history.size() - 2].at)',
      });
      const labelled: unknown[] = [];
      for (let n = 0; n < 8; n++) {
        const app = n % 2 === 0 ? t : other;
        const answer = await app.request('POST', '/api/v1/gateway/execute', {
          apiKey: agent.key,
          body: call(agent, 'email:send', { n }),
        });
        labelled.push(answer.body.labels);
      }
      expect(labelled).toEqual(Array.from({ length: 8 }, () => ['seen']));
    } finally {
      await other.close();
    }
  });

  test('entries carry every field, oldest first; denials count too', async () => {
    const { org, agent } = await world();
    await createPolicy(org, {
      name: 'mark',
      effect: 'label',
      labels: ['seen'],
      target: { capabilities: ['billing:*'] },
    });
    await createPolicy(org, {
      name: 'third billing read',
      effect: 'deny',
      target: { capabilities: ['billing:read'] },
      history_window_seconds: 600,
      condition:
        'history.filter(h, h.capability == "billing:read").size() >= 2 && ' +
        'history[0].type == "billing" && history[0].tool == "read" && history[0].decision == "allow" && ' +
        'history[0].executed && history[0].labels == ["seen"] && history[0].at <= request.time',
    });
    expect((await run(agent, 'billing:read')).body.decision).toBe('allow');
    expect((await run(agent, 'billing:read')).body.decision).toBe('allow');
    const third = await run(agent, 'billing:read');
    expect(codes(third.body)).toEqual(['POLICY_DENIED']);
    expect(
      third.body.policies.find((p: { name: string }) => p.name === 'third billing read').condition_error,
    ).toBeNull();
    const rows = await t.database.db.sql.query<{ decision: string; executed: boolean; labels: string[] }>(
      'SELECT decision, executed, labels FROM agent_history WHERE org_id = $1::uuid AND svc_id = $2 ORDER BY at, id',
      [org.orgId, agent.svcId],
    );
    expect(rows).toEqual([
      { decision: 'allow', executed: true, labels: ['seen'] },
      { decision: 'allow', executed: true, labels: ['seen'] },
      { decision: 'deny', executed: false, labels: ['seen'] },
    ]);
  });

  test('agents no history policy targets keep no history', async () => {
    const { org, agent } = await world();
    const other = await readyAgent(t, org, { capabilities: ['email:send'] });
    await createPolicy(org, {
      name: 'only the other',
      effect: 'deny',
      target: { svc_ids: [other.svcId] },
      history_window_seconds: 60,
      condition: 'history.size() > 100',
    });
    expect((await run(agent, 'billing:read')).body.decision).toBe('allow');
    expect((await run(other, 'email:send')).body.decision).toBe('allow');
    const rows = await t.database.db.sql.query<{ svc_id: string }>(
      'SELECT svc_id FROM agent_history WHERE org_id = $1::uuid',
      [org.orgId],
    );
    expect(rows.map((row) => row.svc_id)).toEqual([other.svcId]);
  });

  test('1000 entries in the window (of more) stay within the evaluation budget; older ones are out of the window', async () => {
    const { org, agent } = await world();
    await createPolicy(org, {
      name: 'count',
      effect: 'deny',
      target: { capabilities: ['email:*'] },
      history_window_seconds: 3600,
      condition:
        'history.size() == 1000 && history.exists(h, "private" in h.labels) && history.all(h, h.at > request.time - duration("2h"))',
    });
    // 50 entries from two hours ago, then 1,200 in the last half hour, one of them private: written
    // oldest first, as the agent's lock orders them.
    for (const [prefix, from, count, labels] of [
      ['old_', "interval '2 hours'", 50, "ARRAY['private']"],
      ['int_', "interval '0 hours'", 1200, "CASE WHEN n = 5 THEN ARRAY['private'] ELSE ARRAY['public', 'files'] END"],
    ] as const) {
      await t.database.db.sql.query(
        `INSERT INTO agent_history (org_id, svc_id, id, at, action_type, tool, capability, decision, executed, labels)
         SELECT $1::uuid, $2, '${prefix}' || n, now() - ${from} - make_interval(secs => n), 'files', 'read', 'files:read',
                'allow', true, ${labels}
         FROM generate_series(${count}, 1, -1) AS n`,
        [org.orgId, agent.svcId],
      );
    }
    const denied = await run(agent, 'email:send');
    expect(codes(denied.body)).toEqual(['POLICY_DENIED']);
    // Matched by its condition, not by a failure of it (fail closed would match too).
    expect(denied.body.policies[0].condition_error).toBeNull();
  });
});

describe('content in conditions', () => {
  test('secrets, pii and hidden_text over params; 1 MiB of params stays within the budget', async () => {
    const { org, agent } = await world();
    await createPolicy(org, {
      name: 'no secrets out',
      effect: 'deny',
      target: { capabilities: ['email:*'] },
      condition: 'secrets(params).size() > 0 || "payment_card" in pii(params) || hidden_text(params).size() > 0',
    });
    await createPolicy(org, {
      name: 'and again',
      effect: 'label',
      labels: ['checked'],
      target: { capabilities: ['email:*'] },
      condition: 'secrets(params).size() == 0 && pii(params).size() >= 0',
    });
    const key = 'AKIA' + 'IOSFODNN7EXAMPLE';
    const withKey = await run(agent, 'email:send', { body: `here: ${key}` });
    expect(codes(withKey.body)).toEqual(['POLICY_DENIED']);
    expect(withKey.body.policies[0].condition_error).toBeNull();
    const card = await run(agent, 'email:send', { body: 'card 4111 1111 1111 1111' });
    expect(codes(card.body)).toEqual(['POLICY_DENIED']);
    const notCard = await run(agent, 'email:send', { body: 'card 4111 1111 1111 1112' });
    expect(notCard.body).toMatchObject({ decision: 'allow', labels: ['checked'] });
    const hidden = await run(agent, 'email:send', { body: 'hello\u200bworld' });
    expect(codes(hidden.body)).toEqual(['POLICY_DENIED']);

    // About 1 MiB of prose: three detectors, two policies, within the budget that grows with it.
    const prose = 'The quarterly report is attached; please review the figures before Friday. '.repeat(13_500);
    const large = await run(agent, 'email:send', { body: prose });
    expect(large.status).toBe(200);
    expect(large.body).toMatchObject({ decision: 'allow', labels: ['checked'] });
    expect(large.body.policies.map((p: { condition_error: string | null }) => p.condition_error)).toEqual([null]);
    const largeWithKey = await run(agent, 'email:send', { body: `${prose} ${key}` });
    expect(codes(largeWithKey.body)).toEqual(['POLICY_DENIED']);
    expect(largeWithKey.body.policies[0].condition_error).toBeNull();
  });

  test('scanning the same large params again and again runs out of budget, and fails closed', async () => {
    const { org, agent } = await world();
    await createPolicy(org, {
      name: 'scan in a loop',
      effect: 'deny',
      target: { capabilities: ['email:*'] },
      condition: '[1,2,3,4,5,6,7,8,9,10].all(i, secrets(params.body).size() == 0) == false',
    });
    const prose = 'Nothing secret here, only words and more words. '.repeat(20_000);
    const denied = await run(agent, 'email:send', { body: prose });
    expect(codes(denied.body)).toEqual(['POLICY_DENIED']);
    expect(denied.body.policies[0].condition_error).toMatch(/evaluation budget exceeded/);
  });
});

describe('policies on the result', () => {
  const leaky = {
    note: 'Call Alice at alice@example.com about card 4111 1111 1111 1111',
    token: `AKIA${'IOSFODNN7EXAMPLE'}`,
    bio: 'hello\u200bworld',
  };
  /** An org whose `crm` tool answers `leaky`. */
  async function leakyWorld() {
    const org = await signUp(t, 'result');
    const agent = await readyAgent(t, org, { capabilities: ['crm:read', 'billing:read'] });
    const tool = await t.request('POST', `/api/v1/orgs/${org.orgId}/tools`, {
      token: org.adminToken,
      body: { action_type: 'crm', connector: 'mock', config: { response: leaky } },
    });
    expect(tool.status).toBe(201);
    return { org, agent };
  }

  test('redact, detectors and `result` are checked: 422 for what cannot apply', async () => {
    const org = await signUp(t, 'redact-api');
    const refused = async (body: Record<string, unknown>, field: string) => {
      const response = await t.request('POST', '/api/v1/policies', { token: org.adminToken, body });
      expect(response.status).toBe(422);
      expect(response.body.error.details.errors.map((e: { field: string }) => e.field)).toContain(field);
    };
    await refused({ name: 'r', effect: 'redact' }, 'detectors');
    await refused({ name: 'r', effect: 'redact', detectors: [] }, 'detectors');
    await refused({ name: 'r', effect: 'redact', detectors: ['pii', 'passwords'] }, 'detectors[1]');
    await refused({ name: 'r', effect: 'redact', detectors: ['pii', 'pii'] }, 'detectors[1]');
    await refused({ name: 'r', effect: 'deny', detectors: ['pii'] }, 'detectors');
    // Only policies on the result may read it.
    await refused({ name: 'r', effect: 'deny', condition: 'secrets(result).size() > 0' }, 'condition');
    const created = await t.request('POST', '/api/v1/policies', {
      token: org.adminToken,
      body: { name: 'r', effect: 'deny_result', condition: 'secrets(result).size() > 0' },
    });
    expect(created.status).toBe(201);
    expect(created.body).toMatchObject({ effect: 'deny_result', detectors: null });
  });

  test('redact: the agent gets the redacted result and what was replaced; the record signs both hashes', async () => {
    const { org, agent } = await leakyWorld();
    await createPolicy(org, {
      name: 'scrub',
      effect: 'redact',
      detectors: ['secrets', 'pii'],
      target: { capabilities: ['crm:*'] },
    });
    await createPolicy(org, {
      name: 'unseen',
      effect: 'redact',
      detectors: ['hidden_text'],
      condition: 'result.bio.size() > 100',
    });
    await createPolicy(org, { name: 'try', effect: 'deny_result', mode: 'shadow' });
    const read = await run(agent, 'crm:read');
    expect(read.body).toMatchObject({ decision: 'allow', executed: true, reasons: [] });
    const redacted = {
      note: 'Call Alice at [REDACTED:email] about card [REDACTED:payment_card]',
      token: '[REDACTED:aws_access_key]',
      bio: 'hello\u200bworld',
    };
    expect(read.body.result).toEqual({ success: true, data: redacted, error: null });
    expect(read.body.redactions).toEqual([
      { kind: 'aws_access_key', count: 1 },
      { kind: 'email', count: 1 },
      { kind: 'payment_card', count: 1 },
    ]);
    // The policies on the result follow the others, shadow ones reported.
    expect(read.body.policies.map((p: { name: string; mode: string }) => `${p.name}:${p.mode}`)).toEqual([
      'scrub:enforce',
      'try:shadow',
    ]);
    const record = await t.request('GET', `/api/v1/records/${read.body.interaction_id}`, { token: org.adminToken });
    expect(record.body).toMatchObject({
      status: 'approved',
      executed: true,
      result_hash: canonicalHash({ success: true, data: redacted }),
      original_result_hash: canonicalHash({ success: true, data: leaky }),
      redactions: read.body.redactions,
    });
    const verified = await t.request('GET', `/api/v1/records/${read.body.interaction_id}/verify`, {
      token: org.adminToken,
    });
    expect(verified.body.valid).toBe(true);
    // A call no result policy matches: no redactions, no original hash.
    const plain = await run(agent, 'billing:read');
    expect(plain.body.redactions).toEqual([]);
    const plainRecord = await t.request('GET', `/api/v1/records/${plain.body.interaction_id}`, {
      token: org.adminToken,
    });
    expect(plainRecord.body).toMatchObject({ original_result_hash: null, redactions: null });
    const exported = await t.request('GET', '/api/v1/records/export', { token: org.adminToken });
    const lines = exported.text.trim().split('\n');
    expect(JSON.parse(lines[1]).body).toMatchObject({ redactions: read.body.redactions });
    expect(await verifyExport(createInterface({ input: Readable.from(lines.join('\n')) }))).toMatchObject({ ok: true });
    // Evaluate has no result: policies on it are not asked.
    const evaluated = await run(agent, 'crm:read', {}, 'evaluate');
    expect(evaluated.body.policies).toEqual([]);
  });

  test('hidden text in a result is redacted when the condition over the result says so', async () => {
    const { org, agent } = await leakyWorld();
    await createPolicy(org, {
      name: 'hidden',
      effect: 'redact',
      detectors: ['hidden_text'],
      condition: 'hidden_text(result).size() > 0',
    });
    const read = await run(agent, 'crm:read');
    expect(read.body.result.data.bio).toBe('hello[REDACTED:zero_width]world');
    expect(read.body.redactions).toEqual([{ kind: 'zero_width', count: 1 }]);
  });

  test('deny_result: the tool ran, the agent gets a denial naming the policy, the record keeps that it ran', async () => {
    const { org, agent } = await leakyWorld();
    const policy = await createPolicy(org, {
      name: 'no keys back',
      effect: 'deny_result',
      condition: '"aws_access_key" in secrets(result)',
      message: 'the CRM returned a credential',
    });
    const read = await run(agent, 'crm:read');
    expect(read.body).toMatchObject({ decision: 'deny', executed: true, result: null, redactions: [] });
    expect(read.body.reasons).toEqual([
      {
        code: 'RESULT_DENIED',
        message: 'The tool ran, and its result is withheld by policy "no keys back": the CRM returned a credential',
        details: { policy_id: policy.policy_id, name: 'no keys back', version: 1 },
      },
    ]);
    const record = await t.request('GET', `/api/v1/records/${read.body.interaction_id}`, { token: org.adminToken });
    expect(record.body).toMatchObject({
      status: 'denied',
      executed: true,
      result_hash: canonicalHash({ success: true, data: leaky }),
      reasons: [expect.objectContaining({ code: 'RESULT_DENIED' })],
    });
    // A result without a key passes.
    expect((await run(agent, 'billing:read')).body).toMatchObject({ decision: 'allow', executed: true });
  });
});
