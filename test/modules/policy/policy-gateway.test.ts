/**
 * Policies in the gateway over HTTP (docs/guides/policies.md): each effect in each mode, CEL over
 * params and the request, fail closed, priority order, rate limits counted exactly and only for
 * otherwise-allowed actions, evaluate as the test bench, GraphQL answering the same, and matched
 * policies in signed records that verify online and offline, next to records from before policies.
 */
import { createInterface } from 'node:readline';
import { Readable } from 'node:stream';
import { canonicalHash } from '../../../src/lib/canonical-json.js';
import { recordHashOf, signRecordHash, type RecordBody } from '../../../src/modules/record/record-chain.js';
import { verifyExport } from '../../../src/modules/record/record-export.js';
import { insertRecordsAndAdvanceHead, lockChainHead } from '../../../src/modules/record/record.store.js';
import { MerkleFrontier, recordLeafHash } from '../../../src/modules/record/merkle.js';
import { startTestApp, type TestApp } from '../../support/app.js';
import { createKey, signUp, type OrgFixture } from '../../support/fixtures.js';
import { actionBody, evaluate, execute, readyAgent, type AgentFixture } from '../../support/gateway.js';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

async function createPolicy(org: OrgFixture, body: Record<string, unknown>) {
  const created = await t.request('POST', '/api/v1/policies', { token: org.adminToken, body });
  if (created.status !== 201) throw new Error(`policy failed: ${created.status} ${created.text}`);
  return created.body as { policy_id: string; name: string; version: number };
}

const refund = (agent: AgentFixture, params: Record<string, unknown>) => actionBody(agent, 'refund', params);
const codes = (body: { reasons: { code: string }[] }) => body.reasons.map((r) => r.code);
const matched = (body: { policies: { name: string }[] }) => body.policies.map((p) => p.name);

async function world() {
  const org = await signUp(t);
  const agent = await readyAgent(t, org);
  return { org, agent };
}

describe('deny', () => {
  test('enforced: a matching condition over params denies with POLICY_DENIED; a request it does not match passes', async () => {
    const { org, agent } = await world();
    const policy = await createPolicy(org, {
      name: 'big refunds',
      effect: 'deny',
      target: { capabilities: ['billing:refund'] },
      condition: 'params.amount > 500',
      message: 'refunds over 500 EUR go through finance',
    });
    const big = await execute(t, agent, refund(agent, { amount: 750.5 }));
    expect(big.status).toBe(200);
    expect(big.body).toMatchObject({ decision: 'deny', executed: false, result: null });
    expect(big.body.reasons).toEqual([
      {
        code: 'POLICY_DENIED',
        message: 'Denied by policy "big refunds": refunds over 500 EUR go through finance',
        details: { policy_id: policy.policy_id, name: 'big refunds', version: 1 },
      },
    ]);
    expect(big.body.policies).toEqual([
      {
        policy_id: policy.policy_id,
        name: 'big refunds',
        version: 1,
        effect: 'deny',
        mode: 'enforce',
        condition_error: null,
        rate_limit_exceeded: null,
      },
    ]);

    const integer = await execute(t, agent, refund(agent, { amount: 501 }));
    expect(codes(integer.body)).toEqual(['POLICY_DENIED']);
    const small = await execute(t, agent, refund(agent, { amount: 500 }));
    expect(small.body).toMatchObject({ decision: 'allow', executed: true, policies: [] });
    // Another capability is outside the target.
    const read = await execute(t, agent, actionBody(agent, 'read', { amount: 10_000 }));
    expect(read.body).toMatchObject({ decision: 'allow', policies: [] });
  });

  test('shadow: reported in the decision and the record, never applied', async () => {
    const { org, agent } = await world();
    const policy = await createPolicy(org, {
      name: 'try it',
      effect: 'deny',
      mode: 'shadow',
      condition: 'params.amount > 500',
    });
    const big = await execute(t, agent, refund(agent, { amount: 900 }));
    expect(big.body).toMatchObject({ decision: 'allow', executed: true, reasons: [] });
    expect(big.body.policies).toEqual([
      expect.objectContaining({ policy_id: policy.policy_id, effect: 'deny', mode: 'shadow' }),
    ]);
    const record = await t.request('GET', `/api/v1/records/${big.body.interaction_id}`, { token: org.adminToken });
    expect(record.body.policies).toEqual(big.body.policies);
  });

  test('a condition failing at run time matches (fail closed), and the reason says so', async () => {
    const { org, agent } = await world();
    await createPolicy(org, { name: 'coupons', effect: 'deny', condition: 'params.coupon.size() > 10' });
    const denied = await execute(t, agent, refund(agent, { amount: 1 }));
    expect(codes(denied.body)).toEqual(['POLICY_DENIED']);
    expect(denied.body.reasons[0].message).toMatch(
      /^Denied by policy "coupons" \(its condition failed: .*coupon.*; policies fail closed\)$/,
    );
    expect(denied.body.policies[0].condition_error).toMatch(/coupon/);
    // has() is how an operator tests for an optional field.
    await t.request('PUT', `/api/v1/policies/${denied.body.policies[0].policy_id}`, {
      token: org.adminToken,
      body: { name: 'coupons', effect: 'deny', condition: 'has(params.coupon) && params.coupon.size() > 10' },
    });
    let after = await execute(t, agent, refund(agent, { amount: 1 }));
    // The writing process dropped its cache at once.
    expect(after.body).toMatchObject({ decision: 'allow', policies: [] });
    after = await execute(t, agent, refund(agent, { amount: 1, coupon: 'SPRING-2026-XL' }));
    expect(codes(after.body)).toEqual(['POLICY_DENIED']);
  });

  test('conditions over the agent, the key and the request', async () => {
    const { org, agent } = await world();
    const other = await createKey(t, org, ['gateway:execute', 'gateway:evaluate']);
    const keyPrefix = other.key.slice(0, 12);
    await createPolicy(org, {
      name: 'not that key',
      effect: 'deny',
      condition: `key.prefix == "${keyPrefix}" && request.mode == "execute" && request.channel == "rest" && agent.id == "${agent.svcId}"`,
    });
    await createPolicy(org, {
      name: 'never on a weekday 7',
      effect: 'deny',
      condition: 'request.weekday == 7 || request.hour > 23',
    });
    await createPolicy(org, {
      name: 'keys that may evaluate',
      effect: 'deny',
      condition: '!("gateway:evaluate" in key.scopes)',
    });
    const withOther = { ...agent, key: other.key };
    expect(codes((await execute(t, withOther)).body)).toEqual(['POLICY_DENIED']);
    const executeOnly = { ...agent, key: (await createKey(t, org, ['gateway:execute'])).key };
    expect((await execute(t, executeOnly)).body.reasons).toEqual([
      expect.objectContaining({ code: 'POLICY_DENIED', message: 'Denied by policy "keys that may evaluate"' }),
    ]);
    // Evaluate is the test bench: same policies, but request.mode is "evaluate" here.
    expect((await evaluate(t, withOther)).body).toMatchObject({ decision: 'allow', policies: [] });
    expect((await execute(t, agent)).body).toMatchObject({ decision: 'allow', policies: [] });
  });
});

describe('require_approval', () => {
  test('enforced: the action needs a human exactly as with the manifest, and the approval names the policy', async () => {
    const { org, agent } = await world();
    const policy = await createPolicy(org, {
      name: 'refunds over 500',
      effect: 'require_approval',
      target: { svc_ids: [agent.svcId], capabilities: ['billing:*'] },
      condition: 'params.amount > 500',
    });
    const body = refund(agent, { amount: 600 });
    const asked = await execute(t, agent, body);
    expect(asked.body).toMatchObject({ decision: 'deny', approval_id: expect.stringMatching(/^apr_/) });
    expect(asked.body.reasons).toEqual([
      {
        code: 'APPROVAL_REQUIRED',
        message: '"billing:refund" needs a human approval (policy "refunds over 500" requires it)',
        details: {
          policies: [{ policy_id: policy.policy_id, name: 'refunds over 500', version: 1 }],
          approval_id: asked.body.approval_id,
        },
      },
    ]);
    const approvalPath = `/api/v1/orgs/${org.orgId}/approvals/${asked.body.approval_id}`;
    const approval = await t.request('GET', approvalPath, { token: org.adminToken });
    expect(approval.body.reasons[0].message).toContain('policy "refunds over 500"');
    expect((await t.request('POST', `${approvalPath}/approve`, { token: org.adminToken, body: {} })).status).toBe(200);

    const approved = await execute(t, agent, { ...body, approval_id: asked.body.approval_id });
    expect(approved.body).toMatchObject({ decision: 'allow', executed: true, approval_id: asked.body.approval_id });
    expect(matched(approved.body)).toEqual(['refunds over 500']);
    // Below the threshold, no human.
    expect((await execute(t, agent, refund(agent, { amount: 20 }))).body).toMatchObject({
      decision: 'allow',
      approval_id: null,
    });
  });

  test('shadow: reported, no human asked', async () => {
    const { org, agent } = await world();
    await createPolicy(org, { name: 'would ask', effect: 'require_approval', mode: 'shadow' });
    const done = await execute(t, agent, refund(agent, { amount: 600 }));
    expect(done.body).toMatchObject({ decision: 'allow', executed: true, approval_id: null });
    expect(done.body.policies).toEqual([
      expect.objectContaining({ name: 'would ask', effect: 'require_approval', mode: 'shadow' }),
    ]);
  });
});

describe('rate_limit', () => {
  test('enforced: exactly the limit passes, then 429 POLICY_VIOLATION with headers, recorded as denied', async () => {
    const { org, agent } = await world();
    const policy = await createPolicy(org, {
      name: 'search calmly',
      effect: 'rate_limit',
      target: { capabilities: ['billing:read'] },
      rate_limit: { limit: 3, window_seconds: 3600, per: 'agent' },
    });
    // Evaluate counts nothing.
    for (let i = 0; i < 5; i += 1) expect((await evaluate(t, agent)).body.decision).toBe('allow');
    for (let i = 0; i < 3; i += 1) {
      const ok = await execute(t, agent);
      expect(ok.body).toMatchObject({ decision: 'allow', executed: true });
      expect(ok.body.policies).toEqual([
        expect.objectContaining({ policy_id: policy.policy_id, effect: 'rate_limit', rate_limit_exceeded: false }),
      ]);
    }
    const limited = await execute(t, agent);
    expect(limited.status).toBe(429);
    expect(limited.body.error).toMatchObject({
      code: 'POLICY_VIOLATION',
      message: 'The rate limit of policy "search calmly" is reached: 3 actions per 3600s',
      details: { limit: 3, period: '3600s', current: 3, policy_id: policy.policy_id },
    });
    const windowEnd = Math.ceil(Date.now() / 3_600_000) * 3600;
    expect(limited.headers.get('x-ratelimit-limit')).toBe('3');
    expect(limited.headers.get('x-ratelimit-remaining')).toBe('0');
    expect(Number(limited.headers.get('x-ratelimit-reset'))).toBe(windowEnd);
    expect(Number(limited.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect(Number(limited.headers.get('retry-after'))).toBeLessThanOrEqual(3600);

    const records = await t.request('GET', `/api/v1/records?agent_id=${agent.svcId}&status=denied`, {
      token: org.adminToken,
    });
    expect(records.body.items).toHaveLength(1);
    expect(records.body.items[0].reasons).toEqual([expect.objectContaining({ code: 'POLICY_VIOLATION' })]);
    expect(records.body.items[0].policies).toEqual([
      expect.objectContaining({ policy_id: policy.policy_id, rate_limit_exceeded: true }),
    ]);
    // Evaluate reports the full window as a reason (no 429: it decides nothing).
    const bench = await evaluate(t, agent);
    expect(bench.status).toBe(200);
    expect(codes(bench.body)).toEqual(['POLICY_VIOLATION']);
    expect(bench.body.policies[0].rate_limit_exceeded).toBe(true);
    // Another capability is not limited.
    expect((await execute(t, agent, refund(agent, { amount: 1 }))).body.decision).toBe('allow');
  });

  test('20 concurrent executes against a limit of 7 allow exactly 7', async () => {
    const { org, agent } = await world();
    await createPolicy(org, {
      name: 'seven',
      effect: 'rate_limit',
      rate_limit: { limit: 7, window_seconds: 86400, per: 'org' },
    });
    await evaluate(t, agent);
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) => execute(t, agent, actionBody(agent, 'read', { i }))),
    );
    expect(results.filter((r) => r.status === 200 && r.body.decision === 'allow')).toHaveLength(7);
    expect(results.filter((r) => r.status === 429)).toHaveLength(13);
  });

  test('only otherwise-allowed actions count: denied ones leave the limit untouched', async () => {
    const { org, agent } = await world();
    await createPolicy(org, {
      name: 'two',
      effect: 'rate_limit',
      rate_limit: { limit: 2, window_seconds: 60, per: 'agent' },
    });
    await createPolicy(org, {
      name: 'no big ones',
      effect: 'deny',
      condition: 'has(params.amount) && params.amount > 100',
    });
    for (let i = 0; i < 4; i += 1)
      expect(codes((await execute(t, agent, refund(agent, { amount: 500 }))).body)).toEqual(['POLICY_DENIED']);
    // An action the manifest does not approve is denied before anything counts.
    expect(codes((await execute(t, agent, actionBody(agent, 'delete'))).body)).toEqual(['CAPABILITY_NOT_APPROVED']);
    expect((await execute(t, agent)).body.decision).toBe('allow');
    expect((await execute(t, agent)).body.decision).toBe('allow');
    expect((await execute(t, agent)).status).toBe(429);
  });

  test('per api_key counts each key apart; per org shares one count between agents', async () => {
    const { org, agent } = await world();
    await createPolicy(org, {
      name: 'per key',
      effect: 'rate_limit',
      rate_limit: { limit: 1, window_seconds: 3600, per: 'api_key' },
    });
    const second = { ...agent, key: (await createKey(t, org, ['gateway:execute'])).key };
    expect((await execute(t, agent)).body.decision).toBe('allow');
    expect((await execute(t, agent)).status).toBe(429);
    expect((await execute(t, second)).body.decision).toBe('allow');

    const { org: shared, agent: first } = await world();
    await createPolicy(shared, {
      name: 'per org',
      effect: 'rate_limit',
      rate_limit: { limit: 2, window_seconds: 3600, per: 'org' },
    });
    const other = await readyAgent(t, shared);
    expect((await execute(t, first)).body.decision).toBe('allow');
    expect((await execute(t, other)).body.decision).toBe('allow');
    expect((await execute(t, first)).status).toBe(429);
    expect((await execute(t, other)).status).toBe(429);
  });

  test('shadow: counted and reported as exceeded, never refused', async () => {
    const { org, agent } = await world();
    await createPolicy(org, {
      name: 'would limit',
      effect: 'rate_limit',
      mode: 'shadow',
      rate_limit: { limit: 1, window_seconds: 3600, per: 'agent' },
    });
    const results = [];
    for (let i = 0; i < 3; i += 1) results.push(await execute(t, agent));
    expect(results.map((r) => [r.status, r.body.decision, r.body.policies[0].rate_limit_exceeded])).toEqual([
      [200, 'allow', false],
      [200, 'allow', true],
      [200, 'allow', true],
    ]);
  });
});

describe('the decision lists every matched policy', () => {
  test('in priority order (lower first), shadow ones included, disabled ones left out; GraphQL answers the same', async () => {
    const { org, agent } = await world();
    await createPolicy(org, { name: 'late', effect: 'deny', mode: 'shadow', priority: 300 });
    await createPolicy(org, {
      name: 'early',
      effect: 'rate_limit',
      priority: 10,
      rate_limit: { limit: 100, window_seconds: 60, per: 'agent' },
    });
    await createPolicy(org, { name: 'middle', effect: 'require_approval', mode: 'shadow', priority: 100 });
    await createPolicy(org, { name: 'b-tie', effect: 'deny', mode: 'shadow', priority: 100 });
    await createPolicy(org, { name: 'off', effect: 'deny', enabled: false, priority: 0 });
    const rest = await evaluate(t, agent);
    expect(rest.body.decision).toBe('allow');
    expect(matched(rest.body)).toEqual(['early', 'b-tie', 'middle', 'late']);

    const graphql = await t.graphql(
      `mutation ($svc: String!) {
        gateway_evaluate(svc_id: $svc, agent_id: $svc, action: {type: "billing", tool: "read", params: {invoice: "inv-1"}}) {
          decision policies { name effect mode version rate_limit_exceeded }
        }
      }`,
      { svc: agent.svcId },
      { apiKey: agent.key },
    );
    expect(graphql.body.errors).toBeUndefined();
    expect(graphql.body.data.gateway_evaluate.policies.map((p: { name: string }) => p.name)).toEqual([
      'early',
      'b-tie',
      'middle',
      'late',
    ]);
    expect(graphql.body.data.gateway_evaluate.policies[0]).toEqual({
      name: 'early',
      effect: 'rate_limit',
      mode: 'enforce',
      version: 1,
      rate_limit_exceeded: false,
    });
  });
});

describe('records with policies', () => {
  /** Appends a record as the service did before policies existed: its body has no `policies`. */
  async function appendLegacyRecord(org: OrgFixture, svcId: string) {
    const key = await t.app.keys.activeKey('record');
    return t.database.db.sql.transaction(async (tx) => {
      const head = await lockChainHead(tx, org.orgId);
      const seq = Number(head.seq) + 1;
      const createdAt = new Date();
      const body: RecordBody = {
        record_id: `int_legacy${seq}`,
        org_id: org.orgId,
        seq,
        svc_id: svcId,
        agent_id: svcId,
        action: { type: 'billing', tool: 'read' },
        capability: 'billing:read',
        params_hash: canonicalHash({}),
        decision: 'allow',
        status: 'approved',
        executed: true,
        reasons: [],
        result_hash: null,
        approval_id: null,
        prev_hash: head.hash,
        created_at: createdAt.toISOString(),
        key_id: key.kid,
      };
      const recordHash = recordHashOf(body);
      const tree = MerkleFrontier.of(head.seq, head.frontier);
      const completed = tree.append(recordLeafHash(recordHash));
      await insertRecordsAndAdvanceHead(
        tx,
        org.orgId,
        [
          {
            id: body.record_id,
            orgId: org.orgId,
            seq: BigInt(seq),
            svcId,
            agentId: svcId,
            actionType: 'billing',
            tool: 'read',
            capability: 'billing:read',
            paramsHash: body.params_hash,
            params: null,
            status: 'approved',
            executed: true,
            reasons: [],
            resultHash: null,
            approvalId: null,
            policies: null,
            channel: null,
            connection: null,
            labels: [],
            originalResultHash: null,
            redactions: null,
            confirmation: null,
            prevHash: head.hash,
            recordHash,
            signature: signRecordHash(recordHash, key.privateKey),
            treeNodes: completed.length ? Buffer.concat(completed) : null,
            keyId: key.kid,
            createdAt,
          },
        ],
        tree.packed(),
      );
      return body.record_id;
    });
  }

  test('old and new records verify online and in an offline export; editing a recorded match breaks the hash', async () => {
    const { org, agent } = await world();
    const legacy = await appendLegacyRecord(org, agent.svcId);
    await createPolicy(org, {
      name: 'watch refunds',
      effect: 'deny',
      mode: 'shadow',
      target: { capabilities: ['billing:refund'] },
    });
    const withMatch = await execute(t, agent, refund(agent, { amount: 5 }));
    const withoutMatch = await execute(t, agent);
    expect(matched(withMatch.body)).toEqual(['watch refunds']);

    for (const id of [legacy, withMatch.body.interaction_id, withoutMatch.body.interaction_id]) {
      const verified = await t.request('GET', `/api/v1/records/${id}/verify`, { token: org.adminToken });
      expect(verified.body).toEqual({
        record_id: id,
        valid: true,
        checks: { hash: true, signature: true, chain: true },
      });
    }
    const legacyRecord = await t.request('GET', `/api/v1/records/${legacy}`, { token: org.adminToken });
    expect(legacyRecord.body.policies).toBeNull();
    const newRecord = await t.request('GET', `/api/v1/records/${withoutMatch.body.interaction_id}`, {
      token: org.adminToken,
    });
    expect(newRecord.body.policies).toEqual([]);

    const exported = await t.request('GET', '/api/v1/records/export', { token: org.adminToken });
    expect(exported.status).toBe(200);
    const lines = exported.text.trim().split('\n');
    const verify = (text: string[]) => verifyExport(createInterface({ input: Readable.from(text.join('\n')) }));
    expect(await verify(lines)).toMatchObject({
      ok: true,
      count: 3,
      policyMatches: 1,
      beforePolicies: 1,
      channels: { rest: 2, graphql: 0, mcp: 0, none: 1 },
    });
    const bodies = lines.slice(1).map((line) => JSON.parse(line).body);
    expect(bodies[0]).not.toHaveProperty('policies');
    expect(bodies[0]).not.toHaveProperty('channel');
    expect(bodies[1].channel).toBe('rest');
    expect(bodies[1].policies).toEqual([expect.objectContaining({ name: 'watch refunds', mode: 'shadow' })]);

    // Hiding a match from the record is detected.
    const tampered = [...lines];
    const line = JSON.parse(tampered[2]);
    line.body.policies = [];
    tampered[2] = JSON.stringify(line);
    expect(await verify(tampered)).toMatchObject({
      ok: false,
      line: 3,
      reason: expect.stringMatching(/^hash mismatch/),
    });
    // So is removing it in the database.
    await t.database.db.sql.query("UPDATE interaction_records SET policies = '[]' WHERE id = $1", [
      withMatch.body.interaction_id,
    ]);
    const broken = await t.request('GET', `/api/v1/records/${withMatch.body.interaction_id}/verify`, {
      token: org.adminToken,
    });
    expect(broken.body).toMatchObject({ valid: false, checks: { hash: false } });
  });
});
