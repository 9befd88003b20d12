/**
 * One org's flood leaves the others their share of the process: while org A keeps 16 executes in
 * flight, org B's p99, one request at a time, stays within 2× of B's p99 without the flood (the
 * measured bar), and A is still served; an org past its waiting limit is answered 429 with
 * `period: "concurrent"`. The service runs as a process of its own and the load comes from client
 * processes (scripts/load-client.mjs), so that nothing measured shares an event loop with the
 * measuring. Windows with and without the flood alternate, so that whatever else the machine does
 * weighs on both; the bar holds for the median over the rounds.
 */
import { runLoad, type LoadResult } from '../scripts/load.js';
import type { TestClient } from './support/app.js';
import { backend, createTestDatabase, type TestDatabase } from './support/database.js';
import { signUp } from './support/fixtures.js';
import { actionBody, readyAgent } from './support/gateway.js';
import { startRecordingServer, type Hit } from './support/recording-server.js';
import { killAllServices, startReadyService, type Service } from './support/service-process.js';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';

const ROUNDS = 3;
const WINDOW_SECONDS = 3;
const FLOOD = 16;

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
    return startReadyService({ databaseUrl: database.url, env: { LOG_LEVEL: 'warn', ...env } });
  }
  dataDir ??= await mkdtemp(path.join(os.tmpdir(), 'agw-fairness-'));
  return startReadyService({ dataDir, env: { LOG_LEVEL: 'warn', ...env } });
}

/** An org with an agent whose budget the test cannot exhaust, and the request that executes for it. */
async function orgExecute(service: Service, prefix: string) {
  const org = await signUp(service as TestClient, prefix);
  const agent = await readyAgent(service, org, { constraints: { max_actions_per_hour: 10_000_000, max_actions_per_day: 10_000_000 } });
  return {
    url: `${service.base}/api/v1/gateway/execute`,
    headers: { 'content-type': 'application/json', 'x-api-key': agent.key },
    body: JSON.stringify(actionBody(agent)),
  };
}

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];
const ok = (result: LoadResult) => ({ statuses: result.statuses, failures: result.failures });

test(
  `org B's p99 while org A keeps ${FLOOD} executes in flight stays within 2x of B's p99 without it (${backend})`,
  async () => {
    const service = await startService();
    const flood = await orgExecute(service, 'flood');
    const quiet = await orgExecute(service, 'quiet');
    await runLoad(flood, { seconds: 1, concurrency: FLOOD });
    await runLoad(quiet, { seconds: 1, concurrency: 1 });
    const alone: LoadResult[] = [];
    const flooded: LoadResult[] = [];
    const floods: LoadResult[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      alone.push(await runLoad(quiet, { seconds: WINDOW_SECONDS, concurrency: 1 }));
      const [a, b] = await Promise.all([
        runLoad(flood, { seconds: WINDOW_SECONDS, concurrency: FLOOD }),
        runLoad(quiet, { seconds: WINDOW_SECONDS, concurrency: 1 }),
      ]);
      floods.push(a);
      flooded.push(b);
    }
    for (const result of [...alone, ...flooded, ...floods]) {
      expect(ok(result)).toEqual({ statuses: { 200: result.requests }, failures: 0 });
    }
    const ratio = median(flooded.map((r) => r.p99)) / median(alone.map((r) => r.p99));
    const detail = `B alone p99 ${alone.map((r) => r.p99).join(', ')} ms; during A's flood ${flooded.map((r) => r.p99).join(', ')} ms`;
    expect({ ratio: Math.round(ratio * 100) / 100, within: ratio <= 2, detail }).toMatchObject({ within: true });
    // The flooding org is served too, not starved.
    expect(median(floods.map((r) => r.rps))).toBeGreaterThan(0);
  },
  240_000,
);

test('an org past its waiting limit is answered 429 POLICY_VIOLATION with period "concurrent"; another org is not', async () => {
  // A slow tool keeps the org's one running request busy, so that the others wait their turn.
  const hits: Hit[] = [];
  const tool = await startRecordingServer(hits, (_hit, res) => setTimeout(() => res.writeHead(200, { 'content-type': 'application/json' }).end('{}'), 300));
  try {
    const service = await startService({ ORG_MAX_CONCURRENCY: '1', MAX_CONCURRENT_REQUESTS: '1', ORG_MAX_QUEUED: '2' });
    const org = await signUp(service, 'burst');
    const agent = await readyAgent(service, org, { tool: false, constraints: { max_actions_per_hour: 1000, max_actions_per_day: 1000 } });
    const created = await service.request('POST', `/api/v1/orgs/${org.orgId}/tools`, {
      token: org.adminToken,
      body: { action_type: 'billing', connector: 'http', config: { url: `${tool.base}/tool`, allow_private_network: true } },
    });
    expect(created.status).toBe(201);
    const quiet = await orgExecute(service, 'calm');
    const burst = await Promise.all(
      Array.from({ length: 12 }, (_, i) =>
        service.request('POST', '/api/v1/gateway/execute', { apiKey: agent.key, body: actionBody(agent, 'read', { i }) }),
      ),
    );
    const refused = burst.filter((r) => r.status === 429);
    // One running and two waiting at any time: most of a burst of 12 is refused, the rest served.
    expect(refused.length).toBeGreaterThanOrEqual(6);
    expect(burst.filter((r) => r.status !== 429 && r.status !== 200)).toEqual([]);
    expect(refused[0].body.error).toMatchObject({ code: 'POLICY_VIOLATION', details: { period: 'concurrent', limit: 3 } });
    expect(refused[0].headers.get('retry-after')).toBe('1');
    const calm = await service.request('POST', '/api/v1/gateway/execute', { headers: quiet.headers, body: quiet.body });
    expect(calm.status).toBe(200);
  } finally {
    await tool.close();
  }
}, 120_000);
