/**
 * The audit export streams: 100 000 entries leave in batches, and the process never holds the
 * export. The server runs in this process (yoga.fetch), so a handler that built the export in
 * memory would raise this process's live heap by at least the size of the export; this test reads
 * the body chunk by chunk (keeping only counters), forces a full garbage collection at regular
 * points while reading, and asserts that the live heap grows by far less than the export size.
 * Collecting before each sample makes the numbers the live set, not garbage waiting for the GC.
 */
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { AUDIT_EXPORT_BATCH } from '../../../src/modules/audit/audit.service.js';
import { startTestApp, type TestApp } from '../../support/app.js';
import { signUp, type OrgFixture } from '../../support/fixtures.js';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

const ENTRIES = 100_000;
let t: TestApp;
let org: OrgFixture;

beforeAll(async () => {
  t = await startTestApp();
  org = await signUp(t, 'bulk');
  // Three entries per millisecond, so batches end in the middle of equal timestamps, and all of
  // them before the sign-up's own two entries.
  await t.database.db.sql.query(
    `INSERT INTO audit_logs (id, org_id, actor_type, actor_id, actor_label, action, target_type, target_id, before, after, request_id, created_at)
     SELECT 'aud_bulk_' || lpad(i::text, 6, '0'), $1::uuid, 'user', $2, $3, 'manifest.approved', 'manifest', 'm-' || i,
            jsonb_build_object('status', 'pending'), jsonb_build_object('status', 'active', 'n', i), 'req_bulk_' || i,
            timestamptz '2025-01-01T00:00:00Z' + (i / 3) * interval '1 millisecond'
     FROM generate_series(1, ${ENTRIES}) AS i`,
    [org.orgId, org.adminUserId, org.adminEmail],
  );
}, 120_000);
afterAll(() => t.close());

/** Reads the body chunk by chunk, handing each complete line to `onLine`; samples the live heap. */
async function consume(response: Response, separator: string, onLine: (line: string) => void) {
  const reader = response.body!.getReader();
  const decoder = new TextDecoder();
  gc();
  const baseline = process.memoryUsage().heapUsed;
  let peakGrowth = 0;
  let bytes = 0;
  let chunks = 0;
  let pending = '';
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    bytes += value.byteLength;
    chunks += 1;
    pending += decoder.decode(value, { stream: true });
    const parts = pending.split(separator);
    pending = parts.pop()!;
    for (const line of parts) onLine(line);
    if (chunks % 8 === 0) {
      gc();
      peakGrowth = Math.max(peakGrowth, process.memoryUsage().heapUsed - baseline);
    }
  }
  expect(pending).toBe('');
  return { bytes, chunks, peakGrowth };
}

const get = (path: string) =>
  t.app.yoga.fetch(`http://localhost${path}`, { headers: { authorization: `Bearer ${org.adminToken}` } }, {
    clientAddress: '192.0.2.1',
  } as never);

test(`JSON Lines export of ${ENTRIES} entries: each exactly once, in order, with bounded memory`, async () => {
  const response = await get(`/api/v1/orgs/${org.orgId}/audit-logs/export?format=jsonl`);
  expect(response.status).toBe(200);
  let n = 0;
  const tail: string[] = [];
  const { bytes, chunks, peakGrowth } = await consume(response, '\n', (line) => {
    const entry = JSON.parse(line);
    n += 1;
    if (n <= ENTRIES) {
      // The n-th line is the n-th generated entry: nothing lost, repeated or out of order.
      expect(entry.audit_id).toBe(`aud_bulk_${String(n).padStart(6, '0')}`);
      if (entry.after.n !== n || entry.org_id !== org.orgId) throw new Error(`line ${n} is wrong: ${line}`);
    } else {
      tail.push(entry.action);
    }
  });
  expect(n).toBe(ENTRIES + 2);
  expect(tail.sort()).toEqual(['org.created', 'user.created']);
  // Pages of AUDIT_EXPORT_BATCH entries, sent as they are read.
  expect(chunks).toBeGreaterThanOrEqual(ENTRIES / AUDIT_EXPORT_BATCH);
  expect(bytes).toBeGreaterThan(30 * 1024 * 1024);
  // Holding the export (its text alone is `bytes`) would make the growth at least `bytes`.
  expect(peakGrowth).toBeLessThan(bytes / 4);
}, 300_000);

test(`CSV export of ${ENTRIES} entries: each exactly once, in order, with bounded memory`, async () => {
  const response = await get(`/api/v1/orgs/${org.orgId}/audit-logs/export?format=csv&action=manifest.approved`);
  expect(response.status).toBe(200);
  let n = -1;
  const { bytes, peakGrowth } = await consume(response, '\r\n', (line) => {
    n += 1;
    if (n === 0) {
      expect(line.startsWith('audit_id,org_id,actor_type,')).toBe(true);
      return;
    }
    // before/after are quoted JSON text; the id is the first, bare field.
    const id = line.slice(0, line.indexOf(','));
    if (id !== `aud_bulk_${String(n).padStart(6, '0')}`) throw new Error(`row ${n} is wrong: ${line}`);
    if (!line.includes(`,"{""n"":${n},""status"":""active""}",`)) {
      throw new Error(`row ${n} lacks its after column: ${line}`);
    }
  });
  expect(n).toBe(ENTRIES);
  expect(peakGrowth).toBeLessThan(bytes / 4);
}, 300_000);
