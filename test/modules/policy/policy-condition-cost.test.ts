import { EnvError, parseEnv } from '../../../src/env.js';
import { DEFAULT_EVAL_BUDGET } from '../../../src/modules/policy/policy-condition-budget.js';
import { compileCondition, runCondition, type ConditionFacts } from '../../../src/modules/policy/policy-condition.js';
import { matchPolicies, type ActivePolicy } from '../../../src/modules/policy/policy-rules.js';

/**
 * What a condition may cost (one org's condition must not hold the process): at save, constructs
 * whose cost grows faster than linearly with the params are refused, naming the construct and
 * where it is; at run time every evaluation stops at POLICY_EVAL_BUDGET operations and fails closed.
 */

function facts(params: Record<string, unknown>): ConditionFacts {
  return {
    agent: { id: 'billing-agent', name: 'Billing agent', version: '1.0.0', team: 'payments' },
    action: { type: 'billing', tool: 'refund', capability: 'billing:refund', params },
    params,
    key: { id: 'key-1', prefix: 'agk_abcd', scopes: ['gateway:execute'] },
    request: {
      time: new Date(Date.UTC(2026, 10, 23, 13, 30)),
      hour: 13n,
      weekday: 1n,
      channel: 'rest',
      mode: 'evaluate',
    },
  };
}

function compiled(condition: string) {
  const result = compileCondition(condition);
  if (!result.ok) throw new Error(`refused: ${result.error.message}`);
  return result.condition;
}

const run = (condition: string, params: Record<string, unknown>, budget = DEFAULT_EVAL_BUDGET) =>
  runCondition(compiled(condition), facts(params), budget);

const ints = (n: number) => Array.from({ length: n }, (_, i) => i);
const over = { matched: true, error: 'evaluation budget exceeded' };

describe('refused at save: constructs whose cost grows with the square of the params', () => {
  const quadratic =
    /does not come from `(x|i)`, so every iteration goes through all of it again and the cost grows with the square of the params$/;
  test.each([
    [
      '`in` over a list that does not come from the iteration variable',
      'params.l.all(x, x in params.l)',
      /^`in` over `params\.l` inside `all`/,
      22,
    ],
    [
      '`in` over a dyn map (the library lists its keys to learn its type)',
      'params.l.exists(x, x in params.allowed)',
      /^`in` over `params\.allowed` inside `exists`/,
      25,
    ],
    [
      'a string search on loop-invariant data',
      'params.l.all(x, params.text.contains(x))',
      /^`contains` with `params\.text` inside `all`/,
      17,
    ],
    [
      'a string search for loop-invariant data',
      'params.items.exists(i, i.name.startsWith(params.prefix))',
      /^`startsWith` with `params\.prefix` inside `exists`/,
      42,
    ],
    [
      'size() of what may be a string or a map',
      'params.l.all(x, params.text.size() > x)',
      /^`size` with `params\.text` inside `all`/,
      17,
    ],
    [
      'a conversion of loop-invariant data',
      'params.l.exists(x, string(params.b) == x)',
      /^`string` with `params\.b` inside `exists`/,
      27,
    ],
    [
      'a concatenation with loop-invariant data',
      "params.l.all(x, (params.s + 'a').size() > x)",
      /^concatenating \(`\+`\) `params\.s` inside `all`/,
      18,
    ],
    [
      '`==` on a loop-invariant list',
      'params.l.exists(x, x == [params.l])',
      /^`==` on the list or map `\[params\.l\]` inside `exists`/,
      25,
    ],
    [
      'a variable bound outside the loop',
      'cel.bind(y, params.l, params.l.all(x, x in y))',
      /^`in` over `y` inside `all`/,
      44,
    ],
    [
      'a variable bound inside the loop to loop-invariant data',
      'params.l.all(x, cel.bind(y, params.l, x in y))',
      /^`in` over `y` inside `all`/,
      44,
    ],
  ])('%s', (_, condition, message, column) => {
    const result = compileCondition(condition);
    expect(result.ok).toBe(false);
    if (result.ok) return;
    expect(result.error.message).toMatch(message);
    expect(result.error.message).toMatch(quadratic);
    expect(result.error.position).toEqual({ offset: column - 1, line: 1, column });
  });

  test('a list of n copies of the params built by `map`', () => {
    const result = compileCondition('params.l.map(x, x > 0 ? params.l : []).size() > 0');
    expect(!result.ok && result.error).toEqual({
      message: expect.stringMatching(
        /^`map` yielding `x > 0 \? params\.l : \[\]`, which does not come from `x`, is not allowed: it builds a list of n copies/,
      ),
      position: { offset: 16, line: 1, column: 17 },
    });
  });

  test('a comprehension inside another, on the second line', () => {
    const result = compileCondition('params.amount > 5 &&\n  params.l.all(x, params.m.exists(y, y == x))');
    expect(!result.ok && result.error).toEqual({
      message: '`exists` inside another comprehension is not allowed: its cost grows with the square of the params',
      position: { offset: 39, line: 2, column: 19 },
    });
  });

  test('`duration` of anything but a literal (its parser is cubic in the length of the string)', () => {
    const result = compileCondition('request.time - timestamp(params.since) > duration(params.window)');
    expect(!result.ok && result.error).toEqual({
      message: expect.stringMatching(/^`duration` of anything but a string literal/),
      position: { offset: 41, line: 1, column: 42 },
    });
  });
});

describe('accepted at save: linear conditions', () => {
  test.each([
    'params.amount > 1000 && request.hour < 8',
    'params.items.all(i, i.price < 100)',
    "params.tags.exists(t, t in ['a', 'b'])",
    "action.capability.startsWith('billing:')",
    "'admin' in key.scopes",
    'params.l.size() < 10',
    // A loop-invariant operand of a comparison is normally a scalar; on an aggregate the budget pays.
    'params.items.exists(i, i.sku == params.sku)',
    'params.items.all(i, i.price + params.shipping < double(params.max))',
    // Data derived from the iteration variable adds up to the params once.
    "params.items.all(i, 'x' in i.tags && i.name.startsWith('a') && i.name.size() < 10)",
    'params.items.all(i, i.scope in key.scopes)',
    'params.items.exists(i, i.sku in params)',
    // A range of bounded size repeats its body a bounded number of times.
    "['admin', 'root'].exists(r, r in params.roles)",
    "['a', 'b'].exists(t, params.l.exists(x, x == t))",
    // Comprehensions one after the other, and a loop-invariant value computed once outside.
    'params.l.map(x, x * 2).all(y, y > 0) && params.l.filter(x, x > 0).size() > 2',
    'cel.bind(n, params.l.size(), params.l.all(x, x < n))',
    "params.items.all(i, has(i.sku) && timestamp(i.at) < request.time) && request.time.getHours('Europe/Berlin') < 8",
    "duration('1h') > duration('30m')",
  ])('%s', (condition) => {
    const result = compileCondition(condition);
    expect(result.ok ? null : result.error).toBeNull();
  });
});

describe('the run-time budget', () => {
  test('an evaluation over its budget stops and fails closed; the same under it does not', () => {
    const condition = 'params.l.all(x, x >= 0 && x < 1000000)';
    expect(run(condition, { l: ints(10_000) }, 5_000)).toEqual(over);
    expect(run(condition, { l: ints(10_000) }, 1_000_000)).toEqual({ matched: true, error: null });
    expect(run(condition, { l: ints(100) }, 5_000)).toEqual({ matched: true, error: null });
  });

  test('it stops inside the evaluation: a long list is not read to its end', () => {
    let reads = 0;
    const l = new Proxy(ints(100_000), {
      get(target, property, receiver) {
        if (typeof property === 'string' && /^\d+$/.test(property)) reads += 1;
        return Reflect.get(target, property, receiver);
      },
    });
    expect(run('params.l.all(x, x >= 0)', { l }, 1_000)).toEqual(over);
    expect(reads).toBeLessThan(1_000);
    reads = 0;
    // `exists` keeps a failing iteration's error and goes on: the budget ends that too.
    expect(run('params.l.exists(x, x.missing > 0)', { l }, 50_000)).toEqual(over);
    expect(reads).toBeLessThan(1_000);
  });

  test('work inside one library call is charged before it runs', () => {
    // An `in` scanning a list: one operation per element.
    expect(run('-1 in params.l', { l: ints(20_000) }, 10_000)).toEqual(over);
    expect(run('-1 in params.l', { l: ints(20_000) }, 30_000)).toEqual({ matched: false, error: null });
    // A deep `==` on two maps: five per entry, on both sides.
    const map = () => Object.fromEntries(ints(2_000).map((i) => [`k${i}`, i]));
    expect(run('params.a == params.b', { a: map(), b: map() }, 10_000)).toEqual(over);
    expect(run('params.a == params.b', { a: map(), b: map() }, 30_000)).toEqual({ matched: true, error: null });
    // A string function on a long string: one per 10 characters.
    const text = 'ab'.repeat(50_000);
    expect(run("params.s.contains('zz')", { s: text }, 5_000)).toEqual(over);
    expect(run("params.s.contains('zz')", { s: text }, 20_000)).toEqual({ matched: false, error: null });
  });

  test('a map the library walks to word an error is charged, however many times it is used', () => {
    const m = Object.fromEntries(ints(5_000).map((i) => [`k${i}`, i]));
    expect(run(Array.from({ length: 20 }, () => 'params.m').join(' || '), { m })).toEqual(over);
    expect(run('params.l.all(x, params.m != x)', { l: ints(1_000), m })).toEqual(over);
  });

  test('ordinary conditions over ordinary params use less than half of the default budget', () => {
    const items = ints(500).map((i) => ({ sku: `sku-${i}`, price: i, qty: 2, tags: ['a', 'b'] }));
    const params = { amount: 750.5, currency: 'EUR', items, customer: { tier: 'gold', tags: ['vip'] } };
    for (const condition of [
      "params.amount > 500 && params.currency == 'EUR' && action.capability.startsWith('billing:') && request.weekday != 0",
      "params.items.all(i, i.price < 1000 && i.qty < 10 && !('blocked' in i.tags))",
      "params.items.exists(i, i.sku == 'sku-499')",
      "params.customer.tags.exists(t, t in ['vip', 'gold']) && size(params.items) < 1000",
    ]) {
      expect([condition, run(condition, params, DEFAULT_EVAL_BUDGET / 2)]).toEqual([
        condition,
        { matched: true, error: null },
      ]);
    }
  });

  test('matchPolicies runs each condition within the budget it is given', () => {
    const policy: ActivePolicy = {
      id: 'p',
      name: 'p',
      version: 1,
      mode: 'enforce',
      priority: 1,
      effect: 'deny',
      svcIds: null,
      capabilities: null,
      condition: compiled('params.l.all(x, x >= 0)'),
      rateLimit: null,
      message: null,
      labels: [],
      historyWindowSeconds: null,
      detectors: [],
    };
    const f = () => facts({ l: ints(1_000) });
    expect(matchPolicies([policy], 'billing-agent', 'billing:refund', f, undefined, 100)[0].conditionError).toBe(
      'evaluation budget exceeded',
    );
    expect(
      matchPolicies([policy], 'billing-agent', 'billing:refund', f, undefined, 100_000)[0].conditionError,
    ).toBeNull();
  });

  test('POLICY_EVAL_BUDGET is read from the environment', () => {
    expect(parseEnv({}).policyEvalBudget).toBe(DEFAULT_EVAL_BUDGET);
    expect(parseEnv({ POLICY_EVAL_BUDGET: '1234' }).policyEvalBudget).toBe(1234);
    expect(() => parseEnv({ POLICY_EVAL_BUDGET: '0' })).toThrow(EnvError);
    expect(() => parseEnv({ POLICY_EVAL_BUDGET: 'lots' })).toThrow(/POLICY_EVAL_BUDGET must be an integer/);
  });
});
