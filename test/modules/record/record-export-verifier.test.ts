/**
 * The offline verifier on files built here with the same primitives the service uses: the cases a
 * genuine export cannot produce (a record signed by a key the header does not carry, another org's
 * record, records past the chain head), and a file that starts in the middle of the chain.
 */
import { generateKeyPairSync, randomUUID, type KeyObject } from 'node:crypto';
import type { JWK } from 'jose';
import { canonicalHash } from '../../../src/lib/canonical-json.js';
import {
  GENESIS_HASH,
  recordHashOf,
  signRecordHash,
  type RecordBody,
} from '../../../src/modules/record/record-chain.js';
import {
  RECORDS_EXPORT_FORMAT,
  signHeader,
  verifyExport,
  type ExportHeader,
} from '../../../src/modules/record/record-export.js';

interface Key {
  kid: string;
  privateKey: KeyObject;
  jwk: JWK;
}

function newKey(kid: string): Key {
  const { privateKey, publicKey } = generateKeyPairSync('ed25519');
  return { kid, privateKey, jwk: { ...publicKey.export({ format: 'jwk' }), kid, alg: 'EdDSA', use: 'sig' } as JWK };
}

const orgId = randomUUID();

/** A chain of `n` records from seq 1, each record signed by `signer(seq)`. */
function chain(n: number, signer: (seq: number) => Key, org = () => orgId) {
  let prev = GENESIS_HASH;
  return Array.from({ length: n }, (_, i) => {
    const params = { n: i };
    const body: RecordBody = {
      record_id: `int_${i}`,
      org_id: org(),
      seq: i + 1,
      svc_id: 'agent',
      agent_id: 'agent',
      action: { type: 'billing', tool: 'read' },
      capability: 'billing:read',
      params_hash: canonicalHash(params),
      decision: 'allow',
      status: 'approved',
      executed: true,
      reasons: [],
      result_hash: null,
      approval_id: null,
      prev_hash: prev,
      created_at: new Date(Date.UTC(2026, 0, 1, 0, 0, i)).toISOString(),
      key_id: signer(i + 1).kid,
    };
    const recordHash = recordHashOf(body);
    prev = recordHash;
    return {
      type: 'record',
      body,
      params,
      record_hash: recordHash,
      signature: signRecordHash(recordHash, signer(i + 1).privateKey),
    };
  });
}

function file(records: ReturnType<typeof chain>, headerKey: Key, keys: Key[], overrides: Partial<ExportHeader> = {}) {
  const last = records.at(-1);
  const header = signHeader(
    {
      type: 'header',
      format: RECORDS_EXPORT_FORMAT,
      org_id: orgId,
      from: null,
      to: null,
      count: records.length,
      first_seq: records[0]?.body.seq ?? null,
      last_seq: last?.body.seq ?? null,
      exported_at: new Date().toISOString(),
      chain_head: { seq: last?.body.seq ?? 0, head_hash: last?.record_hash ?? GENESIS_HASH },
      jwks: { keys: keys.map((k) => k.jwk) },
      key_id: headerKey.kid,
      ...overrides,
    },
    headerKey.privateKey,
  );
  return [header, ...records].map((line) => JSON.stringify(line));
}

async function* linesOf(lines: string[]) {
  yield* lines;
}

const a = newKey('record_a');
const b = newKey('record_b');

test('records signed by two keys (a rotation) verify when the header carries both', async () => {
  const records = chain(6, (seq) => (seq <= 3 ? a : b));
  const result = await verifyExport(linesOf(file(records, b, [a, b])));
  expect(result).toMatchObject({
    ok: true,
    count: 6,
    keyIds: ['record_a', 'record_b'],
    reachesHead: true,
    fromGenesis: true,
  });
});

test('a record signed by a key the header does not carry is an unknown key', async () => {
  const records = chain(6, (seq) => (seq <= 3 ? a : b));
  const result = await verifyExport(linesOf(file(records, a, [a])));
  expect(result).toEqual({
    ok: false,
    line: 5,
    seq: 4,
    recordId: 'int_3',
    reason: expect.stringMatching(/^unknown key: record_b/),
  });
});

test("another org's record is refused even when correctly signed", async () => {
  const records = chain(
    3,
    () => a,
    () => randomUUID(),
  );
  const result = await verifyExport(linesOf(file(records, a, [a])));
  expect(result).toMatchObject({ ok: false, line: 2, seq: 1, reason: expect.stringMatching(/^record of another org/) });
});

test('a file starting in the middle of the chain verifies from its first record on', async () => {
  const records = chain(10, () => a).slice(4);
  const result = await verifyExport(linesOf(file(records, a, [a])));
  expect(result).toMatchObject({ ok: true, count: 6, firstSeq: 5, lastSeq: 10, fromGenesis: false, reachesHead: true });
});

test('a file that stops before the head verifies without claiming the head', async () => {
  const records = chain(10, () => a);
  const lines = file(records.slice(0, 7), a, [a], { chain_head: { seq: 10, head_hash: records[9].record_hash } });
  const result = await verifyExport(linesOf(lines));
  expect(result).toMatchObject({ ok: true, count: 7, reachesHead: false });
});

test('records past the chain head, or a head that is not the last record, fail', async () => {
  const records = chain(5, () => a);
  const pastHead = file(records, a, [a], { chain_head: { seq: 4, head_hash: records[3].record_hash } });
  expect(await verifyExport(linesOf(pastHead))).toMatchObject({
    ok: false,
    seq: 5,
    reason: expect.stringMatching(/past the chain head/),
  });
  const wrongHead = file(records, a, [a], { chain_head: { seq: 5, head_hash: records[3].record_hash } });
  expect(await verifyExport(linesOf(wrongHead))).toMatchObject({
    ok: false,
    seq: 5,
    reason: expect.stringMatching(/^chain head mismatch/),
  });
});

test('a header signed by a key outside its JWKS, an empty file and blank lines are reported', async () => {
  const records = chain(2, () => a);
  expect(await verifyExport(linesOf(file(records, b, [a])))).toMatchObject({
    ok: false,
    line: 1,
    reason: expect.stringMatching(/^header: unknown key/),
  });
  expect(await verifyExport(linesOf([]))).toMatchObject({ ok: false, reason: expect.stringMatching(/empty/) });
  const lines = file(records, a, [a]);
  expect(await verifyExport(linesOf([...lines, '', '']))).toMatchObject({ ok: true });
  expect(await verifyExport(linesOf([lines[0], '', lines[1], lines[2]]))).toMatchObject({
    ok: false,
    line: 2,
    reason: 'malformed line: blank line',
  });
});
