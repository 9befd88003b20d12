/**
 * The real service as a child process on a real port: start-up log, health endpoints, and the
 * embedded PGlite database surviving SIGKILL and SIGTERM restarts on the same DATA_DIR.
 *
 * The child always runs on embedded PGlite: DATABASE_URL is removed from its environment even
 * when the suite itself runs against PostgreSQL.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { PGlite } from '@electric-sql/pglite';
import { readMigrations } from '../src/db/migrate.js';

const root = fileURLToPath(new URL('..', import.meta.url));
const PASSWORD = 'correct horse battery staple';
const READY_TIMEOUT_MS = 60_000;
const EXIT_TIMEOUT_MS = 20_000;

/** Per test: a few PGlite starts (~3 s each, more with initdb) and the HTTP calls between them. */
const TEST_TIMEOUT_MS = 180_000;

interface LogLine {
  level: number;
  msg: string;
  [field: string]: unknown;
}

interface Service {
  child: ChildProcess;
  port: number;
  base: string;
  dataDir: string;
  logs: LogLine[];
  stdout: string[];
  stderr: string[];
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** Child output, for failure messages. */
  output(): string;
}

const running = new Set<Service>();
const tempDirs: string[] = [];

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      if (!address || typeof address === 'string') return reject(new Error('no port'));
      server.close(() => resolve(address.port));
    });
  });
}

async function tempDataDir(): Promise<string> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'agw-process-'));
  tempDirs.push(dir);
  return dir;
}

function start(dataDir: string, port: number): Service {
  const env: NodeJS.ProcessEnv = { ...process.env, PORT: String(port), HOST: '127.0.0.1', DATA_DIR: dataDir, LOG_LEVEL: 'info' };
  // Embedded PGlite in DATA_DIR, whatever the suite runs on.
  delete env.DATABASE_URL;
  delete env.PUBLIC_URL;
  // Jest's --experimental-vm-modules is not for the child.
  delete env.NODE_OPTIONS;
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts'], {
    cwd: root,
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const logs: LogLine[] = [];
  const stdout: string[] = [];
  const stderr: string[] = [];
  let pending = '';
  child.stdout!.setEncoding('utf8');
  child.stdout!.on('data', (chunk: string) => {
    pending += chunk;
    const lines = pending.split('\n');
    pending = lines.pop()!;
    for (const line of lines) {
      if (!line.trim()) continue;
      stdout.push(line);
      try {
        logs.push(JSON.parse(line));
      } catch {
        // Not a log line; kept in stdout for diagnostics.
      }
    }
  });
  child.stderr!.setEncoding('utf8');
  child.stderr!.on('data', (chunk: string) => stderr.push(chunk));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.on('exit', (code, signal) => resolve({ code, signal }));
  });
  const service: Service = {
    child,
    port,
    base: `http://127.0.0.1:${port}`,
    dataDir,
    logs,
    stdout,
    stderr,
    exited,
    output: () => `--- stdout ---\n${[...stdout, pending].join('\n')}\n--- stderr ---\n${stderr.join('')}`,
  };
  running.add(service);
  void exited.then(() => running.delete(service));
  return service;
}

/** Polls /readyz until 200; fails early if the child exits, and after READY_TIMEOUT_MS. */
async function waitReady(service: Service): Promise<void> {
  const deadline = Date.now() + READY_TIMEOUT_MS;
  let exit: { code: number | null; signal: NodeJS.Signals | null } | undefined;
  void service.exited.then((e) => (exit = e));
  let last = 'no response';
  while (Date.now() < deadline) {
    if (exit) throw new Error(`service exited (code ${exit.code}, signal ${exit.signal}) before ready\n${service.output()}`);
    try {
      const response = await fetch(`${service.base}/readyz`, { signal: AbortSignal.timeout(2000) });
      if (response.status === 200) return;
      last = `${response.status} ${await response.text()}`;
    } catch (error) {
      last = String(error);
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  throw new Error(`service not ready after ${READY_TIMEOUT_MS} ms (last: ${last})\n${service.output()}`);
}

async function startReady(dataDir: string): Promise<Service> {
  const service = start(dataDir, await freePort());
  await waitReady(service);
  return service;
}

async function waitExit(service: Service, timeoutMs = EXIT_TIMEOUT_MS) {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`service did not exit within ${timeoutMs} ms\n${service.output()}`)),
      timeoutMs,
    );
  });
  try {
    return await Promise.race([service.exited, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

async function killAll() {
  const all = [...running];
  for (const service of all) service.child.kill('SIGKILL');
  await Promise.all(all.map((service) => service.exited));
}

interface HttpResponse {
  status: number;
  body: any;
  text: string;
}

async function request(
  service: Service,
  method: string,
  urlPath: string,
  options: { body?: unknown; token?: string } = {},
): Promise<HttpResponse> {
  const headers: Record<string, string> = {};
  if (options.body !== undefined) headers['content-type'] = 'application/json';
  if (options.token) headers.authorization = `Bearer ${options.token}`;
  const response = await fetch(`${service.base}${urlPath}`, {
    method,
    headers,
    body: options.body === undefined ? undefined : JSON.stringify(options.body),
    signal: AbortSignal.timeout(15_000),
  });
  const text = await response.text();
  let body: unknown;
  try {
    body = text ? JSON.parse(text) : undefined;
  } catch {
    body = undefined;
  }
  return { status: response.status, body, text };
}

function expectStatus(response: HttpResponse, status: number, what: string) {
  if (response.status !== status) throw new Error(`${what}: expected ${status}, got ${response.status} ${response.text}`);
}

async function login(service: Service, email: string): Promise<string> {
  const response = await request(service, 'POST', '/api/v1/auth/login', { body: { email, password: PASSWORD } });
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
  const created = await request(service, 'POST', '/api/v1/orgs', {
    body: { name: `Org ${slug}`, slug, admin_email: email, admin_password: PASSWORD },
  });
  expectStatus(created, 201, 'sign-up');
  const orgId: string = created.body.org_id;
  const token = await login(service, email);
  const keyName = `key ${slug}`;
  const key = await request(service, 'POST', `/api/v1/orgs/${orgId}/api-keys`, {
    token,
    body: { name: keyName, scopes: ['manifests:read'] },
  });
  expectStatus(key, 201, 'create api key');
  return { orgId, slug, email, token, keyId: key.body.key_id, keyName };
}

/** Everything `seed` wrote is readable through `service`. */
async function expectSeeded(service: Service, seeded: Seeded) {
  const token = await login(service, seeded.email);
  const org = await request(service, 'GET', `/api/v1/orgs/${seeded.orgId}`, { token });
  expectStatus(org, 200, 'read org');
  expect(org.body).toMatchObject({ org_id: seeded.orgId, slug: seeded.slug, name: `Org ${seeded.slug}` });
  const keys = await request(service, 'GET', `/api/v1/orgs/${seeded.orgId}/api-keys`, { token });
  expectStatus(keys, 200, 'list api keys');
  expect(keys.body.items).toEqual([
    expect.objectContaining({ key_id: seeded.keyId, name: seeded.keyName, scopes: ['manifests:read'] }),
  ]);
  // The signing keys persisted too: a token issued before the restart still verifies.
  const again = await request(service, 'GET', `/api/v1/orgs/${seeded.orgId}`, { token: seeded.token });
  expectStatus(again, 200, 'read org with the token issued before the restart');
}

afterEach(killAll, 30_000);

afterAll(async () => {
  await killAll();
  await Promise.all(tempDirs.map((dir) => rm(dir, { recursive: true, force: true })));
}, 30_000);

describe('start-up', () => {
  test('logs the URLs and the database in one line, and answers /healthz and /readyz', async () => {
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

    const health = await request(service, 'GET', '/healthz');
    expect(health.status).toBe(200);
    expect(health.body).toEqual({ status: 'ok' });

    const ready = await request(service, 'GET', '/readyz');
    expect(ready.status).toBe(200);
    expect(ready.body).toEqual({ status: 'ok', checks: { database: true } });
  }, TEST_TIMEOUT_MS);
});

describe('restarts on the same DATA_DIR', () => {
  test('committed data survives SIGKILL, and the next start does not re-apply migrations', async () => {
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
  }, TEST_TIMEOUT_MS);

  test('SIGTERM stops the service cleanly, and the next start has the data', async () => {
    const dataDir = await tempDataDir();
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
  }, TEST_TIMEOUT_MS);
});
