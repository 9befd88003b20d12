import { print } from 'graphql';
import { CreatePolicyDocument } from '../../generated/graphql.js';
import { startTestApp, type TestApp } from '../../support/app.js';
import { signUp, type OrgFixture } from '../../support/fixtures.js';
import { actionBody, evaluate, readyAgent, type AgentFixture } from '../../support/gateway.js';

/**
 * One org's policy condition cannot take the process from the others: a condition whose cost
 * grows with the square of the params is refused at save (REST and GraphQL), and one that is
 * linear but heavy over big params is stopped by the evaluation budget, failing closed, while
 * another org's evaluates go on as fast as under the same traffic with a cheap condition.
 */

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

async function createPolicy(org: OrgFixture, body: Record<string, unknown>) {
  const created = await t.request('POST', '/api/v1/policies', { token: org.adminToken, body });
  if (created.status !== 201) throw new Error(`policy failed: ${created.status} ${created.text}`);
  return created.body as { policy_id: string };
}

describe('refused at save', () => {
  const quadratic = 'params.l.all(x, x in params.l)';
  const refusal = {
    field: 'condition',
    message: expect.stringMatching(
      /^at line 1, column 22: `in` over `params\.l` inside `all` is not allowed: .* the square of the params$/,
    ),
    position: { offset: 21, line: 1, column: 22 },
  };

  test('REST: 422 on `condition`, naming the construct and where it is', async () => {
    const org = await signUp(t, 'cost');
    const response = await t.request('POST', '/api/v1/policies', {
      token: org.adminToken,
      body: { name: 'quadratic', effect: 'deny', condition: quadratic },
    });
    expect(response.status).toBe(422);
    expect(response.body.error).toMatchObject({ code: 'VALIDATION_ERROR', details: { errors: [refusal] } });
  });

  test('GraphQL: the same 422 in extensions', async () => {
    const org = await signUp(t, 'cost');
    const response = await t.graphql(
      print(CreatePolicyDocument),
      { name: 'quadratic', effect: 'deny', condition: quadratic },
      { token: org.adminToken },
    );
    expect(response.body.errors[0].extensions).toMatchObject({
      code: 'VALIDATION_ERROR',
      details: { errors: [refusal] },
    });
  });
});

/** `quantile` (0–1) of the samples. */
function quantile(samples: number[], q: number): number {
  const sorted = [...samples].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
}

function mean(samples: number[]): number {
  return samples.reduce((sum, sample) => sum + sample, 0) / samples.length;
}

/** What B saw while A flooded: the milliseconds of each of B's evaluates, and how many A sent meanwhile. */
interface Phase {
  latencies: number[];
  floodRequests: number;
}

describe('a heavy condition of one org, flooded with big params', () => {
  const samples = 20;
  const clauses = Array.from({ length: 60 }, (_, i) => `x != ${i}.5`).join(' && ');
  // Linear, so accepted (240 of the 300 nodes allowed); over 40,000 elements ≈10 million operations,
  // 200 times the default budget, ≈0.6 s of CPU without one.
  const heavy = `params.l.all(x, x >= 0 && ${clauses})`;
  // The control: the same requests, a condition whose cost does not depend on them.
  const cheap = 'params.l.size() > 0';
  let a: { org: OrgFixture; agent: AgentFixture };
  let b: { org: OrgFixture; agent: AgentFixture };
  let bigRead: string;
  let bigRefund: string;

  beforeAll(async () => {
    const world = async (prefix: string) => {
      const org = await signUp(t, prefix);
      return { org, agent: await readyAgent(t, org) };
    };
    [a, b] = [await world('flooder'), await world('neighbour')];
    await createPolicy(a.org, {
      name: 'heavy',
      effect: 'deny',
      target: { capabilities: ['billing:refund'] },
      condition: heavy,
    });
    await createPolicy(a.org, {
      name: 'cheap',
      effect: 'deny',
      target: { capabilities: ['billing:read'] },
      condition: cheap,
    });
    await createPolicy(b.org, { name: 'big refunds', effect: 'deny', condition: 'params.amount > 1000' });
    // 40,000 distinct integers: ≈224 KiB of params. Serialized once, so the flood costs the test little.
    const l = Array.from({ length: 40_000 }, (_, i) => i * 7);
    bigRead = JSON.stringify(actionBody(a.agent, 'read', { l }));
    bigRefund = JSON.stringify(actionBody(a.agent, 'refund', { l }));
  });

  const evaluateA = (body: string) => t.request('POST', '/api/v1/gateway/evaluate', { apiKey: a.agent.key, body });

  /**
   * B's evaluates one after the other while A keeps `concurrency` evaluates of `body` in flight:
   * from A's second answer on, until B has `samples` and A has answered eight more times.
   */
  async function phase(body: string | null, concurrency = 2): Promise<Phase> {
    let done = false;
    let floodRequests = 0;
    // Not a timer: the in-process app answers in promise continuations, which run before timers.
    let flowing = () => {};
    const floodFlowing = new Promise<void>((resolve) => (flowing = resolve));
    const flood = async () => {
      while (body && !done) {
        const response = await evaluateA(body).catch((error: Error) => ({ status: 0, text: error.message }));
        if (response.status !== 200) {
          done = true;
          flowing();
          throw new Error(`flood: ${response.status} ${response.text}`);
        }
        if (++floodRequests === concurrency) flowing();
      }
    };
    const flooders = Array.from({ length: concurrency }, flood);
    const latencies: number[] = [];
    try {
      if (body) await floodFlowing;
      const counted = floodRequests;
      while (
        !done &&
        (latencies.length < samples || (body && floodRequests < counted + 8 && latencies.length < 10 * samples))
      ) {
        const started = performance.now();
        const response = await evaluate(t, b.agent, actionBody(b.agent, 'read', { amount: 5 }));
        latencies.push(performance.now() - started);
        expect(response.body.decision).toBe('allow');
      }
    } finally {
      done = true;
      await Promise.all(flooders);
    }
    return { latencies, floodRequests };
  }

  test("A's evaluation stops at the budget and fails closed: the policy matches with condition_error", async () => {
    const response = await evaluateA(bigRefund);
    expect(response.status).toBe(200);
    expect(response.body.decision).toBe('deny');
    expect(response.body.policies).toEqual([
      expect.objectContaining({ name: 'heavy', condition_error: 'evaluation budget exceeded' }),
    ]);
    expect(response.body.reasons[0]).toMatchObject({
      code: 'POLICY_DENIED',
      details: { condition_error: 'evaluation budget exceeded' },
    });
  });

  /** The fastest of `rounds` evaluates of A's, one at a time: what one costs without the noise of a loaded machine. */
  async function fastest(body: string, rounds = 7): Promise<number> {
    let best = Infinity;
    for (let i = 0; i < rounds; i++) {
      const started = performance.now();
      await evaluateA(body);
      best = Math.min(best, performance.now() - started);
    }
    return best;
  }

  test("B's evaluates during the flood are as fast as under the same flood with a cheap condition", async () => {
    await phase(null); // warm-up
    const idle = await phase(null);
    const control = await phase(bigRead);
    const flooded = await phase(bigRefund);
    const alone = { cheap: await fastest(bigRead), heavy: await fastest(bigRefund) };
    const ms = (samples: number[], q: number) => +quantile(samples, q).toFixed(1);
    const summary = (p: Phase) => ({
      mean: +mean(p.latencies).toFixed(1),
      p50: ms(p.latencies, 0.5),
      p90: ms(p.latencies, 0.9),
      samples: p.latencies.length,
      floodRequests: p.floodRequests,
    });
    const report = JSON.stringify({
      b: { idle: summary(idle), control: summary(control), flooded: summary(flooded) },
      aAlone: alone,
    });
    const holds = (claim: boolean) => expect([report, claim]).toEqual([report, true]);
    // One of A's evaluates costs what its big body costs (≈10–30 ms here), not what its condition
    // would without the budget (≈0.6 s more).
    holds(alone.heavy <= 2 * alone.cheap + 10);
    // B's latency as a ratio to B's own under the same traffic with a cheap condition. Against B
    // idle (≈1 ms) it is dominated by A's 224 KiB bodies, which no condition budget changes.
    // The mean, not the median: each of B's evaluates either slips in between A's (≈2 ms) or
    // waits behind one of A's bodies (≈20–50 ms), so over 20 samples the median lands on either
    // mode by chance (CI once saw a control median of 2.3 ms against a flooded one of 23.2 ms,
    // with p90s of 48.5 and 45.1). The mean weighs both; without the budget it is hundreds of ms.
    holds(mean(flooded.latencies) <= 2 * mean(control.latencies) + 10);
    // The tail, more loosely: 20 samples make a noisy p90 (without the budget it is seconds).
    holds(quantile(flooded.latencies, 0.9) <= 4 * quantile(control.latencies, 0.9) + 50);
  });
});
