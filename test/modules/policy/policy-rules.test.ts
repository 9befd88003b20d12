import { policyCounters } from '../../../src/modules/gateway/budget.js';
import {
  checkDecision,
  conditionFacts,
  policyEntries,
  type DecisionContext,
  type GatewayCall,
} from '../../../src/modules/gateway/decision.js';
import type { CurrentManifest } from '../../../src/modules/manifest/manifest.service.js';
import { compileCondition, runCondition, type ConditionFacts } from '../../../src/modules/policy/policy-condition.js';
import {
  byPriority,
  capabilityMatches,
  matchPolicies,
  type ActivePolicy,
} from '../../../src/modules/policy/policy-rules.js';

/** Policies without a database: CEL conditions, targets, priority order and what a match does to a decision. */

const manifest: CurrentManifest = {
  id: 'm-1',
  status: 'active',
  agentId: 'billing-agent',
  agent: { name: 'Billing agent', version: '1.2.0', team: 'payments' },
  approvedCapabilities: ['billing:read', 'billing:refund'],
  requireHumanApproval: [],
  limits: { maxActionsPerHour: 10, maxActionsPerDay: 100 },
};

const params = JSON.parse(
  '{"amount": 750.5, "count": 600, "currency": "EUR", "customer": {"tier": "gold", "tags": ["vip", "eu"], "address": {"country": "DE"}}, "items": [{"sku": "a", "qty": 2}]}',
) as Record<string, unknown>;

function call(overrides: Partial<GatewayCall> = {}): GatewayCall {
  return {
    svcId: 'billing-agent',
    agentId: 'billing-agent',
    action: { type: 'billing', tool: 'refund', params },
    capability: 'billing:refund',
    capabilityToken: null,
    approvalId: null,
    ...overrides,
  };
}

// Monday 2026-11-23, 13:30 UTC.
const MONDAY_1330 = Date.UTC(2026, 10, 23, 13, 30);
const caller = { id: 'key-1', prefix: 'agk_abcd', scopes: ['gateway:execute'] as const };
const facts = (overrides: { now?: number; call?: GatewayCall } = {}): ConditionFacts =>
  conditionFacts(overrides.call ?? call(), manifest, caller, {
    mode: 'execute',
    channel: 'rest',
    now: overrides.now ?? MONDAY_1330,
  });

function evaluate(condition: string, f: ConditionFacts = facts()) {
  const compiled = compileCondition(condition);
  if (!compiled.ok) throw new Error(`refused: ${compiled.error.message}`);
  return runCondition(compiled.condition, f);
}

function refusal(condition: string) {
  const compiled = compileCondition(condition);
  if (compiled.ok) throw new Error(`accepted: ${condition}`);
  return compiled.error;
}

describe('CEL conditions over the request', () => {
  test.each([
    ['params.amount > 500', true],
    ['params.amount > 1000', false],
    ['params.count > 500', true],
    ['params.count == 600', true],
    ['params.count == 600.0', true],
    ['params.amount >= 750.5 && params.amount < 751', true],
    ['params.amount * 2 > 1000', true],
    ['params.count + 1 == 601', true],
    ['params.currency == "EUR"', true],
    ['params.currency.startsWith("EU") && params.currency.size() == 3', true],
    ['params.customer.tier in ["gold", "platinum"]', true],
    ['"vip" in params.customer.tags', true],
    ['params.customer.address.country == "DE"', true],
    ['params.items.exists(i, i.qty > 1)', true],
    ['size(params.items) == 1', true],
    ['has(params.customer.tier)', true],
    ['has(params.coupon)', false],
    ['!has(params.coupon) || params.coupon == ""', true],
    ['action.capability == "billing:refund" && action.params.amount > 500', true],
    ['agent.id == "billing-agent" && agent.team == "payments" && agent.version == "1.2.0"', true],
    ['"gateway:execute" in key.scopes && key.prefix == "agk_abcd" && key.id == "key-1"', true],
    ['request.hour == 13 && request.weekday == 1', true],
    ['request.weekday == 0 || request.weekday == 6', false],
    ['request.time > timestamp("2026-01-01T00:00:00Z")', true],
    ['request.channel == "rest" && request.mode == "execute"', true],
  ])('%s → %s', (condition, expected) => {
    expect(evaluate(condition)).toEqual({ matched: expected, error: null });
  });

  test('an integer JSON number compares with int and double literals alike', () => {
    const f = facts({ call: call({ action: { type: 'billing', tool: 'refund', params: { amount: 501 } } }) });
    expect(evaluate('params.amount > 500', f).matched).toBe(true);
    expect(evaluate('params.amount > 500.5', f).matched).toBe(true);
    expect(evaluate('params.amount < 501.5', f).matched).toBe(true);
  });

  test('the weekend as a condition (Sunday is 0, UTC)', () => {
    const sunday = facts({ now: Date.UTC(2026, 10, 22, 23, 59) });
    expect(evaluate('request.weekday == 0 || request.weekday == 6', sunday).matched).toBe(true);
    expect(evaluate('request.hour == 23', sunday).matched).toBe(true);
  });

  test('a condition that fails at run time matches, and says why (fail closed)', () => {
    expect(evaluate('params.coupon == "X"')).toEqual({ matched: true, error: expect.stringMatching(/coupon/) });
    expect(evaluate('params.currency > 5')).toEqual({ matched: true, error: expect.any(String) });
    expect(evaluate('params.customer')).toEqual({ matched: true, error: 'the condition gave object, not a boolean' });
  });

  test('params keys that name JavaScript internals are just absent', () => {
    expect(evaluate('has(params.constructor) || has(params.toString)')).toEqual({ matched: false, error: null });
    expect(evaluate('params.constructor == 1').error).toMatch(/constructor/);
  });
});

describe('conditions refused when saved', () => {
  test('a syntax error, with its position', () => {
    expect(refusal('params.amount >\n  ')).toEqual({
      message: expect.stringMatching(/Unexpected/),
      position: { offset: 18, line: 2, column: 3 },
    });
    expect(refusal('params.amount > > 1').position).toEqual({ offset: 16, line: 1, column: 17 });
  });

  test('an expression that is not boolean', () => {
    expect(refusal('1 + 2').message).toBe('must be a boolean expression, not int');
    expect(refusal('"deny"').message).toBe('must be a boolean expression, not string');
  });

  test('a type error against the declared variables', () => {
    expect(refusal('request.hour + "h" == "13h"').message).toMatch(/no such overload/);
    expect(refusal('unknown_variable == 1').message).toMatch(/unknown_variable/);
  });

  test('regular expressions', () => {
    expect(refusal('params.currency.matches("^(a+)+$")').message).toMatch(/`matches`/);
    expect(refusal('matches(params.currency, "E.*")').message).toMatch(/`matches`/);
  });

  test('a comprehension inside another (quadratic in the params)', () => {
    expect(refusal('params.items.exists(a, params.items.all(b, a == b))').message).toMatch(
      /inside another comprehension/,
    );
  });

  test('too long, too big, empty', () => {
    expect(refusal(`params.amount > 1 ${'|| true '.repeat(600)}`).message).toBe('must be at most 4096 characters');
    expect(
      refusal(
        Array.from({ length: 200 }, (_, i) => `params.a${i} == ${i}`)
          .join(' || ')
          .slice(0, 4096),
      ).message,
    ).toMatch(/AstNodes|characters/);
    expect(refusal('   ').message).toMatch(/must not be empty/);
  });
});

function policy(overrides: Partial<ActivePolicy> & { id: string }): ActivePolicy {
  return {
    name: overrides.id,
    version: 1,
    mode: 'enforce',
    priority: 100,
    effect: 'deny',
    svcIds: null,
    capabilities: null,
    condition: null,
    rateLimit: null,
    message: null,
    labels: [],
    historyWindowSeconds: null,
    detectors: [],
    ...overrides,
  };
}

const when = (text: string) => {
  const compiled = compileCondition(text);
  if (!compiled.ok) throw new Error(compiled.error.message);
  return compiled.condition;
};

describe('targets and order', () => {
  test.each([
    ['billing:refund', true],
    ['billing:*', true],
    ['*:refund', true],
    ['*:*', true],
    ['billing:read', false],
    ['email:*', false],
    ['bill:refund', false],
  ])('pattern %s covers billing:refund: %s', (pattern, expected) => {
    expect(capabilityMatches(pattern, 'billing:refund')).toBe(expected);
  });

  test('only policies whose agents, capabilities and condition all match, in the given order', () => {
    const policies = [
      policy({ id: 'p1', svcIds: ['other-agent'] }),
      policy({ id: 'p2', capabilities: ['email:*'] }),
      policy({ id: 'p3', capabilities: ['billing:*'], condition: when('params.amount > 1000') }),
      policy({
        id: 'p4',
        svcIds: ['billing-agent'],
        capabilities: ['*:refund'],
        condition: when('params.amount > 500'),
      }),
      policy({ id: 'p5' }),
      policy({ id: 'p6', condition: when('params.missing == 1') }),
    ];
    const matches = matchPolicies(policies, 'billing-agent', 'billing:refund', () => facts());
    expect(matches.map((m) => [m.policy.id, m.conditionError !== null])).toEqual([
      ['p4', false],
      ['p5', false],
      ['p6', true],
    ]);
  });

  test('facts are built only when a targeted policy has a condition', () => {
    let built = 0;
    const count = () => {
      built += 1;
      return facts();
    };
    matchPolicies(
      [policy({ id: 'a' }), policy({ id: 'b', svcIds: ['x'], condition: when('true') })],
      'billing-agent',
      'billing:refund',
      count,
    );
    expect(built).toBe(0);
    matchPolicies(
      [policy({ id: 'a', condition: when('true') }), policy({ id: 'b', condition: when('true') })],
      'billing-agent',
      'billing:refund',
      count,
    );
    expect(built).toBe(1);
  });

  test('priority: lower first, then name, then id', () => {
    const sorted = [
      { priority: 100, name: 'b', id: '1' },
      { priority: 5, name: 'z', id: '2' },
      { priority: 100, name: 'a', id: '3' },
      { priority: 100, name: 'a', id: '0' },
    ].sort(byPriority);
    expect(sorted.map((p) => p.id)).toEqual(['2', '0', '3', '1']);
  });
});

function context(overrides: Partial<DecisionContext> = {}): DecisionContext {
  return {
    call: call(),
    mode: 'execute',
    keySvcIds: [],
    agent: { status: 'active', deactivationReason: null },
    manifest,
    token: null,
    approval: null,
    toolConfigured: true,
    budget: null,
    policies: [],
    limits: null,
    ...overrides,
  };
}

const match = (p: ActivePolicy, conditionError: string | null = null) => ({ policy: p, conditionError });

describe('what a matched policy does to the decision', () => {
  test('an enforced deny adds POLICY_DENIED after the token checks, naming the policy and its message', () => {
    const deny = policy({ id: 'pol_1', name: 'big refunds', version: 3, message: 'ask finance' });
    const checked = checkDecision(
      context({
        token: { ok: false, message: 'The capability token has expired' },
        policies: [match(deny)],
        toolConfigured: false,
      }),
    );
    expect(checked.reasons.map((r) => r.code)).toEqual([
      'CAPABILITY_TOKEN_INVALID',
      'POLICY_DENIED',
      'TOOL_NOT_CONFIGURED',
    ]);
    expect(checked.reasons[1]).toEqual({
      code: 'POLICY_DENIED',
      message: 'Denied by policy "big refunds": ask finance',
      details: { policy_id: 'pol_1', name: 'big refunds', version: 3 },
    });
  });

  test('a deny whose condition failed says so', () => {
    const checked = checkDecision(context({ policies: [match(policy({ id: 'p', name: 'n' }), 'No such key: x')] }));
    expect(checked.reasons[0].message).toBe(
      'Denied by policy "n" (its condition failed: No such key: x; policies fail closed)',
    );
    expect(checked.reasons[0].details).toMatchObject({ condition_error: 'No such key: x' });
  });

  test('shadow policies change nothing', () => {
    const shadow = [
      policy({ id: 'a', mode: 'shadow' }),
      policy({ id: 'b', mode: 'shadow', effect: 'require_approval' }),
    ];
    expect(checkDecision(context({ policies: shadow.map((p) => match(p)) }))).toEqual({
      reasons: [],
      needsHuman: false,
    });
  });

  test('an enforced require_approval needs a human exactly like the manifest, naming the policy', () => {
    const ask = policy({ id: 'pol_2', name: 'refunds over 500', effect: 'require_approval' });
    const checked = checkDecision(context({ policies: [match(ask)] }));
    expect(checked.needsHuman).toBe(true);
    expect(checked.reasons).toEqual([
      {
        code: 'APPROVAL_REQUIRED',
        message: '"billing:refund" needs a human approval (policy "refunds over 500" requires it)',
        details: { policies: [{ policy_id: 'pol_2', name: 'refunds over 500', version: 1 }] },
      },
    ]);
    expect(checkDecision(context({ policies: [match(ask)], approval: { ok: true } }))).toEqual({
      reasons: [],
      needsHuman: true,
    });
  });

  test('a full enforced rate limit denies an evaluate before the budget; a shadow one does not', () => {
    const limited = policy({
      id: 'pol_3',
      name: 'calm',
      effect: 'rate_limit',
      rateLimit: { limit: 2, windowSeconds: 60, per: 'agent' },
    });
    const shadow = { ...limited, id: 'pol_4', mode: 'shadow' as const };
    const matches = [match(limited), match(shadow)];
    const counters = policyCounters(matches, { orgId: 'o', svcId: 'billing-agent', callerId: 'k' }, MONDAY_1330);
    const limits = counters.map((counter) => ({ counter, current: 2 }));
    const checked = checkDecision(context({ mode: 'evaluate', policies: matches, limits }));
    expect(checked.reasons).toEqual([
      {
        code: 'POLICY_VIOLATION',
        message: 'The rate limit of policy "calm" is reached: 2 actions per 60s',
        details: { limit: 2, period: '60s', current: 2, policy_id: 'pol_3' },
      },
    ]);
  });

  test('rate limit counters: one per policy and scope, window aligned to the epoch, sorted by bucket', () => {
    const per = (id: string, scope: 'agent' | 'api_key' | 'org') =>
      match(policy({ id, effect: 'rate_limit', rateLimit: { limit: 5, windowSeconds: 3600, per: scope } }));
    const counters = policyCounters(
      [per('z', 'agent'), match(policy({ id: 'd' })), per('a', 'org'), per('m', 'api_key')],
      {
        orgId: 'o',
        svcId: 'billing-agent',
        callerId: 'key-9',
      },
      MONDAY_1330,
    );
    expect(counters.map((c) => [c.bucket, c.match])).toEqual([
      ['policy:o:a:3600:org', 2],
      ['policy:o:m:3600:key:key-9', 3],
      ['policy:o:z:3600:agent:billing-agent', 0],
    ]);
    expect(counters[0].window.start.toISOString()).toBe('2026-11-23T13:00:00.000Z');
  });

  test('the decision lists every match with its effect and mode, and rate limits say whether they were exceeded', () => {
    const matches = [
      match(policy({ id: 'a', effect: 'deny', mode: 'shadow' })),
      match(policy({ id: 'b', effect: 'rate_limit', rateLimit: { limit: 1, windowSeconds: 1, per: 'org' } }), 'oops'),
    ];
    expect(policyEntries(matches, new Map([[1, true]]))).toEqual([
      {
        policy_id: 'a',
        name: 'a',
        version: 1,
        effect: 'deny',
        mode: 'shadow',
        condition_error: null,
        rate_limit_exceeded: null,
      },
      {
        policy_id: 'b',
        name: 'b',
        version: 1,
        effect: 'rate_limit',
        mode: 'enforce',
        condition_error: 'oops',
        rate_limit_exceeded: true,
      },
    ]);
  });
});
