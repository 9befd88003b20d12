import { execFile } from 'node:child_process';
import { createHash, generateKeyPairSync } from 'node:crypto';
import { cp, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { defaultMigrationsDir, migrate } from '../../../src/db/migrate.js';
import { openNote, parseCheckpoint, parseVerifierKey, signNote } from '../../../src/modules/record/checkpoint.js';
import {
  MerkleFrontier,
  recordLeafHash,
  verifyConsistency,
  verifyInclusion,
} from '../../../src/modules/record/merkle.js';
import { startTestApp, type TestApp } from '../../support/app.js';
import { createTestDatabase } from '../../support/database.js';
import { signUp, type OrgFixture } from '../../support/fixtures.js';
import { actionBody, execute, readyAgent, type AgentFixture } from '../../support/gateway.js';
import { nodeArguments } from '../../support/child-command.js';
import { type GoInput, go, goVerify } from '../../support/tlog-verifier.js';

/**
 * The records as a transparency log, checked by an implementation nobody here wrote: Go's
 * golang.org/x/mod/sumdb/note opens the checkpoints and sumdb/tlog checks the proofs
 * (test/support/tlog-verifier), besides the project's own verifier (merkle.ts, checkpoint.ts).
 */

let t: TestApp;
let org: OrgFixture;
let agent: AgentFixture;

const get = async (url: string, token = org.adminToken) => t.request('GET', `/api/v1${url}`, { token });

async function act(n: number, who = agent) {
  for (let i = 0; i < n; i++) expect((await execute(t, who, actionBody(who, 'read', { i }))).status).toBe(200);
}

/** Every record of the org, oldest first: id, seq and record hash. */
type Listed = { record_id: string; seq: number; record_hash: string; created_at?: string };
async function records(): Promise<Listed[]> {
  const all: Listed[] = [];
  let cursor = '';
  for (;;) {
    const page = await get(`/records?limit=1000${cursor ? `&cursor=${cursor}` : ''}`);
    all.push(...page.body.items);
    if (!page.body.next_cursor) break;
    cursor = encodeURIComponent(page.body.next_cursor);
  }
  return all.sort((a, b) => a.seq - b.seq);
}

async function checkpointNote() {
  const response = await get('/records/checkpoint');
  expect(response.status).toBe(200);
  expect(response.headers.get('content-type')).toMatch(/^text\/plain/);
  return response.text;
}

async function verifierKeys(): Promise<{ verifier_key: string; verifier_keys: string[] }> {
  const response = await get('/records/checkpoint/verifier');
  expect(response.status).toBe(200);
  return response.body;
}

beforeAll(async () => {
  // 0: a checkpoint whenever the tree grew and one is asked for, so each size below gets its own.
  t = await startTestApp({ CHECKPOINT_SECONDS: '0', PUBLIC_URL: 'https://gateway.example.com' });
  org = await signUp(t, 'tlog');
  agent = await readyAgent(t, org);
}, 60_000);
afterAll(() => t.close());

(go ? describe : describe.skip)('checkpoints and proofs, verified by Go', () => {
  const notes: string[] = [];

  test('before its first record an org has no checkpoint (404), and proofs are refused', async () => {
    const none = await get('/records/checkpoint');
    expect(none.status).toBe(404);
    expect(none.body.error.message).toMatch(/no checkpoint yet/i);
    expect((await get('/records/consistency?from=1&to=1')).status).toBe(422);
  });

  test('checkpoints at several sizes open with the served verifier key, in the C2SP form', async () => {
    let appended = 0;
    for (const size of [1, 2, 3, 7, 8, 13]) {
      await act(size - appended);
      appended = size;
      notes.push(await checkpointNote());
    }
    const { verifier_key } = await verifierKeys();
    expect(verifier_key).toMatch(
      new RegExp(`^gateway\\.example\\.com/orgs/${org.orgId}\\+[0-9a-f]{8}\\+[A-Za-z0-9+/]+=*$`),
    );
    const go = await goVerify({ verifier_keys: [verifier_key], checkpoints: notes });
    expect(go.checkpoints.map((c) => c.size)).toEqual([1, 2, 3, 7, 8, 13]);
    for (const c of go.checkpoints) {
      expect(c.error).toBeUndefined();
      expect(c.origin).toBe(`gateway.example.com/orgs/${org.orgId}`);
      expect(c.signer).toBe(c.origin);
    }
    // The root is the RFC 9162 root of the record hashes, computed here from the records alone.
    const all = await records();
    const tree = MerkleFrontier.empty();
    for (const record of all) tree.append(recordLeafHash(record.record_hash));
    expect(go.checkpoints.at(-1)!.root).toBe(tree.root().toString('base64'));
    // And the project's own verifier agrees.
    const own = parseVerifierKey(verifier_key);
    if ('error' in own) throw new Error(own.error);
    for (const note of notes) expect(openNote(note, [own])).toHaveProperty('text');
  });

  test('inclusion of the first, middle and last records at every checkpoint; consistency between every two', async () => {
    const all = await records();
    const sizes = [1, 2, 3, 7, 8, 13];
    const inclusions: GoInput['inclusions'] = [];
    for (const size of sizes) {
      for (const seq of new Set([1, Math.ceil(size / 2), size])) {
        const record = all[seq - 1];
        const proof = await get(`/records/${record.record_id}/proof?tree_size=${size}`);
        expect(proof.status).toBe(200);
        expect(proof.body).toMatchObject({ record_id: record.record_id, leaf_index: seq - 1, tree_size: size });
        inclusions.push({ record_hash: record.record_hash, ...proof.body });
        const own = verifyInclusion(
          BigInt(seq - 1),
          BigInt(size),
          recordLeafHash(record.record_hash),
          proof.body.hashes.map((h: string) => Buffer.from(h, 'base64')),
          Buffer.from(proof.body.root_hash, 'base64'),
        );
        expect(own).toBe(true);
      }
    }
    const roots = new Map<number, string>();
    for (const size of sizes)
      roots.set(size, (await get(`/records/${all[0].record_id}/proof?tree_size=${size}`)).body.root_hash);
    const consistencies: GoInput['consistencies'] = [];
    for (const from of sizes)
      for (const to of sizes.filter((s) => s >= from)) {
        const proof = await get(`/records/consistency?from=${from}&to=${to}`);
        expect(proof.status).toBe(200);
        consistencies.push({
          from,
          to,
          from_root: roots.get(from)!,
          to_root: roots.get(to)!,
          hashes: proof.body.hashes,
        });
        expect(
          verifyConsistency(
            BigInt(from),
            BigInt(to),
            Buffer.from(roots.get(from)!, 'base64'),
            Buffer.from(roots.get(to)!, 'base64'),
            proof.body.hashes.map((h: string) => Buffer.from(h, 'base64')),
          ),
        ).toBe(true);
      }
    const go = await goVerify({ verifier_keys: [], inclusions, consistencies });
    expect(go.inclusions).toEqual(inclusions.map(() => ''));
    expect(go.consistencies).toEqual(consistencies.map(() => ''));
    // The checkpoints' roots are the proofs' roots.
    for (const note of notes) {
      const checkpoint = parseCheckpoint(note.slice(0, note.indexOf('\n\n') + 1));
      if ('error' in checkpoint) throw new Error(checkpoint.error);
      expect(roots.get(Number(checkpoint.size))).toBe(checkpoint.root.toString('base64'));
    }
  });

  test('200 concurrent executes: every record is included in the next checkpoint, consistent with the last', async () => {
    const before = (await records()).length;
    const beforeRoot = (await get(`/records/consistency?from=${before}&to=${before}`)).status;
    expect(beforeRoot).toBe(200);
    const answers = await Promise.all(
      Array.from({ length: 200 }, (_, i) => execute(t, agent, actionBody(agent, 'read', { concurrent: i }))),
    );
    expect(answers.map((a) => a.status)).toEqual(answers.map(() => 200));
    const note = await checkpointNote();
    const all = await records();
    expect(all).toHaveLength(before + 200);
    expect(note.split('\n')[1]).toBe(String(before + 200));
    const proofs = await Promise.all(all.map((r) => get(`/records/${r.record_id}/proof`)));
    const consistency = await get(`/records/consistency?from=${before}&to=${before + 200}`);
    const oldRoot = (await get(`/records/${all[0].record_id}/proof?tree_size=${before}`)).body.root_hash;
    const { verifier_key } = await verifierKeys();
    const go = await goVerify({
      verifier_keys: [verifier_key],
      checkpoints: [note],
      inclusions: all.map((r, i) => ({ record_hash: r.record_hash, ...proofs[i].body })),
      consistencies: [
        {
          from: before,
          to: before + 200,
          from_root: oldRoot,
          to_root: proofs[0].body.root_hash,
          hashes: consistency.body.hashes,
        },
      ],
    });
    expect(go.checkpoints[0]).toMatchObject({ size: before + 200, root: proofs[0].body.root_hash });
    expect(go.inclusions.filter((e) => e !== '')).toEqual([]);
    expect(go.consistencies).toEqual(['']);
  }, 120_000);

  test('a checkpoint signed by another key, or with its text changed, does not open', async () => {
    const note = await checkpointNote();
    const { verifier_key } = await verifierKeys();
    const text = note.slice(0, note.indexOf('\n\n') + 1);
    const other = generateKeyPairSync('ed25519');
    const origin = text.split('\n')[0];
    const forged = signNote(text, origin, other.privateKey, other.publicKey);
    const changed = note.replace(/\n(\d+)\n/, (_, n) => `\n${Number(n) + 1}\n`);
    const go = await goVerify({ verifier_keys: [verifier_key], checkpoints: [forged, changed] });
    expect(go.checkpoints[0].error).toBe('note has no verifiable signatures');
    expect(go.checkpoints[1].error).toMatch(/invalid signature/i);
    const own = parseVerifierKey(verifier_key);
    if ('error' in own) throw new Error(own.error);
    expect(openNote(forged, [own])).toEqual({ error: 'no signature by a known key' });
    expect(openNote(changed, [own])).toEqual({ error: 'the signature does not verify' });
  });

  test('a tampered record no longer proves against the checkpoint', async () => {
    const all = await records();
    const victim = all[4];
    const proof = (await get(`/records/${victim.record_id}/proof`)).body;
    const tampered = `sha256:${'ab'.repeat(32)}`;
    await t.database.db.sql.query('UPDATE interaction_records SET record_hash = $1 WHERE id = $2', [
      tampered,
      victim.record_id,
    ]);
    try {
      const afterwards = (await get(`/records/${victim.record_id}/proof?tree_size=${proof.tree_size}`)).body;
      const go = await goVerify({
        verifier_keys: [],
        inclusions: [
          { record_hash: tampered, ...proof },
          { record_hash: tampered, ...afterwards, root_hash: proof.root_hash },
          { record_hash: victim.record_hash, ...proof },
        ],
      });
      expect(go.inclusions[0]).toBe('invalid transparency proof');
      expect(go.inclusions[1]).toBe('invalid transparency proof');
      expect(go.inclusions[2]).toBe('');
    } finally {
      await t.database.db.sql.query('UPDATE interaction_records SET record_hash = $1 WHERE id = $2', [
        victim.record_hash,
        victim.record_id,
      ]);
    }
  });

  test('after a key rotation new checkpoints use the new key and old ones still open with the listed keys', async () => {
    const old = await checkpointNote();
    const oldKey = (await verifierKeys()).verifier_key;
    await t.app.keys.rotate('checkpoint');
    await act(1);
    const fresh = await checkpointNote();
    const { verifier_key, verifier_keys } = await verifierKeys();
    expect(verifier_key).not.toBe(oldKey);
    expect(verifier_keys[0]).toBe(verifier_key);
    expect(verifier_keys).toContain(oldKey);
    const go = await goVerify({ verifier_keys, checkpoints: [old, fresh] });
    expect(go.checkpoints.map((c) => c.error)).toEqual([undefined, undefined]);
    const onlyNew = await goVerify({ verifier_keys: [verifier_key], checkpoints: [old, fresh] });
    expect(onlyNew.checkpoints[0].error).toBeDefined();
    expect(onlyNew.checkpoints[1].error).toBeUndefined();
  });
});

describe('the proof routes', () => {
  beforeAll(() => act(3));

  test('sizes beyond the latest checkpoint, below 1 or out of order are 422 naming the parameter', async () => {
    const size = Number((await checkpointNote()).split('\n')[1]);
    const [first] = await records();
    const beyond = await get(`/records/${first.record_id}/proof?tree_size=${size + 1}`);
    expect(beyond.status).toBe(422);
    expect(beyond.body.error.details.errors[0]).toMatchObject({ field: 'tree_size' });
    expect((await get(`/records/${first.record_id}/proof?tree_size=0`)).status).toBe(422);
    expect((await get(`/records/consistency?from=3&to=2`)).body.error.details.errors[0].field).toBe('from');
    expect((await get(`/records/consistency?from=1&to=${size + 1}`)).body.error.details.errors[0].field).toBe('to');
    expect((await get('/records/consistency?from=1')).status).toBe(422);
  });

  test("another org's record is 404; a key without logs:read is 403", async () => {
    const other = await signUp(t, 'tlog-other');
    const [first] = await records();
    expect((await get(`/records/${first.record_id}/proof`, other.adminToken)).status).toBe(404);
    const { key } = (
      await t.request('POST', `/api/v1/orgs/${org.orgId}/api-keys`, {
        token: org.adminToken,
        body: { name: 'no logs', scopes: ['gateway:execute'] },
      })
    ).body;
    expect((await t.request('GET', '/api/v1/records/checkpoint', { apiKey: key })).status).toBe(403);
    expect((await t.request('GET', `/api/v1/records/${first.record_id}/proof`, { apiKey: key })).status).toBe(403);
  });

  test('GraphQL answers the same checkpoint and proof', async () => {
    const [first] = await records();
    const response = await t.graphql(
      `query ($id: ID!) { record_checkpoint { origin tree_size root_hash note } record_proof(record_id: $id) { leaf_index tree_size root_hash hashes } }`,
      { id: first.record_id },
      { token: org.adminToken },
    );
    const { record_checkpoint, record_proof } = response.body.data;
    expect(record_checkpoint.note).toBe(await checkpointNote());
    expect(record_proof).toMatchObject({
      leaf_index: 0,
      tree_size: record_checkpoint.tree_size,
      root_hash: record_checkpoint.root_hash,
    });
  });
});

describe('CHECKPOINT_SECONDS', () => {
  test('at most one checkpoint per interval while the tree grows', async () => {
    const slow = await startTestApp({ CHECKPOINT_SECONDS: '3600' });
    try {
      const slowOrg = await signUp(slow, 'tlog-slow');
      const slowAgent = await readyAgent(slow, slowOrg);
      const run = () => execute(slow, slowAgent, actionBody(slowAgent, 'read', {}));
      expect((await run()).status).toBe(200);
      const first = await slow.request('GET', '/api/v1/records/checkpoint', { token: slowOrg.adminToken });
      expect(first.text.split('\n')[1]).toBe('1');
      expect((await run()).status).toBe(200);
      const second = await slow.request('GET', '/api/v1/records/checkpoint', { token: slowOrg.adminToken });
      expect(second.text).toBe(first.text);
      const beyond = await slow.request('GET', '/api/v1/records/consistency?from=1&to=2', {
        token: slowOrg.adminToken,
      });
      expect(beyond.status).toBe(422);
    } finally {
      await slow.close();
    }
  });
});

describe('the migration', () => {
  test('builds the trees of chains appended before it, as appends build them', async () => {
    const old = await createTestDatabase({ migrate: false });
    const dir = await mkdtemp(path.join(os.tmpdir(), 'agw-migrations-'));
    try {
      await cp(defaultMigrationsDir, dir, { recursive: true });
      await rm(path.join(dir, '20261202000000_record_tree'), { recursive: true });
      await migrate(old.db.sql, dir);
      const orgs = ['6f1c1d7e-0000-4000-8000-00000000000a', '6f1c1d7e-0000-4000-8000-00000000000b'];
      const expected = new Map<string, { hashes: string[]; tree: MerkleFrontier; nodes: (Buffer | null)[] }>();
      for (const [o, orgId] of orgs.entries()) {
        await old.db.sql.query(`INSERT INTO organizations (id, name, slug, updated_at) VALUES ($1, $2, $2, now())`, [
          orgId,
          `legacy-${o}`,
        ]);
        const count = o === 0 ? 37 : 1;
        const tree = MerkleFrontier.empty();
        const hashes: string[] = [];
        const nodes: (Buffer | null)[] = [];
        for (let seq = 1; seq <= count; seq++) {
          const hash = `sha256:${createHash('sha256').update(`${orgId}:${seq}`).digest('hex')}`;
          hashes.push(hash);
          const completed = tree.append(recordLeafHash(hash));
          nodes.push(completed.length ? Buffer.concat(completed) : null);
          await old.db.sql.query(
            `INSERT INTO interaction_records (id, org_id, seq, svc_id, agent_id, action_type, tool, capability, params_hash,
               status, executed, reasons, prev_hash, record_hash, signature, key_id, created_at)
             VALUES ($1, $2, $3, 'a', 'a', 'billing', 'read', 'billing:read', 'sha256:x', 'approved', true, '[]', 'p', $4, 's', 'k', now())`,
            [`int_legacy_${o}_${seq}`, orgId, seq, hash],
          );
        }
        await old.db.sql.query(
          'INSERT INTO record_chain_heads (org_id, seq, head_hash, updated_at) VALUES ($1, $2, $3, now())',
          [orgId, count, hashes.at(-1)],
        );
        expected.set(orgId, { hashes, tree, nodes });
      }

      await migrate(old.db.sql);

      for (const orgId of orgs) {
        const { tree, nodes } = expected.get(orgId)!;
        const [head] = await old.db.sql.query<{ tree_frontier: Uint8Array }>(
          'SELECT tree_frontier FROM record_chain_heads WHERE org_id = $1',
          [orgId],
        );
        expect(Buffer.from(head.tree_frontier).equals(tree.packed())).toBe(true);
        const rows = await old.db.sql.query<{ tree_nodes: Uint8Array | null }>(
          'SELECT tree_nodes FROM interaction_records WHERE org_id = $1 ORDER BY seq',
          [orgId],
        );
        expect(rows.map((r) => (r.tree_nodes ? Buffer.from(r.tree_nodes).toString('hex') : null))).toEqual(
          nodes.map((n) => (n ? n.toString('hex') : null)),
        );
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
      await old.close();
    }
  });
});

describe('offline: the export carries its checkpoint, and verify-proof checks one record', () => {
  const root = fileURLToPath(new URL('../../..', import.meta.url));
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'agw-tlog-'));
    await act(5);
  });
  afterAll(() => rm(dir, { recursive: true, force: true }));

  /** The CLI as a user runs it: a child process, no server or database behind it. */
  function cli(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
    const env = { ...process.env };
    delete env.NODE_OPTIONS;
    delete env.DATABASE_URL;
    return new Promise((resolve) => {
      execFile(
        process.execPath,
        [...nodeArguments('cli/agent-gateway'), ...args],
        { cwd: root, env },
        (error, stdout, stderr) =>
          resolve({ code: error ? Number((error as { code?: number }).code ?? 1) : 0, stdout, stderr }),
      );
    });
  }
  const file = async (name: string, content: string) => {
    const at = path.join(dir, name);
    await writeFile(at, content);
    return at;
  };

  test('an export of a middle range rebuilds the root of the checkpoint it is taken at; a key not given fails it', async () => {
    const all = await records();
    const from = encodeURIComponent(all[3].created_at!);
    const to = encodeURIComponent(all[all.length - 3].created_at!);
    const exported = await get(`/records/export?from=${from}&to=${to}`);
    expect(exported.status).toBe(200);
    const header = JSON.parse(exported.text.split('\n')[0]);
    // CHECKPOINT_SECONDS=0: the export's checkpoint is at its head.
    expect(header.checkpoint.tree_size).toBe(header.chain_head.seq);
    expect(header.first_seq).toBeGreaterThan(1);
    expect(header.last_seq).toBeLessThan(header.chain_head.seq);
    expect(header.checkpoint.before.length).toBeGreaterThan(0);
    expect(header.checkpoint.after.length).toBeGreaterThan(0);
    const saved = await file('range.jsonl', exported.text);
    const { verifier_key } = await verifierKeys();
    const ok = await cli('verify', saved, '--verifier-key', verifier_key);
    expect(ok.stderr).toBe('');
    expect(ok.code).toBe(0);
    expect(ok.stdout).toContain(
      `checkpoint: tree size ${header.checkpoint.tree_size} of gateway.example.com/orgs/${org.orgId}, its root rebuilt from the file ` +
        `(${header.count} of its records in the file, 0 after it); signed by a key you gave`,
    );
    const other = generateKeyPairSync('ed25519');
    const { verifierKey } = await import('../../../src/modules/record/checkpoint.js');
    const stranger = await cli(
      'verify',
      saved,
      '--verifier-key',
      verifierKey(`gateway.example.com/orgs/${org.orgId}`, other.publicKey),
    );
    expect(stranger.code).toBe(1);
    expect(stranger.stderr).toContain('checkpoint: no signature by a known key');
  });

  test('verify-proof: a record, its proof and the checkpoint verify; an edited record, another size or another key do not', async () => {
    const note = await checkpointNote();
    const size = Number(note.split('\n')[1]);
    const exported = (await get('/records/export')).text.trimEnd().split('\n');
    const line = JSON.parse(exported[7]);
    const proof = (await get(`/records/${line.body.record_id}/proof`)).body;
    const { verifier_key } = await verifierKeys();
    const [recordFile, proofFile, noteFile] = await Promise.all([
      file('record.json', JSON.stringify(line)),
      file('proof.json', JSON.stringify(proof)),
      file('checkpoint.txt', note),
    ]);
    const ok = await cli('verify-proof', recordFile, proofFile, noteFile, '--verifier-key', verifier_key);
    expect(ok.stdout).toBe(
      `OK: record ${line.body.record_id} (seq ${line.body.seq}) is in the tree of ${size} records of gateway.example.com/orgs/${org.orgId}, signed by the verifier key\n`,
    );
    expect(ok.code).toBe(0);

    const edited = await file(
      'edited.json',
      JSON.stringify({ ...line, body: { ...line.body, executed: !line.body.executed } }),
    );
    const editedRun = await cli('verify-proof', edited, proofFile, noteFile, '--verifier-key', verifier_key);
    expect(editedRun).toMatchObject({ code: 1, stderr: 'FAILED: record: the body does not hash to record_hash\n' });

    // A proof at an older size does not prove against this checkpoint.
    const older = await file(
      'older.json',
      JSON.stringify((await get(`/records/${line.body.record_id}/proof?tree_size=${line.body.seq}`)).body),
    );
    const olderRun = await cli('verify-proof', recordFile, older, noteFile, '--verifier-key', verifier_key);
    expect(olderRun.code).toBe(1);
    expect(olderRun.stderr).toContain(`proof: at tree size ${line.body.seq}, the checkpoint is at ${size}`);

    // The record of another leaf with this proof is not in the tree.
    const neighbour = await file('neighbour.json', exported[8]);
    const neighbourRun = await cli('verify-proof', neighbour, proofFile, noteFile, '--verifier-key', verifier_key);
    expect(neighbourRun.code).toBe(1);

    const other = generateKeyPairSync('ed25519');
    const { verifierKey } = await import('../../../src/modules/record/checkpoint.js');
    const strangerRun = await cli(
      'verify-proof',
      recordFile,
      proofFile,
      noteFile,
      '--verifier-key',
      verifierKey(`gateway.example.com/orgs/${org.orgId}`, other.publicKey),
    );
    expect(strangerRun).toMatchObject({ code: 1, stderr: 'FAILED: checkpoint: no signature by a known key\n' });
    expect((await cli('verify-proof', recordFile, proofFile, noteFile)).code).toBe(2);
  });
});
