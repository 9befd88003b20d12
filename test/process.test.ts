/**
 * The real service as a child process on a real port: start-up log, health endpoints, the
 * embedded PGlite database surviving SIGKILL and SIGTERM restarts on the same DATA_DIR, and one
 * process at most on a DATA_DIR (services and the CLI).
 *
 * The child always runs on embedded PGlite: DATABASE_URL is removed from its environment even
 * when the suite itself runs against PostgreSQL.
 */
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { PGlite } from '@electric-sql/pglite';
import { readMigrations } from '../src/db/migrate.js';
import type { TestResponse } from './support/app.js';
import {
  freePort,
  killAllServices,
  startReadyService,
  startService,
  waitExit,
  waitReady,
  type Service,
} from './support/service-process.js';
import { migratedDataDir } from './support/pglite-template.js';
import { nodeArguments } from './support/child-command.js';

const PASSWORD = 'correct horse battery staple';

/** Per test: a few PGlite starts (~3 s each, more with initdb) and the HTTP calls between them. */
const TEST_TIMEOUT_MS = 180_000;

const tempDirs: string[] = [];

/** A new DATA_DIR: empty (the first start runs initdb and the migrations), or already migrated. */
async function tempDataDir(contents: 'empty' | 'migrated' = 'empty'): Promise<string> {
  const dir =
    contents === 'migrated'
      ? await migratedDataDir('agw-process-')
      : await mkdtemp(path.join(os.tmpdir(), 'agw-process-'));
  tempDirs.push(dir);
  return dir;
}

/** Embedded PGlite in DATA_DIR, whatever the suite itself runs on. */
const startReady = (dataDir: string) => startReadyService({ dataDir });

function expectStatus(response: TestResponse, status: number, what: string) {
  if (response.status !== status)
    throw new Error(`${what}: expected ${status}, got ${response.status} ${response.text}`);
}

async function login(service: Service, email: string): Promise<string> {
  const response = await service.request('POST', '/api/v1/auth/login', { body: { email, password: PASSWORD } });
  expectStatus(response, 200, 'login');
  expect(typeof response.body.access_token).toBe('string');
  return response.body.access_token;
}

interface Seeded {
  orgId: string;
  slug: string;
  email: string;
  token: string;
  keyId: string;
  keyName: string;
}

/** Signs an org up and creates an API key, all over HTTP. */
async function seed(service: Service): Promise<Seeded> {
  const slug = `proc-${randomBytes(4).toString('hex')}`;
  const email = `admin@${slug}.example`;
  const created = await service.request('POST', '/api/v1/orgs', {
    body: { name: `Org ${slug}`, slug, admin_email: email, admin_password: PASSWORD },
  });
  expectStatus(created, 201, 'sign-up');
  const orgId: string = created.body.org_id;
  const token = await login(service, email);
  const keyName = `key ${slug}`;
  const key = await service.request('POST', `/api/v1/orgs/${orgId}/api-keys`, {
    token,
    body: { name: keyName, scopes: ['manifests:read'] },
  });
  expectStatus(key, 201, 'create api key');
  return { orgId, slug, email, token, keyId: key.body.key_id, keyName };
}

/** Everything `seed` wrote is readable through `service`. */
async function expectSeeded(service: Service, seeded: Seeded) {
  const token = await login(service, seeded.email);
  const org = await service.request('GET', `/api/v1/orgs/${seeded.orgId}`, { token });
  expectStatus(org, 200, 'read org');
  expect(org.body).toMatchObject({ org_id: seeded.orgId, slug: seeded.slug, name: `Org ${seeded.slug}` });
  const keys = await service.request('GET', `/api/v1/orgs/${seeded.orgId}/api-keys`, { token });
  expectStatus(keys, 200, 'list api keys');
  expect(keys.body.items).toEqual([
    expect.objectContaining({ key_id: seeded.keyId, name: seeded.keyName, scopes: ['manifests:read'] }),
  ]);
  // The signing keys persisted too: a token issued before the restart still verifies.
  const again = await service.request('GET', `/api/v1/orgs/${seeded.orgId}`, { token: seeded.token });
  expectStatus(again, 200, 'read org with the token issued before the restart');
}

afterEach(killAllServices, 30_000);

afterAll(async () => {
  await killAllServices();
  await Promise.all(tempDirs.map((dir) => rm(dir, { recursive: true, force: true })));
}, 30_000);

describe('start-up', () => {
  test(
    'logs the URLs and the database in one line, and answers /healthz and /readyz',
    async () => {
      const dataDir = await tempDataDir();
      const service = await startReady(dataDir);
      const base = `http://localhost:${service.port}`;

      const startLines = service.logs.filter(
        (line) =>
          typeof line.msg === 'string' &&
          line.msg.includes(base) &&
          line.msg.includes(`${base}/graphql`) &&
          line.msg.includes(`${base}/docs`) &&
          line.msg.includes('pglite') &&
          line.msg.includes(dataDir),
      );
      expect(startLines).toHaveLength(1);
      // Embedded PGlite in the temp DATA_DIR even when the suite itself runs with DATABASE_URL.
      expect(startLines[0]).toMatchObject({
        level: 30,
        graphiql: `${base}/graphql`,
        docs: `${base}/docs`,
        database: `pglite ${dataDir}`,
      });

      const health = await service.request('GET', '/healthz');
      expect(health.status).toBe(200);
      expect(health.body).toEqual({ status: 'ok' });

      const ready = await service.request('GET', '/readyz');
      expect(ready.status).toBe(200);
      expect(ready.body).toEqual({ status: 'ok', checks: { database: true } });
    },
    TEST_TIMEOUT_MS,
  );
});

describe('restarts on the same DATA_DIR', () => {
  test(
    'committed data survives SIGKILL, and the next start does not re-apply migrations',
    async () => {
      const dataDir = await tempDataDir();
      const first = await startReady(dataDir);
      const seeded = await seed(first);

      first.child.kill('SIGKILL');
      expect(await waitExit(first)).toEqual({ code: null, signal: 'SIGKILL' });

      // A second migration run on the same database would fail (CREATE TABLE of existing tables)
      // and the service would exit before it is ready.
      const second = await startReady(dataDir);
      await expectSeeded(second, seeded);
      expect(second.logs.filter((line) => line.level >= 50)).toEqual([]);

      // Each migration is recorded once, finished; read with the service stopped (PGlite is
      // single-process), after a second SIGKILL.
      second.child.kill('SIGKILL');
      await waitExit(second);
      const pglite = await PGlite.create(dataDir);
      try {
        const { rows } = await pglite.query<{ migration_name: string; finished: boolean }>(
          'SELECT migration_name, finished_at IS NOT NULL AS finished FROM "_prisma_migrations" ORDER BY migration_name',
        );
        const expected = (await readMigrations()).map((m) => ({ migration_name: m.name, finished: true }));
        expect(rows).toEqual(expected);
        const orgs = await pglite.query('SELECT slug FROM organizations WHERE id = $1', [seeded.orgId]);
        expect(orgs.rows).toEqual([{ slug: seeded.slug }]);
      } finally {
        await pglite.close();
      }
    },
    TEST_TIMEOUT_MS,
  );

  test(
    'SIGTERM stops the service cleanly, and the next start has the data',
    async () => {
      const dataDir = await tempDataDir('migrated');
      const first = await startReady(dataDir);
      const seeded = await seed(first);

      first.child.kill('SIGTERM');
      expect(await waitExit(first)).toEqual({ code: 0, signal: null });
      expect(first.logs.map((line) => line.msg)).toContain('stopped');

      const second = await startReady(dataDir);
      await expectSeeded(second, seeded);

      // And once more after a clean stop of the restarted service.
      second.child.kill('SIGTERM');
      expect(await waitExit(second)).toEqual({ code: 0, signal: null });
      const third = await startReady(dataDir);
      await expectSeeded(third, seeded);
    },
    TEST_TIMEOUT_MS,
  );
});

/** The refusal a second process on a DATA_DIR gets, naming the holder. */
const inUse = (dataDir: string, holder: Service) =>
  `DATA_DIR ${dataDir} is in use by another Agent Gateway process (pid ${holder.child.pid} on ${os.hostname()}, running since `;

/** `agent-gateway rotate-keys` as its own process on the PGlite DATA_DIR. */
function rotateKeys(dataDir: string) {
  const env: NodeJS.ProcessEnv = { ...process.env, DATA_DIR: dataDir };
  delete env.DATABASE_URL;
  delete env.NODE_OPTIONS;
  return spawnSync(process.execPath, [...nodeArguments('cli/agent-gateway'), 'rotate-keys', 'record'], {
    cwd: fileURLToPath(new URL('..', import.meta.url)),
    env,
    encoding: 'utf8',
    timeout: 60_000,
  });
}

describe('one process per DATA_DIR', () => {
  test(
    'a second service on it exits non-zero naming the holder, the first keeps serving, and after kill -9 of the first a new one starts',
    async () => {
      const dataDir = await tempDataDir('migrated');
      const first = await startReady(dataDir);
      const seeded = await seed(first);

      const second = startService(await freePort(), { dataDir });
      expect(await waitExit(second, 60_000)).toEqual({ code: 1, signal: null });
      const refusal = second.logs.find((line) => line.level >= 50);
      expect(refusal?.msg).toContain(`cannot start: ${inUse(dataDir, first)}`);
      expect(refusal?.msg).toContain('set DATABASE_URL to run several processes on PostgreSQL');

      // The first one was not disturbed: it still reads and writes.
      await expectSeeded(first, seeded);
      const more = await seed(first);

      // kill -9 leaves no stale lock behind.
      first.child.kill('SIGKILL');
      await waitExit(first);
      const third = await startReady(dataDir);
      await expectSeeded(third, more);
    },
    TEST_TIMEOUT_MS,
  );

  test(
    'of two services started at the same moment on a new DATA_DIR, exactly one serves',
    async () => {
      const dataDir = await tempDataDir();
      const [portA, portB] = [await freePort(), await freePort()];
      const both = [startService(portA, { dataDir }), startService(portB, { dataDir })];
      const outcomes = await Promise.all(
        both.map((service) =>
          Promise.race([
            waitReady(service).then(() => 'serving' as const),
            service.exited.then(() => 'refused' as const),
          ]).catch(() => 'refused' as const),
        ),
      );
      expect([...outcomes].sort()).toEqual(['refused', 'serving']);
      const winner = both[outcomes.indexOf('serving')];
      const loser = both[outcomes.indexOf('refused')];
      expect(await waitExit(loser, 60_000)).toEqual({ code: 1, signal: null });
      expect(loser.logs.find((line) => line.level >= 50)?.msg).toContain(`cannot start: ${inUse(dataDir, winner)}`);
      await seed(winner);
    },
    TEST_TIMEOUT_MS,
  );

  test(
    '`agent-gateway rotate-keys` refuses it while a service runs on it, and rotates once the service stopped',
    async () => {
      const dataDir = await tempDataDir('migrated');
      const service = await startReady(dataDir);

      const refused = rotateKeys(dataDir);
      expect(refused.status).toBe(2);
      expect(refused.stderr).toContain(`agent-gateway: ${inUse(dataDir, service)}`);
      expect(refused.stdout).toBe('');
      expect((await service.request('GET', '/readyz')).status).toBe(200);

      service.child.kill('SIGTERM');
      expect(await waitExit(service)).toEqual({ code: 0, signal: null });
      const rotated = rotateKeys(dataDir);
      expect(rotated.stderr).toBe('');
      expect(rotated.status).toBe(0);
      expect(rotated.stdout).toMatch(/^record: new active key \S+\n$/);
    },
    TEST_TIMEOUT_MS,
  );
});
