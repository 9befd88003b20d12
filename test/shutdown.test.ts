/**
 * SIGTERM ends the real service (a child process) within SHUTDOWN_GRACE_MS plus a few seconds,
 * whatever it is doing: after traffic with a stdout nobody reads any more or that was closed, with
 * a request in flight, with a webhook attempt in flight. The child runs on the suite's backend
 * (embedded PGlite in a temporary DATA_DIR, or a PostgreSQL database of its own).
 */
import { rm } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { openDatabase } from '../src/db/database.js';
import { LOOPBACK_UPSTREAMS } from './support/app.js';
import { backend, createTestDatabase, type TestDatabase } from './support/database.js';
import { signUp } from './support/fixtures.js';
import { actionBody, execute, readyAgent } from './support/gateway.js';
import { killAllServices, startReadyService, waitExit, type Service } from './support/service-process.js';
import { migratedDataDir } from './support/pglite-template.js';

const GRACE_MS = 2000;
/**
 * What the service promises: grace, then at most 3 s to close the database and 1 s for the last
 * log lines; 1 s later its watchdog kills it.
 */
const WATCHDOG_KILLS_AFTER_MS = GRACE_MS + 5000;
/**
 * With a margin for a loaded machine. Before the fix, a stdout whose reader stopped reading kept
 * the process alive for good.
 */
const EXIT_BOUND_MS = WATCHDOG_KILLS_AFTER_MS + 3000;
const TEST_TIMEOUT_MS = 120_000;

const databases: TestDatabase[] = [];
const tempDirs: string[] = [];

/** A fresh database on the suite's backend, for one service process. */
async function freshStorage(): Promise<{ dataDir?: string; databaseUrl?: string }> {
  if (backend === 'postgresql') {
    const database = await createTestDatabase();
    databases.push(database);
    return { databaseUrl: database.url };
  }
  // Migrated already: what is under test is the stop, not a first start.
  const dataDir = await migratedDataDir('agw-shutdown-');
  tempDirs.push(dataDir);
  return { dataDir };
}

async function startOnFreshStorage(env: Record<string, string> = {}, preload?: string) {
  const storage = await freshStorage();
  const service = await startReadyService({
    ...storage,
    env: { ...LOOPBACK_UPSTREAMS, SHUTDOWN_GRACE_MS: String(GRACE_MS), ...env },
    preload,
  });
  return { service, storage };
}

/** Sends SIGTERM and waits for the exit, failing past EXIT_BOUND_MS. */
async function terminate(service: Service) {
  const sentAt = Date.now();
  service.child.kill('SIGTERM');
  const exit = await waitExit(service, EXIT_BOUND_MS);
  return { ...exit, afterMs: Date.now() - sentAt };
}

/** Requests whose log lines are long (the path is logged), to fill a pipe quickly. */
async function loggedTraffic(service: Service, requests: number) {
  const longPath = `/api/v1/no-such-route/${'x'.repeat(4000)}`;
  const statuses: number[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: 16 }, async () => {
      while (next < requests) {
        next++;
        statuses.push((await service.request('GET', longPath)).status);
      }
    }),
  );
  return statuses;
}

// A receiver on 127.0.0.1 that takes requests and never answers them.
const silentRequests: http.IncomingMessage[] = [];
let silentReceiver: http.Server;
let silentUrl: string;

/** Resolves once the silent receiver has `count` requests open. */
async function silentRequestsOpen(count: number) {
  const until = Date.now() + 30_000;
  while (silentRequests.length < count) {
    if (Date.now() > until) throw new Error(`the receiver got ${silentRequests.length} of ${count} requests`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

beforeAll(async () => {
  silentReceiver = http.createServer((req) => {
    silentRequests.push(req);
  });
  await new Promise<void>((resolve) => silentReceiver.listen(0, '127.0.0.1', resolve));
  silentUrl = `http://127.0.0.1:${(silentReceiver.address() as AddressInfo).port}`;
});

beforeEach(() => {
  silentRequests.length = 0;
});

afterEach(killAllServices, 30_000);

afterAll(async () => {
  await killAllServices();
  silentReceiver.closeAllConnections();
  await new Promise<void>((resolve) => silentReceiver.close(() => resolve()));
  await Promise.all(databases.map((database) => database.close()));
  await Promise.all(tempDirs.map((dir) => rm(dir, { recursive: true, force: true })));
}, 30_000);

describe(`SIGTERM ends the service within the grace period plus a few seconds (${backend})`, () => {
  test(
    'after traffic, with a stdout nobody reads any more: requests are still answered, and the lost log lines are reported',
    async () => {
      const { service } = await startOnFreshStorage();
      // The reader stops reading: the pipe fills after a few hundred KiB of log lines.
      service.child.stdout!.pause();
      const statuses = await loggedTraffic(service, 2000);
      expect(statuses).toEqual(Array(2000).fill(404));

      const exit = await terminate(service);
      expect(exit).toMatchObject({ code: 0, signal: null });
      expect(exit.afterMs).toBeLessThan(EXIT_BOUND_MS);
      // Not silently: the service says on stderr that stdout did not take everything.
      expect(service.stderr.join('')).toMatch(
        /stdout did not take every log line before exit \(\d+ bytes queued, \d+ lines dropped\)/,
      );
    },
    TEST_TIMEOUT_MS,
  );

  test(
    'after traffic, with stdout closed by its reader: requests are still answered and the process stays up until SIGTERM',
    async () => {
      const { service } = await startOnFreshStorage();
      service.child.stdout!.destroy();
      const statuses = await loggedTraffic(service, 500);
      expect(statuses).toEqual(Array(500).fill(404));
      expect((await service.request('GET', '/readyz')).status).toBe(200);

      const exit = await terminate(service);
      expect(exit).toMatchObject({ code: 0, signal: null });
      expect(exit.afterMs).toBeLessThan(EXIT_BOUND_MS);
    },
    TEST_TIMEOUT_MS,
  );

  test(
    'with a request in flight (a tool that never answers): it gets the grace period, then the process exits',
    async () => {
      const { service } = await startOnFreshStorage();
      const org = await signUp(service, 'shutdown');
      const agent = await readyAgent(service, org, { tool: false });
      const tool = await service.request('POST', `/api/v1/orgs/${org.orgId}/tools`, {
        token: org.adminToken,
        body: {
          action_type: 'billing',
          connector: 'http',
          config: { url: `${silentUrl}/tool`, timeout_ms: 60_000, allow_private_network: true },
        },
      });
      expect(tool.status).toBe(201);

      const inFlight = execute(service, agent, actionBody(agent)).then(
        (response) => ({ answered: response.status, at: Date.now() }),
        () => ({ answered: 'connection closed', at: Date.now() }),
      );
      await silentRequestsOpen(1);
      const sentAt = Date.now();
      const exit = await terminate(service);
      expect(exit).toMatchObject({ code: 0, signal: null });
      expect(exit.afterMs).toBeLessThan(EXIT_BOUND_MS);
      const request = await inFlight;
      expect(request.answered).toBe('connection closed');
      // Drained for the grace period before its connection was closed.
      expect(request.at - sentAt).toBeGreaterThanOrEqual(GRACE_MS - 100);
      expect(service.logs.map((line) => line.msg)).toEqual(
        expect.arrayContaining(['shutting down: draining requests', 'stopped']),
      );
    },
    TEST_TIMEOUT_MS,
  );

  test(
    'with a webhook attempt in flight to a receiver that never answers: the attempt is aborted and stays pending for a retry',
    async () => {
      const { service, storage } = await startOnFreshStorage({ WEBHOOK_TIMEOUT_MS: '60000' });
      const org = await signUp(service, 'shutdown');
      const webhook = await service.request('POST', `/api/v1/orgs/${org.orgId}/webhooks`, {
        token: org.adminToken,
        body: { url: `${silentUrl}/webhook`, events: ['approval.requested'], allow_private_network: true },
      });
      expect(webhook.status).toBe(201);
      const agent = await readyAgent(service, org, {
        constraints: {
          max_actions_per_hour: 100,
          max_actions_per_day: 100,
          require_human_approval: ['billing:refund'],
        },
      });
      const asked = await execute(service, agent, actionBody(agent, 'refund', { amount: 40 }));
      expect(asked.body.reasons.map((r: { code: string }) => r.code)).toEqual(['APPROVAL_REQUIRED']);
      await silentRequestsOpen(1);

      const exit = await terminate(service);
      expect(exit).toMatchObject({ code: 0, signal: null });
      expect(exit.afterMs).toBeLessThan(EXIT_BOUND_MS);

      // Read after the exit (PGlite is single-process): counted as claimed, not as a failure.
      const db = await openDatabase({ ...storage, migrate: false });
      try {
        const deliveries = await db.sql.query<{ status: string; attempts: number; last_error: string | null }>(
          'SELECT status::text AS status, attempts, last_error FROM webhook_deliveries WHERE webhook_id = $1',
          [webhook.body.webhook_id],
        );
        expect(deliveries).toEqual([{ status: 'pending', attempts: 1, last_error: null }]);
      } finally {
        await db.close();
      }
    },
    TEST_TIMEOUT_MS,
  );

  test(
    'with the main thread stuck in a futex wait on exit after SIGTERM: its watchdog thread kills the process',
    async () => {
      const { service } = await startOnFreshStorage(
        {},
        fileURLToPath(new URL('./support/stuck-after-sigterm.ts', import.meta.url)),
      );
      const exit = await terminate(service);
      expect(exit).toMatchObject({ code: null, signal: 'SIGKILL' });
      expect(exit.afterMs).toBeLessThan(EXIT_BOUND_MS);
      // Not before the orderly path had its chance: grace, finishing and the last log lines.
      expect(exit.afterMs).toBeGreaterThanOrEqual(WATCHDOG_KILLS_AFTER_MS - 100);
      expect(service.stderr.join('')).toContain(
        'agent-gateway: shutdown after SIGTERM did not end the process in time; killing the process (SIGKILL)',
      );
    },
    TEST_TIMEOUT_MS,
  );
});
