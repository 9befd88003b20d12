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
  type RecordedConnection,
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

/**
 * A chain of `n` records from seq 1, each record signed by `signer(seq)`; `connectionOf(seq)` names
 * the OAuth connection of a record's call (none when it answers undefined).
 */
function chain(
  n: number,
  signer: (seq: number) => Key,
  org = () => orgId,
  connectionOf: (seq: number) => RecordedConnection | undefined = () => undefined,
) {
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
      ...(connectionOf(i + 1) ? { connection: connectionOf(i + 1) } : {}),
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

describe('records naming their OAuth connection', () => {
  const orgConnection: RecordedConnection = { connection_id: 'conn_org', user_id: null };
  const userConnection: RecordedConnection = { connection_id: 'conn_user', user_id: randomUUID() };
  /** Seq 2 went through the org's connection, seq 3 through a user's; the others had none. */
  const connected = () =>
    chain(
      5,
      () => a,
      () => orgId,
      (seq) => (seq === 2 ? orgConnection : seq === 3 ? userConnection : undefined),
    );
  type Line = ReturnType<typeof chain>[number];
  /** The file with record `seq` edited by `change` (a copy: the chain itself stays intact). */
  const edited = (records: Line[], seq: number, change: (line: Line) => void) =>
    file(
      records.map((line) => {
        if (line.body.seq !== seq) return line;
        const copy = structuredClone(line);
        change(copy);
        return copy;
      }),
      a,
      [a],
    );

  test('verify, and are counted; the others have no connection key', async () => {
    const records = connected();
    expect(records.map((r) => 'connection' in r.body)).toEqual([false, true, true, false, false]);
    expect(await verifyExport(linesOf(file(records, a, [a])))).toMatchObject({ ok: true, count: 5, connections: 2 });
  });

  test('a changed, added or removed connection breaks the hash; hashing the change again breaks the signature', async () => {
    const records = connected();
    const hashMismatch = (seq: number) => ({
      ok: false,
      seq,
      reason: 'hash mismatch: the body does not hash to record_hash',
    });
    const cases: [number, (line: Line) => void][] = [
      [3, (line) => (line.body.connection!.user_id = randomUUID())],
      [3, (line) => (line.body.connection!.user_id = null)],
      [2, (line) => (line.body.connection!.connection_id = 'conn_other')],
      [2, (line) => delete line.body.connection],
      [4, (line) => (line.body.connection = orgConnection)],
    ];
    for (const [seq, change] of cases)
      expect(await verifyExport(linesOf(edited(records, seq, change)))).toMatchObject(hashMismatch(seq));
    const rehashed = edited(records, 3, (line) => {
      line.body.connection = { connection_id: 'conn_user', user_id: null };
      line.record_hash = recordHashOf(line.body);
    });
    expect(await verifyExport(linesOf(rehashed))).toMatchObject({ ok: false, seq: 3, reason: 'bad signature' });
  });

  test('a connection of the wrong shape is named as such', async () => {
    const records = connected();
    const malformed: unknown[] = [
      null,
      'conn_org',
      {},
      { connection_id: '', user_id: null },
      { connection_id: 'conn_org' },
      { connection_id: 'conn_org', user_id: 7 },
      { connection_id: 42, user_id: null },
    ];
    for (const connection of malformed) {
      const lines = edited(records, 2, (line) => (line.body.connection = connection as RecordedConnection));
      expect(await verifyExport(linesOf(lines))).toMatchObject({
        ok: false,
        line: 3,
        seq: 2,
        reason: 'malformed line: bad or missing body.connection',
      });
    }
  });

  test('a body without a connection hashes exactly as it did before connections existed', () => {
    // Computed with the code of main before `connection` was added (commit 072ff68): a record of a
    // call without a connection must keep this hash, or every stored record would stop verifying.
    const body: RecordBody = {
      record_id: 'int_golden',
      org_id: '00000000-0000-4000-8000-000000000001',
      seq: 7,
      svc_id: 'agent',
      agent_id: 'agent',
      action: { type: 'billing', tool: 'read' },
      capability: 'billing:read',
      params_hash: `sha256:${'1'.repeat(64)}`,
      decision: 'allow',
      status: 'approved',
      executed: true,
      reasons: [],
      result_hash: null,
      approval_id: null,
      policies: [],
      channel: 'rest',
      prev_hash: `sha256:${'2'.repeat(64)}`,
      created_at: '2026-12-07T00:00:00.000Z',
      key_id: 'record_golden',
    };
    expect(recordHashOf(body)).toBe('sha256:93a858084a19abe9f79f5d46df3301ae5a6a6d7142c95df026d5df57d0cc618c');
    expect(recordHashOf({ ...body, connection: { connection_id: 'conn_org', user_id: null } })).not.toBe(
      recordHashOf(body),
    );
  });
});
