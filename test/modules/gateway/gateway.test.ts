import { openDatabase } from '../../../src/db/database.js';
import { startTestApp, type TestApp } from '../../support/app.js';
import { backend } from '../../support/database.js';
import { allRecords, expectOneChain } from '../../support/records.js';
import { createKey, createManifest, manifestPayload, signUp, type OrgFixture } from '../../support/fixtures.js';
import { type AgentFixture, actionBody, evaluate, execute, readyAgent } from '../../support/gateway.js';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

const codes = (body: { reasons: { code: string }[] }) => body.reasons.map((r) => r.code);
const recordCount = async (orgId: string) =>
  (
    await t.database.db.sql.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM interaction_records WHERE org_id = $1',
      [orgId],
    )
  )[0].n;

describe('decisions and reasons', () => {
  test('an allowed action executes through the tool and is recorded', async () => {
    const org = await signUp(t);
    const agent = await readyAgent(t, org);
    const response = await execute(t, agent);
    expect(response.status).toBe(200);
    expect(response.body).toEqual({
      interaction_id: expect.stringMatching(/^int_/),
      decision: 'allow',
      executed: true,
      result: { success: true, data: { ok: true }, error: null },
      reasons: [],
      approval_id: null,
      policies: [],
      labels: [],
      redactions: [],
    });
    const record = await t.request('GET', `/api/v1/records/${response.body.interaction_id}`, { token: org.adminToken });
    expect(record.status).toBe(200);
    expect(record.body).toMatchObject({
      status: 'approved',
      decision: 'allow',
      executed: true,
      capability: 'billing:read',
    });
    expect(record.body.action.params).toEqual({ invoice: 'inv-1' });
  });

  test.each([
    [
      'MANIFEST_NOT_FOUND',
      async () => {
        const org = await signUp(t);
        const agent = await readyAgent(t, org);
        return { agent, body: { ...actionBody(agent), svc_id: 'unknown-agent', agent_id: 'unknown-agent' } };
      },
    ],
    [
      'AGENT_MISMATCH',
      async () => {
        const org = await signUp(t);
        const agent = await readyAgent(t, org);
        return { agent, body: { ...actionBody(agent), agent_id: 'someone-else' } };
      },
    ],
    [
      'CAPABILITY_NOT_APPROVED',
      async () => {
        const org = await signUp(t);
        const agent = await readyAgent(t, org);
        return { agent, body: actionBody(agent, 'delete') };
      },
    ],
    [
      'TOOL_NOT_CONFIGURED',
      async () => {
        const org = await signUp(t);
        const agent = await readyAgent(t, org, { tool: false });
        return { agent, body: actionBody(agent) };
      },
    ],
  ])('%s is the single reason of a denial, recorded as denied', async (code, setup) => {
    const { agent, body } = await setup();
    const response = await execute(t, agent, body);
    expect(response.status).toBe(200);
    expect(response.body).toMatchObject({ decision: 'deny', executed: false, result: null });
    expect(codes(response.body)).toEqual([code]);
    expect(response.body.reasons[0].message.length).toBeGreaterThan(10);
    const record = await t.request('GET', `/api/v1/records/${response.body.interaction_id}`, { apiKey: agent.key });
    // The execute key has no logs:read: the record is checked with an admin-less path below.
    expect([200, 403]).toContain(record.status);
  });

  test('SVC_NOT_ALLOWED_FOR_KEY for a key limited to other agents', async () => {
    const org = await signUp(t);
    const agent = await readyAgent(t, org);
    const { key } = await createKey(t, org, ['gateway:execute'], { svc_ids: ['another-agent'] });
    const response = await t.request('POST', '/api/v1/gateway/execute', { apiKey: key, body: actionBody(agent) });
    expect(codes(response.body)).toEqual(['SVC_NOT_ALLOWED_FOR_KEY']);
  });

  test('MANIFEST_NOT_ACTIVE for a suspended agent, and a manifest of another org is not found', async () => {
    const org = await signUp(t);
    const agent = await readyAgent(t, org);
    await t.request('POST', `/api/v1/orgs/${org.orgId}/manifests/${agent.manifestId}/suspend`, {
      token: org.adminToken,
      body: { reason: 'incident' },
    });
    expect(codes((await execute(t, agent)).body)).toEqual(['MANIFEST_NOT_ACTIVE']);

    const other = await signUp(t);
    const { key } = await createKey(t, other, ['gateway:execute']);
    const foreign = await t.request('POST', '/api/v1/gateway/execute', { apiKey: key, body: actionBody(agent) });
    // The other org has no tool either; what matters is that org A's manifest is not found.
    expect(codes(foreign.body)).toEqual(['MANIFEST_NOT_FOUND', 'TOOL_NOT_CONFIGURED']);
    const unknown = await t.request('POST', '/api/v1/gateway/execute', {
      apiKey: key,
      body: { ...actionBody(agent), svc_id: 'never-registered', agent_id: 'never-registered' },
    });
    expect(foreign.body.reasons).toEqual(
      unknown.body.reasons.map((r: { message: string }) => ({ ...r, message: expect.any(String) })),
    );
  });

  test('every failing check adds its reason, in the documented order', async () => {
    const org = await signUp(t);
    const agent = await readyAgent(t, org, { tool: false });
    const { key } = await createKey(t, org, ['gateway:execute'], { svc_ids: ['elsewhere'] });
    const response = await t.request('POST', '/api/v1/gateway/execute', {
      apiKey: key,
      body: {
        ...actionBody(agent, 'delete'),
        agent_id: 'wrong-agent',
        action: { type: 'crm', tool: 'delete', params: {} },
      },
    });
    expect(codes(response.body)).toEqual([
      'SVC_NOT_ALLOWED_FOR_KEY',
      'AGENT_MISMATCH',
      'CAPABILITY_NOT_APPROVED',
      'TOOL_NOT_CONFIGURED',
    ]);
  });

  test.each([
    [{ svc_id: 'x', agent_id: 'x' }, 'action'],
    [{ svc_id: 'x', agent_id: 'x', action: { type: 'billing' } }, 'action.tool'],
    [{ svc_id: 'x', agent_id: 'x', action: { type: 'billing', tool: 'read', extra: 1 } }, 'action.extra'],
    [{ svc_id: 'x', agent_id: 'x', action: { type: 'Billing', tool: 'read' } }, 'action.type'],
    [{ svc_id: 'x', agent_id: 'x', action: { type: 'billing', tool: 'read', params: [1] } }, 'action.params'],
    [{ svc_id: 7, agent_id: 'x', action: { type: 'billing', tool: 'read' } }, 'svc_id'],
  ])('a bad request body %j is 422 naming %s, never a 500', async (body, field) => {
    const org = await signUp(t);
    const agent = await readyAgent(t, org);
    const response = await execute(t, agent, body);
    expect(response.status).toBe(422);
    expect(response.body.error.code).toBe('VALIDATION_ERROR');
    expect(response.body.error.details.errors.map((e: { field: string }) => e.field)).toContain(field);
  });
});

describe('one decision, two channels', () => {
  const selection =
    '{ approval_id decision executed interaction_id labels policies { condition_error effect mode name policy_id rate_limit_exceeded version } ' +
    'reasons { code details message } redactions { count kind } result { data error { code message } success } }';
  const viaGraphQL = async (agent: { svcId: string; key: string }, mode: 'execute' | 'evaluate', tool: string) => {
    const response = await t.graphql(
      `mutation($svc: String!, $action: GatewayActionInput!) { gateway_${mode}(svc_id: $svc, agent_id: $svc, action: $action) ${selection} }`,
      { svc: agent.svcId, action: { type: 'billing', tool, params: { invoice: 'inv-1' } } },
      { apiKey: agent.key },
    );
    expect(response.body.errors).toBeUndefined();
    return response.body.data[`gateway_${mode}`];
  };
  const withoutId = ({ interaction_id, ...rest }: Record<string, unknown>) => ({
    ...rest,
    has_id: typeof interaction_id === 'string',
  });

  test.each([
    ['execute', 'read'],
    ['execute', 'delete'],
    ['evaluate', 'read'],
    ['evaluate', 'delete'],
  ] as const)(
    'REST %s of billing:%s answers exactly what the GraphQL field does, key order included',
    async (mode, tool) => {
      const org = await signUp(t);
      const agent = await readyAgent(t, org);
      // A matching policy, so the decision's `policies` is compared with content.
      const policy = await t.request('POST', '/api/v1/policies', {
        token: org.adminToken,
        body: { name: 'watch', effect: 'deny', mode: 'shadow' },
      });
      expect(policy.status).toBe(201);
      const rest = await t.request('POST', `/api/v1/gateway/${mode}`, {
        apiKey: agent.key,
        body: actionBody(agent, tool),
      });
      expect(rest.body.policies).toHaveLength(1);
      expect(rest.status).toBe(200);
      const graphql = await viaGraphQL(agent, mode, tool);
      expect(withoutId(rest.body)).toEqual(withoutId(graphql));
      expect(Object.keys(rest.body)).toEqual(Object.keys(graphql));
      if (rest.body.result) expect(Object.keys(rest.body.result)).toEqual(Object.keys(graphql.result));
      for (const [i, reason] of rest.body.reasons.entries())
        expect(Object.keys(reason)).toEqual(Object.keys(graphql.reasons[i]));
      expect(Object.keys(rest.body.policies[0])).toEqual(Object.keys(graphql.policies[0]));
    },
  );
});

describe('budgets', () => {
  test('the daily budget denies with BUDGET_EXCEEDED and details; denied actions do not count', async () => {
    const org = await signUp(t);
    const agent = await readyAgent(t, org, { constraints: { max_actions_per_hour: 3, max_actions_per_day: 3 } });
    // A denied action first: it must not use budget.
    expect(codes((await execute(t, agent, actionBody(agent, 'delete'))).body)).toEqual(['CAPABILITY_NOT_APPROVED']);
    for (let i = 0; i < 3; i++) expect((await execute(t, agent)).body.decision).toBe('allow');
    // Hourly and daily are both 3: the daily check comes first.
    const over = await execute(t, agent);
    expect(over.status).toBe(200);
    expect(over.body.reasons).toEqual([
      {
        code: 'BUDGET_EXCEEDED',
        message: expect.stringContaining('3'),
        details: { limit: 3, current: 3, period: '1d', resets_at: expect.stringMatching(/T00:00:00\.000Z$/) },
      },
    ]);
  });

  test('the hourly limit answers 429 POLICY_VIOLATION with rate-limit headers, and the denial is recorded', async () => {
    const org = await signUp(t);
    const agent = await readyAgent(t, org, { constraints: { max_actions_per_hour: 2, max_actions_per_day: 100 } });
    const first = await execute(t, agent);
    expect(first.headers.get('x-ratelimit-limit')).toBe('2');
    expect(first.headers.get('x-ratelimit-remaining')).toBe('1');
    await execute(t, agent);
    const before = await recordCount(org.orgId);
    const limited = await execute(t, agent);
    expect(limited.status).toBe(429);
    expect(limited.body.error).toEqual({
      code: 'POLICY_VIOLATION',
      message: expect.any(String),
      details: { limit: 2, period: '1h', current: 2 },
    });
    expect(limited.headers.get('x-ratelimit-remaining')).toBe('0');
    expect(Number(limited.headers.get('x-ratelimit-reset')) % 3600).toBe(0);
    expect(Number(limited.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(await recordCount(org.orgId)).toBe(before + 1);
    const list = await t.request('GET', '/api/v1/records?status=denied', { token: org.adminToken });
    expect(list.body.items[0].reasons[0].code).toBe('POLICY_VIOLATION');
    // The refused action was counted against the day first and given back in the same statement.
    const [day] = await t.database.db.sql.query<{ count: number }>(
      'SELECT count FROM rate_counters WHERE bucket = $1',
      [`budget:day:${org.orgId}:${agent.svcId}`],
    );
    expect(day.count).toBe(2);
  });

  test('50 concurrent executes against a budget of 20 allow exactly 20', async () => {
    const org = await signUp(t);
    const agent = await readyAgent(t, org, { constraints: { max_actions_per_hour: 20, max_actions_per_day: 1000 } });
    const results = await Promise.all(Array.from({ length: 50 }, () => execute(t, agent)));
    expect(results.filter((r) => r.status === 200 && r.body.decision === 'allow')).toHaveLength(20);
    expect(results.filter((r) => r.status === 429)).toHaveLength(30);
    expect(await recordCount(org.orgId)).toBe(50);
  });

  test('two gateway instances with their own connections on one database share the budget exactly', async () => {
    const org = await signUp(t);
    const agent = await readyAgent(t, org, { constraints: { max_actions_per_hour: 25, max_actions_per_day: 25 } });
    const secondDb =
      backend === 'postgresql' ? await openDatabase({ databaseUrl: t.database.url!, poolSize: 10 }) : t.database.db;
    const second = await startTestApp({}, { db: secondDb });
    try {
      const results = await Promise.all(Array.from({ length: 50 }, (_, i) => execute(i % 2 ? second : t, agent)));
      const allowed = results.filter((r) => r.body.decision === 'allow');
      expect(allowed).toHaveLength(25);
      expect(results.filter((r) => r.body.reasons?.[0]?.code === 'BUDGET_EXCEEDED')).toHaveLength(25);
    } finally {
      await second.app.stop();
      if (backend === 'postgresql') await secondDb.close();
    }
  });

  test('two instances appending to one org at once keep one chain: each appends on the head it knows, and again when the other moved it', async () => {
    const org = await signUp(t);
    const agent = await readyAgent(t, org, { constraints: { max_actions_per_hour: 1000, max_actions_per_day: 1000 } });
    const secondDb =
      backend === 'postgresql' ? await openDatabase({ databaseUrl: t.database.url!, poolSize: 10 }) : t.database.db;
    const second = await startTestApp({}, { db: secondDb });
    try {
      // In waves, so that each instance's known head is stale when its next batch is signed.
      for (let wave = 0; wave < 6; wave++) {
        const results = await Promise.all(Array.from({ length: 30 }, (_, i) => execute(i % 2 ? second : t, agent)));
        for (const result of results) expect(result.body.decision).toBe('allow');
      }
      const records = await allRecords(t, org);
      expect(records).toHaveLength(180);
      expectOneChain(records);
      for (const record of [records[0], records[90], records[179]]) {
        const verified = await t.request('GET', `/api/v1/records/${record.record_id}/verify`, {
          token: org.adminToken,
        });
        expect(verified.body).toMatchObject({ valid: true });
      }
    } finally {
      await second.app.stop();
      if (backend === 'postgresql') await secondDb.close();
    }
  });

  test('evaluate decides the same way but counts, executes and records nothing', async () => {
    const org = await signUp(t);
    const agent = await readyAgent(t, org, { constraints: { max_actions_per_hour: 1, max_actions_per_day: 1 } });
    for (let i = 0; i < 3; i++) {
      const dry = await evaluate(t, agent);
      expect(dry.status).toBe(200);
      expect(dry.body).toMatchObject({ decision: 'allow', executed: false, result: null, reasons: [] });
    }
    expect(await recordCount(org.orgId)).toBe(0);
    expect((await execute(t, agent)).body.decision).toBe('allow');
    const after = await evaluate(t, agent);
    expect(codes(after.body)).toEqual(['BUDGET_EXCEEDED']);
    const denied = await evaluate(t, agent, actionBody(agent, 'delete'));
    expect(codes(denied.body)).toContain('CAPABILITY_NOT_APPROVED');
  });

  test('concurrent evaluates of several agents each read the counts of their own agent', async () => {
    // Evaluates in flight together share one read of the counters; each must still get its agent's:
    // the agent whose hour is used up is refused, the others are not.
    const org = await signUp(t);
    const agents: { agent: AgentFixture; reasons: string[] }[] = [];
    for (const used of [0, 2, 1]) {
      const agent = await readyAgent(t, org, { constraints: { max_actions_per_hour: 2, max_actions_per_day: 10 } });
      for (let i = 0; i < used; i++) expect((await execute(t, agent)).body.decision).toBe('allow');
      agents.push({ agent, reasons: used === 2 ? ['POLICY_VIOLATION'] : [] });
    }
    // Each agent's configuration cached first: the evaluates then reach the counter reads interleaved.
    for (const { agent } of agents) await evaluate(t, agent);
    const dry = await Promise.all(Array.from({ length: 60 }, (_, i) => evaluate(t, agents[i % 3].agent)));
    expect(dry.map((response) => codes(response.body))).toEqual(dry.map((_, i) => agents[i % 3].reasons));
  });

  test('operators may evaluate with a bearer token, never execute', async () => {
    const org = await signUp(t);
    const agent = await readyAgent(t, org);
    const dry = await t.request('POST', '/api/v1/gateway/evaluate', { token: org.adminToken, body: actionBody(agent) });
    expect(dry.status).toBe(200);
    expect(dry.body.decision).toBe('allow');
    const run = await t.request('POST', '/api/v1/gateway/execute', { token: org.adminToken, body: actionBody(agent) });
    expect(run.status).toBe(403);
  });
});

describe('human approval', () => {
  const approve = async (org: OrgFixture, approvalId: string) => {
    const decided = await t.request('POST', `/api/v1/orgs/${org.orgId}/approvals/${approvalId}/approve`, {
      token: org.adminToken,
      body: {},
    });
    expect(decided.status).toBe(200);
  };

  test('a capability that needs a human creates a pending approval; once approved the identical action runs exactly once', async () => {
    const org = await signUp(t);
    const agent = await readyAgent(t, org, {
      constraints: { max_actions_per_hour: 100, max_actions_per_day: 100, require_human_approval: ['billing:refund'] },
    });
    const refund = actionBody(agent, 'refund', { amount: 40 });
    const dry = await evaluate(t, agent, refund);
    expect(codes(dry.body)).toEqual(['APPROVAL_REQUIRED']);
    expect((await t.database.db.sql.query('SELECT id FROM approvals WHERE org_id = $1', [org.orgId])).length).toBe(0);

    const asked = await execute(t, agent, refund);
    expect(asked.body).toMatchObject({
      decision: 'deny',
      executed: false,
      approval_id: expect.stringMatching(/^apr_/),
    });
    expect(asked.body.reasons).toEqual([
      { code: 'APPROVAL_REQUIRED', message: expect.any(String), details: { approval_id: asked.body.approval_id } },
    ]);
    const approvalId = asked.body.approval_id as string;

    // Still pending: using it is refused.
    expect(codes((await execute(t, agent, { ...refund, approval_id: approvalId })).body)).toEqual([
      'APPROVAL_REQUIRED',
    ]);
    await approve(org, approvalId);
    // Bound to the action: other params are refused.
    const otherParams = await execute(t, agent, {
      ...actionBody(agent, 'refund', { amount: 4000 }),
      approval_id: approvalId,
    });
    expect(codes(otherParams.body)).toEqual(['APPROVAL_REQUIRED']);

    const results = await Promise.all(
      Array.from({ length: 5 }, () => execute(t, agent, { ...refund, approval_id: approvalId })),
    );
    const allowed = results.filter((r) => r.body.decision === 'allow');
    expect(allowed).toHaveLength(1);
    expect(allowed[0].body).toMatchObject({ executed: true, approval_id: approvalId });
    const [row] = await t.database.db.sql.query<{ status: string }>('SELECT status FROM approvals WHERE id = $1', [
      approvalId,
    ]);
    expect(row.status).toBe('consumed');
    expect(codes((await execute(t, agent, { ...refund, approval_id: approvalId })).body)).toEqual([
      'APPROVAL_REQUIRED',
    ]);
  });

  test('an expired approval denies', async () => {
    const org = await signUp(t);
    const agent = await readyAgent(t, org, {
      constraints: { max_actions_per_hour: 100, max_actions_per_day: 100, require_human_approval: ['billing:refund'] },
    });
    const refund = actionBody(agent, 'refund');
    const asked = await execute(t, agent, refund);
    await approve(org, asked.body.approval_id);
    await t.database.db.sql.query("UPDATE approvals SET expires_at = now() - interval '1 second' WHERE id = $1", [
      asked.body.approval_id,
    ]);
    const late = await execute(t, agent, { ...refund, approval_id: asked.body.approval_id });
    expect(codes(late.body)).toEqual(['APPROVAL_REQUIRED']);
    expect(late.body.reasons[0].message).toMatch(/expired/);
  });
});

describe('interaction records', () => {
  test('500 concurrent executes form one unforked chain that verifies; a tampered record fails', async () => {
    const org = await signUp(t);
    const agent = await readyAgent(t, org, {
      constraints: { max_actions_per_hour: 10000, max_actions_per_day: 10000 },
    });
    const results = await Promise.all(
      Array.from({ length: 500 }, (_, i) =>
        execute(t, agent, actionBody(agent, i % 10 === 0 ? 'delete' : 'read', { i })),
      ),
    );
    expect(
      results
        .filter((r) => r.status !== 200)
        .map((r) => r.text)
        .slice(0, 3),
    ).toEqual([]);
    const chain = await t.database.db.sql.query<{ id: string; seq: string; prev_hash: string; record_hash: string }>(
      'SELECT id, seq::text AS seq, prev_hash, record_hash FROM interaction_records WHERE org_id = $1 ORDER BY interaction_records.seq',
      [org.orgId],
    );
    expect(chain).toHaveLength(500);
    chain.forEach((row, i) => {
      expect(Number(row.seq)).toBe(i + 1);
      if (i > 0) expect(row.prev_hash).toBe(chain[i - 1].record_hash);
    });
    expect(new Set(chain.map((r) => r.prev_hash)).size).toBe(500);

    const sample = [chain[0], chain[137], chain[499]];
    for (const row of sample) {
      const verified = await t.request('GET', `/api/v1/records/${row.id}/verify`, { token: org.adminToken });
      expect(verified.body).toEqual({
        record_id: row.id,
        valid: true,
        checks: { hash: true, signature: true, chain: true },
      });
    }

    await t.database.db.sql.query('UPDATE interaction_records SET executed = NOT executed WHERE id = $1', [
      chain[10].id,
    ]);
    const tampered = await t.request('GET', `/api/v1/records/${chain[10].id}/verify`, { token: org.adminToken });
    expect(tampered.body).toMatchObject({ valid: false, checks: { hash: false, signature: true } });
    await t.database.db.sql.query('UPDATE interaction_records SET prev_hash = $2 WHERE id = $1', [
      chain[20].id,
      chain[5].record_hash,
    ]);
    const relinked = await t.request('GET', `/api/v1/records/${chain[20].id}/verify`, { token: org.adminToken });
    expect(relinked.body.valid).toBe(false);
    expect(relinked.body.checks.chain).toBe(false);
  });

  test('records are listed newest first with filters, and stay within the caller org', async () => {
    const org = await signUp(t);
    const agent = await readyAgent(t, org);
    await execute(t, agent);
    await execute(t, agent, actionBody(agent, 'delete'));
    const all = await t.request('GET', '/api/v1/records', { token: org.adminToken });
    expect(all.body.total).toBe(2);
    expect(all.body.items.map((r: { seq: number }) => r.seq)).toEqual([2, 1]);
    const denied = await t.request('GET', '/api/v1/records?status=denied', { token: org.adminToken });
    expect(denied.body.items.map((r: { capability: string }) => r.capability)).toEqual(['billing:delete']);
    const byAction = await t.request('GET', '/api/v1/records?action=billing:read', { token: org.adminToken });
    expect(byAction.body.total).toBe(1);
    const byAgent = await t.request('GET', `/api/v1/records?agent_id=${agent.svcId}&limit=1`, {
      token: org.adminToken,
    });
    expect(byAgent.body).toMatchObject({ total: 2, items: [expect.objectContaining({ seq: 2 })] });
    const future = await t.request('GET', `/api/v1/records?from=${encodeURIComponent('2999-01-01T00:00:00.000Z')}`, {
      token: org.adminToken,
    });
    expect(future.body.total).toBe(0);

    const other = await signUp(t);
    const foreign = await t.request('GET', `/api/v1/records/${all.body.items[0].record_id}`, {
      token: other.adminToken,
    });
    expect(foreign.status).toBe(404);
    expect((await t.request('GET', '/api/v1/records', { token: other.adminToken })).body.total).toBe(0);
  });

  test('an org that turns record_params off keeps only the params hash', async () => {
    const org = await signUp(t);
    const agent = await readyAgent(t, org);
    const kept = await execute(t, agent, actionBody(agent, 'read', { invoice: 'inv-kept' }));
    const patched = await t.request('PATCH', `/api/v1/orgs/${org.orgId}`, {
      token: org.adminToken,
      body: { record_params: false },
    });
    expect(patched.body.record_params).toBe(false);
    const hidden = await execute(t, agent, actionBody(agent, 'read', { invoice: 'inv-hidden' }));
    const read = (id: string) => t.request('GET', `/api/v1/records/${id}`, { token: org.adminToken });
    expect((await read(kept.body.interaction_id)).body.action.params).toEqual({ invoice: 'inv-kept' });
    const record = (await read(hidden.body.interaction_id)).body;
    expect(record.action.params).toBeNull();
    expect(record.params_hash).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect(
      JSON.stringify(
        await t.database.db.sql.query('SELECT * FROM interaction_records WHERE id = $1', [record.record_id]),
      ),
    ).not.toContain('inv-hidden');
    const verified = await t.request('GET', `/api/v1/records/${record.record_id}/verify`, { token: org.adminToken });
    expect(verified.body.valid).toBe(true);
  });

  test('the JWKS serves the record signing key by key_id', async () => {
    const org = await signUp(t);
    const agent = await readyAgent(t, org);
    const decision = await execute(t, agent);
    const record = await t.request('GET', `/api/v1/records/${decision.body.interaction_id}`, { token: org.adminToken });
    const jwks = await t.request('GET', '/.well-known/jwks.json');
    expect(jwks.status).toBe(200);
    const key = jwks.body.keys.find((k: { kid: string }) => k.kid === record.body.key_id);
    expect(key).toMatchObject({ kty: 'OKP', crv: 'Ed25519', alg: 'EdDSA', use: 'sig' });
    expect(key).not.toHaveProperty('d');
  });
});

test('a manifest of the same agent id in another org is never used', async () => {
  const orgA = await signUp(t);
  const orgB = await signUp(t);
  const agentA = await readyAgent(t, orgA);
  await createManifest(t, orgB, 'pending', manifestPayload({ svcId: agentA.svcId }));
  const { key } = await createKey(t, orgB, ['gateway:execute']);
  const response = await t.request('POST', '/api/v1/gateway/execute', { apiKey: key, body: actionBody(agentA) });
  // Org B's own (pending) manifest is the one judged: not active, nothing approved, no tool.
  expect(codes(response.body)).toEqual(['MANIFEST_NOT_ACTIVE', 'CAPABILITY_NOT_APPROVED', 'TOOL_NOT_CONFIGURED']);
  expect(response.body.decision).toBe('deny');
});

describe('caches', () => {
  const waitFor = async (check: () => Promise<boolean>, ms: number) => {
    const until = Date.now() + ms;
    while (Date.now() < until) {
      if (await check()) return true;
      await new Promise((r) => setTimeout(r, 50));
    }
    return false;
  };

  test('a write made by another process (version bump only) reaches this process within one second', async () => {
    const org = await signUp(t);
    const agent = await readyAgent(t, org);
    expect((await execute(t, agent)).body.decision).toBe('allow');
    // Another process suspends the manifest and deletes the key: its transaction bumps the version;
    // nothing in this process is told.
    await t.database.db.sql.transaction(async (tx) => {
      await tx.query("UPDATE manifests SET status = 'suspended' WHERE id = $1", [agent.manifestId]);
      await tx.query('UPDATE config_versions SET version = version + 1 WHERE id = 1');
    });
    const started = Date.now();
    const suspended = await waitFor(
      async () => codes((await evaluate(t, agent)).body).includes('MANIFEST_NOT_ACTIVE'),
      1000,
    );
    expect(suspended).toBe(true);
    expect(Date.now() - started).toBeLessThan(1000);

    await t.database.db.sql.transaction(async (tx) => {
      await tx.query('DELETE FROM api_keys WHERE org_id = $1', [org.orgId]);
      await tx.query('UPDATE config_versions SET version = version + 1 WHERE id = 1');
    });
    const refused = await waitFor(async () => (await evaluate(t, agent)).status === 401, 1000);
    expect(refused).toBe(true);
  });

  test('writes through the API take effect at once in the writing process', async () => {
    const org = await signUp(t);
    const agent = await readyAgent(t, org);
    expect((await execute(t, agent)).body.decision).toBe('allow');
    await t.request('POST', `/api/v1/orgs/${org.orgId}/manifests/${agent.manifestId}/suspend`, {
      token: org.adminToken,
      body: { reason: 'now' },
    });
    expect(codes((await execute(t, agent)).body)).toEqual(['MANIFEST_NOT_ACTIVE']);
  });
});
