/**
 * Every tool invocation has a record, after any crash: a real service process under execute load
 * is killed with SIGKILL while its http tool (a receiver in this test) holds calls it has received;
 * after a restart every call the tool received has a signed record in an unbroken chain, the calls
 * whose outcome was lost are recorded as EXECUTION_INTERRUPTED, the budget counters equal the
 * allowed records, and the write-ahead journal is empty. On PGlite the restarted process records
 * them before it is ready (it has the data directory to itself); on PostgreSQL once the dead
 * process's journal lease has run out. A surviving process records a dead one's executions
 * without a restart, and never those of a live one.
 */
import { randomBytes } from 'node:crypto';
import { rm } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { PGlite } from '@electric-sql/pglite';
import { LOOPBACK_UPSTREAMS, type TestClient } from '../../support/app.js';
import { backend, createTestDatabase, type TestDatabase } from '../../support/database.js';
import { signUp, type OrgFixture } from '../../support/fixtures.js';
import { actionBody, readyAgent, type AgentFixture } from '../../support/gateway.js';
import { allRecords, expectOneChain, expectTreeOfChain, interrupted, untilRecorded } from '../../support/records.js';
import { migratedDataDir } from '../../support/pglite-template.js';
import {
  killAllServices,
  startReadyService,
  waitExit,
  type Service,
  type ServiceOptions,
} from '../../support/service-process.js';

const TEST_TIMEOUT_MS = 240_000;
/** Calls the receiver answers; it holds every later one, so they are in flight when the process dies. */
const ANSWERED = 40;
const HELD_BEFORE_KILL = 6;

interface Receiver {
  url: string;
  received: string[];
  held: http.ServerResponse[];
  close(): Promise<void>;
}

/** The http tool: counts the interaction ids it receives, answers the first ANSWERED and holds the rest. */
async function startReceiver(): Promise<Receiver> {
  const received: string[] = [];
  const held: http.ServerResponse[] = [];
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      received.push(String(req.headers['x-interaction-id']));
      if (received.length <= ANSWERED) res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}');
      else held.push(res);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/tool`,
    received,
    held,
    async close() {
      for (const res of held) res.destroy();
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

async function until(what: string, condition: () => boolean, timeoutMs = 60_000) {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** An org whose agent executes `billing:read` through an http tool at the receiver. */
async function setUp(service: TestClient, receiver: Receiver) {
  const org = await signUp(service, 'crash');
  // The tests poll every record, 1000 a page, several times a second while thousands accrue: over
  // the default operator limit (1000 requests a minute) when the services are quick.
  const limit = await service.request('PATCH', `/api/v1/orgs/${org.orgId}`, {
    token: org.adminToken,
    body: { operator_rate_limit_per_minute: 100_000 },
  });
  expect(limit.status).toBe(200);
  const agent = await readyAgent(service, org, {
    tool: false,
    constraints: { max_actions_per_hour: 100_000, max_actions_per_day: 100_000 },
  });
  const tool = await service.request('POST', `/api/v1/orgs/${org.orgId}/tools`, {
    token: org.adminToken,
    body: {
      action_type: 'billing',
      connector: 'http',
      config: { url: receiver.url, timeout_ms: 60_000, allow_private_network: true },
    },
  });
  expect(tool.status).toBe(201);
  // A shadow policy matches every action: interrupted records must list it like the others.
  const policy = await service.request('POST', '/api/v1/policies', {
    token: org.adminToken,
    body: { name: 'watch all', effect: 'deny', mode: 'shadow' },
  });
  expect(policy.status).toBe(201);
  return { org, agent };
}

interface Load {
  /** Interaction ids of the allowed executes whose 200 reached the client. */
  answered: Set<string>;
  stop(): Promise<void>;
}

/** `workers` clients executing in a loop until stopped; a failed request (the process died) ends its worker. */
function startLoad(service: Service, agent: AgentFixture, workers: number): Load {
  const answered = new Set<string>();
  let stopped = false;
  const loops = Array.from({ length: workers }, async (_, w) => {
    for (let i = 0; !stopped; i++) {
      try {
        const response = await service.request('POST', '/api/v1/gateway/execute', {
          apiKey: agent.key,
          body: actionBody(agent, 'read', { worker: w, i, nonce: randomBytes(4).toString('hex') }),
        });
        if (response.status === 200 && response.body.decision === 'allow') answered.add(response.body.interaction_id);
      } catch {
        return;
      }
    }
  });
  return {
    answered,
    async stop() {
      stopped = true;
      await Promise.all(loops);
    },
  };
}

/** What the crash must not have broken, read over the API of a live service. */
async function expectEveryInvocationRecorded(
  service: TestClient,
  org: OrgFixture,
  receiver: Receiver,
  answered: Set<string>,
) {
  const records = await allRecords(service, org);
  const byId = new Map(records.map((r) => [r.record_id, r]));
  // Every call the tool received has a record that says it was allowed and executed.
  const unrecorded = receiver.received.filter((id) => !byId.has(id));
  expect(unrecorded).toEqual([]);
  for (const id of receiver.received) expect(byId.get(id)).toMatchObject({ status: 'approved', executed: true });
  // The held calls never answered: their outcome was lost with the process.
  const heldIds = receiver.received.slice(ANSWERED);
  expect(heldIds.length).toBeGreaterThanOrEqual(HELD_BEFORE_KILL);
  for (const id of heldIds) expect(interrupted(byId.get(id)!)).toBe(true);
  for (const record of records) expect(record.policies?.map((p) => p.name)).toEqual(['watch all']);
  // What the client saw allowed is recorded with its result, never as interrupted.
  for (const id of answered) {
    expect(byId.get(id)).toMatchObject({
      status: 'approved',
      executed: true,
      result_hash: expect.stringMatching(/^sha256:/),
    });
    expect(interrupted(byId.get(id)!)).toBe(false);
  }
  expectOneChain(records);
  const sample = [records[0], ...records.filter(interrupted).slice(0, 3), records[records.length - 1]];
  for (const record of sample) {
    const verified = await service.request('GET', `/api/v1/records/${record.record_id}/verify`, {
      token: org.adminToken,
    });
    expect(verified.body).toMatchObject({ valid: true, checks: { hash: true, signature: true, chain: true } });
  }
  return records;
}

/** The budget counters and the journal, read from the database directly. */
async function expectCountersMatch(
  query: (text: string, params: unknown[]) => Promise<Record<string, unknown>[]>,
  org: OrgFixture,
  agent: AgentFixture,
  approved: number,
) {
  const counters = await query('SELECT bucket, count FROM rate_counters WHERE bucket = ANY($1)', [
    [`budget:day:${org.orgId}:${agent.svcId}`],
  ]);
  expect(counters.map((c) => Number(c.count))).toEqual([approved]);
  expect(await query('SELECT id FROM gateway_executions', [])).toEqual([]);
}

let receiver: Receiver;
const tempDirs: string[] = [];
const databases: TestDatabase[] = [];

beforeEach(async () => {
  receiver = await startReceiver();
});
afterEach(async () => {
  await killAllServices();
  await receiver.close();
}, 30_000);
afterAll(async () => {
  await Promise.all(tempDirs.map((dir) => rm(dir, { recursive: true, force: true })));
  await Promise.all(databases.map((d) => d.close()));
}, 60_000);

async function storage(): Promise<{
  options: ServiceOptions;
  query: (text: string, params: unknown[]) => Promise<Record<string, unknown>[]>;
  close(): Promise<void>;
}> {
  if (backend === 'postgresql') {
    const database = await createTestDatabase();
    databases.push(database);
    return {
      options: { databaseUrl: database.url },
      query: (text, params) => database.db.sql.query(text, params),
      close: async () => undefined,
    };
  }
  // Migrated already: what is under test is the recovery, not a first start.
  const dataDir = await migratedDataDir('agw-crash-');
  tempDirs.push(dataDir);
  // PGlite is single-process: read it only while no service runs on it.
  let pglite: PGlite | undefined;
  return {
    options: { dataDir },
    async query(text, params) {
      pglite ??= await PGlite.create(dataDir);
      return (await pglite.query<Record<string, unknown>>(text, params)).rows;
    },
    close: async () => {
      await pglite?.close();
    },
  };
}

test(
  `SIGKILL under load with ${HELD_BEFORE_KILL}+ tool calls in flight: after a restart every call the tool received has a record (${backend})`,
  async () => {
    const store = await storage();
    const first = await startReadyService({ ...store.options, env: { ...LOOPBACK_UPSTREAMS, LOG_LEVEL: 'warn' } });
    const { org, agent } = await setUp(first, receiver);
    const load = startLoad(first, agent, 16);
    await until('held tool calls', () => receiver.held.length >= HELD_BEFORE_KILL);
    first.child.kill('SIGKILL');
    expect(await waitExit(first)).toEqual({ code: null, signal: 'SIGKILL' });
    await load.stop();

    // A short lease, so that PostgreSQL's recovery (once the dead owner's lease ran out) comes soon.
    const second = await startReadyService({
      ...store.options,
      env: {
        ...LOOPBACK_UPSTREAMS,
        LOG_LEVEL: 'warn',
        EXECUTION_LEASE_SECONDS: '3',
        EXECUTION_RECOVERY_SECONDS: '1',
        CHECKPOINT_SECONDS: '0',
      },
    });
    if (backend === 'postgresql') await untilRecorded(second, org, receiver.received);
    const records = await expectEveryInvocationRecorded(second, org, receiver, load.answered);
    // The Merkle tree survived the crash with the chain, the recovered records included.
    await expectTreeOfChain(second, org, records);
    expect(
      second.logs.some((line) => line.msg === 'recorded executions interrupted by a stopped gateway process'),
    ).toBe(true);

    second.child.kill('SIGTERM');
    await waitExit(second);
    await expectCountersMatch(store.query, org, agent, records.filter((r) => r.status === 'approved').length);
    await store.close();
  },
  TEST_TIMEOUT_MS,
);

const onPostgres = backend === 'postgresql' ? test : test.skip;

onPostgres(
  'a surviving process records a dead one’s executions within seconds, and never a live one’s',
  async () => {
    const store = await storage();
    // Leases of 3 s, renewed every second: the survivor may adopt only after the doomed one stopped renewing.
    const env = {
      ...LOOPBACK_UPSTREAMS,
      LOG_LEVEL: 'warn',
      EXECUTION_RECOVERY_SECONDS: '1',
      EXECUTION_LEASE_SECONDS: '3',
      CHECKPOINT_SECONDS: '0',
    };
    const [doomed, survivor] = await Promise.all([
      startReadyService({ ...store.options, env }),
      startReadyService({ ...store.options, env }),
    ]);
    const { org, agent } = await setUp(doomed, receiver);
    const load = startLoad(doomed, agent, 8);
    await until('held tool calls', () => receiver.held.length >= HELD_BEFORE_KILL);
    // The doomed process is alive and its calls are running: several sweeps of the survivor pass.
    await new Promise((resolve) => setTimeout(resolve, 3000));
    const whileAlive = await allRecords(survivor, org);
    expect(whileAlive.filter(interrupted)).toEqual([]);
    const journaled = await store.query('SELECT count(*)::int AS n FROM gateway_executions', []);
    expect(Number(journaled[0].n)).toBeGreaterThanOrEqual(HELD_BEFORE_KILL);

    doomed.child.kill('SIGKILL');
    await waitExit(doomed);
    await load.stop();
    const deadline = Date.now() + 20_000;
    let records = await allRecords(survivor, org);
    while (records.filter(interrupted).length < HELD_BEFORE_KILL && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 250));
      records = await allRecords(survivor, org);
    }
    records = await expectEveryInvocationRecorded(survivor, org, receiver, load.answered);
    await expectTreeOfChain(survivor, org, records);
    await expectCountersMatch(store.query, org, agent, records.filter((r) => r.status === 'approved').length);
  },
  TEST_TIMEOUT_MS,
);
