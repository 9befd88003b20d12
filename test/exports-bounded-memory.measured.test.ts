/**
 * Exports stream with backpressure: a client that stops reading costs the service a bounded amount
 * of memory (at most 64 MiB, whatever the export's size), other requests are served meanwhile, and
 * the file is a snapshot as of the export's start (docs/reference/exports.md,
 * docs/decisions/0064-exports-streamed-with-backpressure.md).
 *
 * The real service runs as a process of its own, and its resident memory (VmRSS of
 * /proc/<pid>/status) is sampled every 100 ms. An org holds 60,000 records and 60,000 audit entries
 * with 900-byte params (`after` for the entries), written with SQL (test/support/history.ts): each
 * export is 75–95 MB, more than the bound, so a service that read it ahead of a stopped client, or
 * kept what it sent, fails. Each export is opened, its headers read, and the client then reads
 * nothing for 8 s, while the test sends other requests (answered) and writes what the export must
 * not contain; then it reads everything and checks the file.
 *
 * The baseline is a process that has served exports before: first exports of another org (20,000
 * of each) are read whole. A fresh process pays once for what every export then reuses: the
 * compilation of the code an export runs (V8's optimizing compiler, and PGlite's WebAssembly moved
 * to its optimizing tier, 50–120 MB for a while, measured), the young generation grown to its
 * working size, and on PGlite the database's page cache (at most shared_buffers, 128 MB). Without
 * that step the bound would measure those, not the export.
 *
 * Before 0064 (commit 57fb559), the records export grew the service by 163 MiB while the client
 * read (67 MiB on PostgreSQL), and the audit export held the entry written during its pause; since,
 * 5–15 MiB and nothing.
 */
import { readFileSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import http from 'node:http';
import { openDatabase } from '../src/db/database.js';
import { backend, createTestDatabase, type TestDatabase } from './support/database.js';
import { createKey, signUp, type OrgFixture } from './support/fixtures.js';
import { execute, readyAgent, type AgentFixture } from './support/gateway.js';
import { seedHistory } from './support/history.js';
import { migratedDataDir } from './support/pglite-template.js';
import { killAllServices, startReadyService, waitExit, type Service } from './support/service-process.js';

const RECORDS = 60_000;
const WARM_UP = 20_000;
const PAYLOAD_BYTES = 900;
const BOUND = 64 * 2 ** 20;
const PAUSE_MS = 8000;
const MiB = (bytes: number) => Math.round((bytes / 2 ** 20) * 10) / 10;

let service: Service;
let database: TestDatabase | undefined;
let dataDir: string | undefined;
let big: OrgFixture;
let agent: AgentFixture;

/** Writes the histories: with the service stopped on PGlite (one process per data directory), beside it on PostgreSQL. */
async function seed(orgs: { org: OrgFixture; size: number }[]) {
  const db = database?.db ?? (await openDatabase({ dataDir, migrate: false }));
  try {
    for (const { org, size } of orgs)
      await seedHistory((text, values) => db.sql.query(text, values), org.orgId, size, {
        payloadBytes: PAYLOAD_BYTES,
      });
  } finally {
    if (!database) await db.close();
  }
}

beforeAll(async () => {
  if (backend === 'postgresql') database = await createTestDatabase();
  else dataDir = await migratedDataDir('agw-export-memory-');
  const options = { databaseUrl: database?.url, dataDir, env: { LOG_LEVEL: 'warn' } };
  service = await startReadyService(options);
  big = await signUp(service, 'big');
  agent = await readyAgent(service, big);
  const warm = await signUp(service, 'warm');
  const warmAgent = await readyAgent(service, warm);
  if (dataDir) {
    service.child.kill('SIGTERM');
    await waitExit(service);
  }
  await seed([
    { org: big, size: RECORDS },
    { org: warm, size: WARM_UP },
  ]);
  if (dataDir) service = await startReadyService(options);
  // What the tests do, first for another org: the exports, and the requests sent while they wait.
  for (const path of ['/api/v1/records/export', `/api/v1/orgs/${warm.orgId}/audit-logs/export`]) {
    const response = await service.request('GET', path, { token: warm.adminToken });
    expect(response.status).toBe(200);
    expect(response.text.split('\n').length).toBeGreaterThan(WARM_UP);
  }
  expect((await service.request('GET', '/api/v1/records?limit=1', { token: warm.adminToken })).status).toBe(200);
  for (let i = 0; i < 3; i++) expect((await execute(service, warmAgent)).body.decision).toBe('allow');
  await createKey(service, warm, ['logs:read']);
}, 240_000);

afterAll(async () => {
  await killAllServices();
  await database?.close();
  if (dataDir) await rm(dataDir, { recursive: true, force: true });
}, 60_000);

const residentBytes = () =>
  Number(/^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${service.child.pid}/status`, 'utf8'))![1]) * 1024;

/**
 * The service's resident memory every 100 ms until stopped: the largest sample while the client
 * paused and while it read (`reading()` marks the change).
 */
function sampleResident() {
  const peaks = { paused: residentBytes(), reading: 0 };
  let phase: keyof typeof peaks = 'paused';
  const sample = () => {
    peaks[phase] = Math.max(peaks[phase], residentBytes());
  };
  const timer = setInterval(sample, 100);
  return {
    reading: () => {
      sample();
      phase = 'reading';
    },
    stop: () => {
      clearInterval(timer);
      sample();
      return peaks;
    },
  };
}

/** The resident memory of a service at rest: the mean of five samples over half a second. */
async function baseline() {
  await new Promise((resolve) => setTimeout(resolve, 2000));
  let sum = 0;
  for (let i = 0; i < 5; i++) {
    sum += residentBytes();
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return sum / 5;
}

/**
 * Opens the export and reads its headers, then nothing while `meanwhile` runs and `PAUSE_MS` pass;
 * then reads every line, handing each to `onLine` (nothing is kept here but what it keeps).
 */
async function readAfterPause(
  path: string,
  sampler: ReturnType<typeof sampleResident>,
  meanwhile: () => Promise<void>,
  onLine: (line: string) => void,
) {
  const response = await new Promise<http.IncomingMessage>((resolve, reject) => {
    http
      .get(`${service.base}${path}`, { headers: { authorization: `Bearer ${big.adminToken}` }, agent: false }, resolve)
      .on('error', reject);
  });
  response.pause();
  const paused = new Promise((resolve) => setTimeout(resolve, PAUSE_MS));
  await meanwhile();
  await paused;
  sampler.reading();
  let pending = '';
  let bytes = 0;
  response.setEncoding('utf8');
  response.on('data', (text: string) => {
    bytes += Buffer.byteLength(text);
    pending += text;
    const lines = pending.split('\n');
    pending = lines.pop()!;
    for (const line of lines) onLine(line);
  });
  response.resume();
  const complete = await new Promise<boolean>((resolve) => {
    response.on('end', () => resolve(response.complete));
    response.on('error', () => resolve(false));
  });
  return { status: response.statusCode, complete, bytes, rest: pending };
}

/** Growth over the baseline while paused and while reading, with the figures in the message. */
function expectWithinBound(base: number, peaks: { paused: number; reading: number }) {
  const growth = Math.max(peaks.paused, peaks.reading) - base;
  const measured = `baseline ${MiB(base)} MiB, growth ${MiB(peaks.paused - base)} MiB while paused, ${MiB(peaks.reading - base)} MiB while reading`;
  console.log(`${expect.getState().currentTestName}: ${measured}`);
  expect({ measured, within: growth <= BOUND }).toEqual({ measured, within: true });
}

test(`a records export of ${RECORDS} records read after an ${PAUSE_MS / 1000} s pause: bounded memory, others served, a snapshot of its start (${backend})`, async () => {
  const base = await baseline();
  const sampler = sampleResident();
  let header: Record<string, any> | undefined;
  let count = 0;
  let previous: { seq: number; hash: string } | undefined;
  let broken: string | undefined;
  const read = await readAfterPause(
    '/api/v1/records/export',
    sampler,
    async () => {
      // Served while the export waits for its client: the public probe, an operator read, and
      // executes whose records come after the export's start.
      expect((await service.request('GET', '/healthz')).status).toBe(200);
      expect((await service.request('GET', '/api/v1/records?limit=1', { token: big.adminToken })).status).toBe(200);
      for (let i = 0; i < 3; i++) expect((await execute(service, agent)).body.decision).toBe('allow');
    },
    (line) => {
      const value = JSON.parse(line);
      if (!header) {
        header = value;
        return;
      }
      const { seq, prev_hash: prevHash } = value.body;
      if (!broken && previous && (seq !== previous.seq + 1 || prevHash !== previous.hash))
        broken = `seq ${seq} after ${previous.seq}`;
      previous = { seq, hash: value.record_hash };
      count += 1;
    },
  );
  expectWithinBound(base, sampler.stop());
  expect(read).toMatchObject({ status: 200, complete: true, rest: '' });
  // Larger than the bound: holding it would have been seen.
  expect(read.bytes).toBeGreaterThan(BOUND);
  expect(header).toMatchObject({ count: RECORDS, first_seq: 1, last_seq: RECORDS, chain_head: { seq: RECORDS } });
  expect({ count, last: previous?.seq, broken }).toEqual({ count: RECORDS, last: RECORDS, broken: undefined });
  // The executes of the pause were recorded after the export's last record, and are not in it.
  const after = await service.request('GET', '/api/v1/records?limit=1', { token: big.adminToken });
  expect(after.body).toMatchObject({ total: RECORDS + 3, items: [{ seq: RECORDS + 3 }] });
}, 180_000);

test(`an audit export of ${RECORDS} entries read after an ${PAUSE_MS / 1000} s pause: bounded memory, others served, a snapshot of its start (${backend})`, async () => {
  // The entries written through the API (sign-up, the agent's manifest, tool and key): fewer than
  // the listing's exact bound, so their total is exact.
  const own = `/api/v1/orgs/${big.orgId}/audit-logs?actor=${big.adminUserId}&limit=1`;
  const before = await service.request('GET', own, { token: big.adminToken });
  expect(before.body.total_exact).toBe(true);
  const base = await baseline();
  const sampler = sampleResident();
  let written: string | undefined;
  let count = 0;
  let last = '';
  let outOfOrder = 0;
  const ids = new Set<string>();
  const read = await readAfterPause(
    `/api/v1/orgs/${big.orgId}/audit-logs/export`,
    sampler,
    async () => {
      expect((await service.request('GET', '/healthz')).status).toBe(200);
      // An operator write while the export waits: its entry is newer than the export's start.
      written = (await createKey(service, big, ['logs:read'])).keyId;
    },
    (line) => {
      const entry = JSON.parse(line);
      if (entry.created_at < last) outOfOrder += 1;
      last = entry.created_at;
      if (entry.target.id === written) ids.add(entry.audit_id);
      count += 1;
    },
  );
  expectWithinBound(base, sampler.stop());
  expect(read).toMatchObject({ status: 200, complete: true, rest: '' });
  expect(read.bytes).toBeGreaterThan(BOUND);
  expect({ count, outOfOrder, written: ids.size }).toEqual({
    count: RECORDS + before.body.total,
    outOfOrder: 0,
    written: 0,
  });
  // The write of the pause was audited, after the export began.
  const afterwards = await service.request('GET', own, { token: big.adminToken });
  expect(afterwards.body.total).toBe(before.body.total + 1);
  const entry = `/api/v1/orgs/${big.orgId}/audit-logs?target_id=${written}`;
  expect((await service.request('GET', entry, { token: big.adminToken })).body.items).toHaveLength(1);
}, 180_000);
