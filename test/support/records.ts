import { MerkleFrontier, recordLeafHash, verifyInclusion } from '../../src/modules/record/merkle.js';
import { go, goVerify } from './tlog-verifier.js';
import type { TestClient } from './app.js';
import type { OrgFixture } from './fixtures.js';

/** A record as the API lists it: the fields the fault and crash tests check. */
export interface RecordRow {
  record_id: string;
  seq: number;
  status: 'approved' | 'denied';
  executed: boolean;
  reasons: { code: string }[];
  result_hash: string | null;
  policies: { name: string }[] | null;
  prev_hash: string;
  record_hash: string;
}

/**
 * Every record of the org over the API, oldest first. Follows `next_cursor`, not offsets up to
 * `total`: the page and its total are two reads, so a record appended between them (recovery
 * runs while these tests poll) makes `total` one more than any offset will ever return.
 */
export async function allRecords(service: TestClient, org: OrgFixture): Promise<RecordRow[]> {
  const rows: RecordRow[] = [];
  for (let cursor = ''; ; ) {
    const page = await service.request('GET', `/api/v1/records?limit=1000${cursor}`, { token: org.adminToken });
    if (page.status !== 200) throw new Error(`records: ${page.status} ${page.text}`);
    rows.push(...page.body.items);
    if (!page.body.next_cursor) break;
    cursor = `&cursor=${encodeURIComponent(page.body.next_cursor)}`;
  }
  return rows.sort((a, b) => a.seq - b.seq);
}

export const interrupted = (record: RecordRow) => record.reasons.some((r) => r.code === 'EXECUTION_INTERRUPTED');

/** Polls the records until each of `ids` has one, or the bound passes (then the caller's expectations say what is missing). */
export async function untilRecorded(
  service: TestClient,
  org: OrgFixture,
  ids: readonly string[],
  timeoutMs = 30_000,
): Promise<RecordRow[]> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const records = await allRecords(service, org);
    const recorded = new Set(records.map((r) => r.record_id));
    if (ids.every((id) => recorded.has(id)) || Date.now() > deadline) return records;
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}

/** One unbroken chain: seq from 1 without a gap, each record linked to the one before. */
export function expectOneChain(records: readonly RecordRow[]): void {
  records.forEach((record, i) => {
    expect(record.seq).toBe(i + 1);
    if (i > 0) expect(record.prev_hash).toBe(records[i - 1].record_hash);
  });
}

/**
 * The org's Merkle tree is the chain's (docs/reference/exports.md#the-records-as-a-transparency-log):
 * a checkpoint read now (the service runs with CHECKPOINT_SECONDS=0) covers every record, its root
 * is the root of the records' hashes computed here, and the first, middle and last records prove
 * against it, by the project's verifier and by Go's.
 */
export async function expectTreeOfChain(service: TestClient, org: OrgFixture, records: readonly RecordRow[]) {
  const tree = MerkleFrontier.empty();
  for (const record of records) tree.append(recordLeafHash(record.record_hash));
  const note = await service.request('GET', '/api/v1/records/checkpoint', { token: org.adminToken });
  expect(note.status).toBe(200);
  expect(note.text.split('\n').slice(1, 3)).toEqual([String(records.length), tree.root().toString('base64')]);
  const inclusions = [];
  for (const record of new Set([records[0], records[Math.floor(records.length / 2)], records.at(-1)!])) {
    const proof = await service.request('GET', `/api/v1/records/${record.record_id}/proof`, { token: org.adminToken });
    expect(proof.status).toBe(200);
    const hashes = proof.body.hashes.map((h: string) => Buffer.from(h, 'base64'));
    const leaf = recordLeafHash(record.record_hash);
    expect(verifyInclusion(BigInt(record.seq - 1), BigInt(records.length), leaf, hashes, tree.root())).toBe(true);
    inclusions.push({ record_hash: record.record_hash, ...proof.body });
  }
  // And Go's sumdb/note and sumdb/tlog agree, where Go is installed (always under CI).
  if (!go) return;
  const verifier = await service.request('GET', '/api/v1/records/checkpoint/verifier', { token: org.adminToken });
  const checked = await goVerify({ verifier_keys: verifier.body.verifier_keys, checkpoints: [note.text], inclusions });
  expect(checked.checkpoints[0]).toMatchObject({ size: records.length, root: tree.root().toString('base64') });
  expect(checked.checkpoints[0].error).toBeUndefined();
  expect(checked.inclusions).toEqual(inclusions.map(() => ''));
}
