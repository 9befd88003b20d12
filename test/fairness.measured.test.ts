/**
 * One org's flood leaves the others their share of the process: while org A keeps 16 executes in
 * flight, org B's p99, one request at a time, stays within 2× of B's p99 without the flood (the
 * measured bar), and A is still served; an org past its waiting limit is answered 429 with
 * `period: "concurrent"`. The service runs as a process of its own and the load comes from client
 * processes (scripts/load-client.mjs), so that nothing measured shares an event loop with the
 * measuring. Windows with and without the flood alternate, so that whatever else the machine does
 * weighs on both.
 *
 * The p99s are of each condition's samples pooled over its windows (≈4,000 of B's requests alone
 * here), not the median of each window's p99: a window's p99 is its few slowest requests, and one
 * stall of a shared machine moved B's p99 alone from 7 to 19 ms between two windows of one run,
 * which put that estimate at 1.0–2.3 from run to run (CI failed it at 2.01) while the pooled ratio
 * stayed at 1.2–2.0 (2026-11-30, PGlite, 2 cores).
 *
 * B, one request at a time, would get about half the loop against A with turns alone, and its p99
 * doubled (ratio 1.7–2.4 on 2 cores, both backends): the scheduler anticipates B's next request
 * (src/lib/fair-scheduler.ts), which is what keeps the ratio under the bar. What is left is the
 * two threads A keeps busy: B's statement waits behind one of A's in the embedded database's
 * thread (one in flight ahead of it on average, ≈1.2 ms each), and its steps behind A's on the
 * event loop.
 */
import { pooledQuantile, runClosedLoop, runLoad, type LoadRequest, type LoadResult } from '../scripts/load.js';
import { LOOPBACK_UPSTREAMS, type TestClient } from './support/app.js';
import { backend, createTestDatabase, type TestDatabase } from './support/database.js';
import { signUp } from './support/fixtures.js';
import { actionBody, readyAgent } from './support/gateway.js';
import { startRecordingServer, type Hit } from './support/recording-server.js';
import { killAllServices, startReadyService, type Service } from './support/service-process.js';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';

const ROUNDS = 6;
const WINDOW_SECONDS = 3;
const FLOOD = 16;
/** B's p99 during A's flood, at most this many times B's p99 alone. */
const BAR = 2;

let database: TestDatabase | undefined;
let dataDir: string | undefined;
// One service at a time: a PGlite data directory takes one process.
afterEach(() => killAllServices(), 30_000);
afterAll(async () => {
  await killAllServices();
  await database?.close();
  if (dataDir) await rm(dataDir, { recursive: true, force: true });
}, 60_000);

async function startService(env: Record<string, string> = {}): Promise<Service> {
  if (backend === 'postgresql') {
    database ??= await createTestDatabase();
    return startReadyService({ databaseUrl: database.url, env: { ...LOOPBACK_UPSTREAMS, LOG_LEVEL: 'warn', ...env } });
  }
  dataDir ??= await mkdtemp(path.join(os.tmpdir(), 'agw-fairness-'));
  return startReadyService({ dataDir, env: { ...LOOPBACK_UPSTREAMS, LOG_LEVEL: 'warn', ...env } });
}

/** An org with an agent whose budget the test cannot exhaust, and the request that executes for it. */
async function orgExecute(service: Service, prefix: string, params?: Record<string, unknown>) {
  const org = await signUp(service as TestClient, prefix);
  const agent = await readyAgent(service, org, {
    constraints: { max_actions_per_hour: 10_000_000, max_actions_per_day: 10_000_000 },
  });
  return {
    url: `${service.base}/api/v1/gateway/execute`,
    headers: { 'content-type': 'application/json', 'x-api-key': agent.key },
    body: JSON.stringify(actionBody(agent, 'read', params)),
  };
}

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];
const ok = (result: LoadResult) => ({ statuses: result.statuses, failures: result.failures });

/**
 * B's pooled p99s alone and during each of `floods`, over windows that alternate (alone, then each
 * flood beside B); every request answered 200, and each flood served too, not starved.
 */
async function p99sDuring(quiet: LoadRequest, floods: readonly LoadRequest[]) {
  for (const flood of floods) await runLoad(flood, { seconds: 1, concurrency: FLOOD });
  await runLoad(quiet, { seconds: 1, concurrency: 1 });
  const alone: LoadResult[] = [];
  const beside = floods.map(() => ({ quiet: [] as LoadResult[], flood: [] as LoadResult[] }));
  for (let round = 0; round < ROUNDS; round++) {
    alone.push(await runLoad(quiet, { seconds: WINDOW_SECONDS, concurrency: 1, samples: true }));
    for (const [i, flood] of floods.entries()) {
      const [a, b] = await Promise.all([
        runLoad(flood, { seconds: WINDOW_SECONDS, concurrency: FLOOD }),
        runLoad(quiet, { seconds: WINDOW_SECONDS, concurrency: 1, samples: true }),
      ]);
      beside[i].flood.push(a);
      beside[i].quiet.push(b);
    }
  }
  for (const result of [...alone, ...beside.flatMap((windows) => [...windows.quiet, ...windows.flood])])
    expect(ok(result)).toEqual({ statuses: { 200: result.requests }, failures: 0 });
  for (const windows of beside) expect(median(windows.flood.map((r) => r.rps))).toBeGreaterThan(0);
  const during = beside.map((windows) => pooledQuantile(windows.quiet, 0.99));
  const measured =
    `B's p99 alone ${pooledQuantile(alone, 0.99)} ms (each window's: ${alone.map((r) => r.p99).join(', ')})` +
    beside
      .map(
        (windows, i) =>
          `; during flood ${i + 1}: ${during[i]} ms (${windows.quiet.map((r) => r.p99).join(', ')}; ` +
          `its req/s: ${windows.flood.map((r) => r.rps).join(', ')})`,
      )
      .join('');
  return { alone: pooledQuantile(alone, 0.99), during, measured };
}

test(`org B's p99 while org A keeps ${FLOOD} executes in flight stays within ${BAR}x of B's p99 without it (${backend})`, async () => {
  const service = await startService();
  const flood = await orgExecute(service, 'flood');
  const quiet = await orgExecute(service, 'quiet');
  const { alone, during, measured } = await p99sDuring(quiet, [flood]);
  const ratio = during[0] / alone;
  console.log(`org B's p99 during org A's flood (${backend}): ratio ${ratio.toFixed(2)}: ${measured}`);
  expect({ measured, within: ratio <= BAR }).toEqual({ measured, within: true });
}, 240_000);

/**
 * B's p99 during A's flood with its costly policies, at most this many times B's p99 during the
 * same flood without them: the fairness bar. Measured 1.7 on PGlite (2 cores, 2026-12-01), where
 * A's serialized transaction, with its 1 MiB journal entry, holds the one connection B's
 * statements wait for; 0.9 on PostgreSQL.
 */
const POLICY_BAR = BAR;

/**
 * The issue's cost test: A's policies read 1,000 entries of history and run the three detectors
 * over 1 MiB of params on every execute, within the evaluation budget (allowed and labelled, no
 * condition fails), and what they cost does not reach B. The control is the same flood of 1 MiB
 * calls from an org without policies: a 1 MiB call costs every org's latency something on its own
 * (reading, hashing and storing the params), which is not the policies' and is reported beside.
 */
test(`org B's p99 during org A's executes that each read 1000 entries of history and scan 1 MiB of params is within ${POLICY_BAR}x of B's p99 during the same executes without the policies (${backend})`, async () => {
  const service = await startService();
  const quiet = await orgExecute(service, 'quiet-costly');
  const prose = 'The quarterly report is attached; please review the figures before Friday. '.repeat(13_500);
  const plain = await orgExecute(service, 'plain', { body: prose });
  const org = await signUp(service as TestClient, 'costly');
  const agent = await readyAgent(service, org, {
    constraints: { max_actions_per_hour: 10_000_000, max_actions_per_day: 10_000_000 },
  });
  const policies = [
    {
      name: 'sees its history',
      effect: 'deny',
      history_window_seconds: 86_400,
      target: { capabilities: ['billing:*'] },
      condition: 'history.exists(h, "exfiltrated" in h.labels)',
    },
    {
      name: 'scans what goes out',
      effect: 'label',
      labels: ['scanned'],
      target: { capabilities: ['billing:*'] },
      condition: 'secrets(params).size() == 0 && pii(params).size() == 0 && hidden_text(params).size() == 0',
    },
  ];
  for (const policy of policies) {
    const created = await service.request('POST', '/api/v1/policies', { token: org.adminToken, body: policy });
    expect(created.status).toBe(201);
  }
  const small = {
    ...plain,
    headers: { ...plain.headers, 'x-api-key': agent.key },
    body: JSON.stringify(actionBody(agent)),
  };
  // 1,000 entries in the window before the measuring.
  expect((await runClosedLoop(small, { connections: 4, amount: 1000 })).statuses).toEqual({ 200: 1000 });
  const costly = { ...small, body: JSON.stringify(actionBody(agent, 'read', { body: prose })) };
  const one = await service.request('POST', '/api/v1/gateway/execute', {
    apiKey: agent.key,
    body: JSON.parse(costly.body),
  });
  expect(one.body).toMatchObject({ decision: 'allow', labels: ['scanned'] });
  expect(one.body.policies.map((p: { condition_error: string | null }) => p.condition_error)).toEqual([null]);
  const { alone, during, measured } = await p99sDuring(quiet, [costly, plain]);
  const ratio = during[0] / during[1];
  console.log(
    `org B's p99 during org A's costly flood against the same flood without policies (${backend}): ratio ` +
      `${ratio.toFixed(2)}; against B alone ${(during[0] / alone).toFixed(2)} and ${(during[1] / alone).toFixed(2)}: ${measured}`,
  );
  expect({ measured, within: ratio <= POLICY_BAR }).toEqual({ measured, within: true });
}, 400_000);

// PostgreSQL only: the org's requests must hold their turns while others arrive, and on PGlite a
// request holds its turn only within one pass of the event loop. Here they wait for the org's
// record chain, locked by the test (the unit tests of the scheduler cover the rule on its own).
(backend === 'postgresql' ? test : test.skip)(
  'an org past its waiting limit is answered 429 POLICY_VIOLATION with period "concurrent"; another org is not',
  async () => {
    const service = await startService({ ORG_MAX_CONCURRENCY: '1', MAX_CONCURRENT_REQUESTS: '1', ORG_MAX_QUEUED: '2' });
    const org = await signUp(service, 'burst');
    const agent = await readyAgent(service, org);
    const quiet = await orgExecute(service, 'calm');
    expect(
      (await service.request('POST', '/api/v1/gateway/execute', { apiKey: agent.key, body: actionBody(agent) })).status,
    ).toBe(200);
    const { burst, calm } = await database!.db.sql.transaction(async (tx) => {
      await tx.query('SELECT seq FROM record_chain_heads WHERE org_id = $1::uuid FOR UPDATE', [org.orgId]);
      let answered = 0;
      const sent = Array.from({ length: 12 }, (_, i) =>
        service
          .request('POST', '/api/v1/gateway/execute', { apiKey: agent.key, body: actionBody(agent, 'read', { i }) })
          .then((response) => (answered++, response)),
      );
      // Three get into the process: the one running waits for the chain, two wait for their turn
      // (a request that gave its turn back for its tool and is back waits among them); the others
      // are refused at once, whenever they arrive.
      const deadline = Date.now() + 20_000;
      while (answered < 9 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 50));
      // Another org is not held up by this one's queue.
      const other = await service.request('POST', '/api/v1/gateway/execute', {
        headers: quiet.headers,
        body: quiet.body,
      });
      return { burst: sent, calm: other };
    });
    const answers = await Promise.all(burst);
    const refused = answers.filter((r) => r.status === 429);
    expect({ refused: refused.length, served: answers.filter((r) => r.status === 200).length }).toEqual({
      refused: 9,
      served: 3,
    });
    expect(refused[0].body.error).toMatchObject({
      code: 'POLICY_VIOLATION',
      details: { period: 'concurrent', limit: 3 },
    });
    // Refused as the fourth: three in the process, running or waiting (one back from its tool
    // waits beside the new ones; src/lib/fair-scheduler.ts).
    expect(refused[0].body.error.details.current).toBe(4);
    expect(refused[0].headers.get('retry-after')).toBe('1');
    expect(calm.status).toBe(200);
  },
  120_000,
);

test('a request waiting for its tool gives its turn back: the org’s other requests run meanwhile, even with one turn per org', async () => {
  const hits: Hit[] = [];
  const held: (() => void)[] = [];
  const tool = await startRecordingServer(hits, (_hit, res) =>
    held.push(() => res.writeHead(200, { 'content-type': 'application/json' }).end('{}')),
  );
  try {
    const service = await startService({ ORG_MAX_CONCURRENCY: '1', MAX_CONCURRENT_REQUESTS: '1' });
    const org = await signUp(service, 'tool-wait');
    const agent = await readyAgent(service, org, { tool: false });
    const created = await service.request('POST', `/api/v1/orgs/${org.orgId}/tools`, {
      token: org.adminToken,
      body: {
        action_type: 'billing',
        connector: 'http',
        config: { url: `${tool.base}/tool`, allow_private_network: true, timeout_ms: 60_000 },
      },
    });
    expect(created.status).toBe(201);
    const slow = service.request('POST', '/api/v1/gateway/execute', { apiKey: agent.key, body: actionBody(agent) });
    const deadline = Date.now() + 30_000;
    while (!held.length && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
    expect(held).toHaveLength(1);
    // The org's only turn is not held while its tool is: an evaluate of the same org is answered now.
    const meanwhile = await service.request('POST', '/api/v1/gateway/evaluate', {
      apiKey: agent.key,
      body: actionBody(agent),
    });
    expect(meanwhile.status).toBe(200);
    expect(held).toHaveLength(1);
    held[0]();
    expect((await slow).status).toBe(200);
  } finally {
    await tool.close();
  }
}, 120_000);
