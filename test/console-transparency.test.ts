/**
 * The console's in-browser check of a record's place in the log (console/src/transparency.ts,
 * WebCrypto) against what the service's own code makes (merkle.ts, checkpoint.ts): two
 * implementations that share no code agree on every leaf of small trees, and both refuse a wrong
 * leaf, a proof of another size and a checkpoint signed by another key.
 */
import { generateKeyPairSync } from 'node:crypto';
import { checkLogPlace } from '../console/src/transparency.js';
import { checkpointText, signNote, verifierKey } from '../src/modules/record/checkpoint.js';
import {
  inclusionProof,
  MerkleFrontier,
  type NodeId,
  recordLeafHash,
  seqOfNode,
} from '../src/modules/record/merkle.js';

const origin = 'gateway.example.com/orgs/6f1c1d7e-0000-4000-8000-000000000001';
const service = generateKeyPairSync('ed25519');
const recordHashOf = (seq: number) => `sha256:${seq.toString(16).padStart(64, '0')}`;

/** A tree of `size` records as the service stores it, its signed checkpoint, and a proof reader. */
function log(size: number, key = service) {
  const frontier = MerkleFrontier.empty();
  const stored = new Map<bigint, Buffer[]>();
  for (let seq = 1; seq <= size; seq++) {
    const leaf = recordLeafHash(recordHashOf(seq));
    stored.set(BigInt(seq), [leaf, ...frontier.append(leaf)]);
  }
  const read = (node: NodeId) => stored.get(seqOfNode(node))![node.level];
  const text = checkpointText({ origin, size: BigInt(size), root: frontier.root() });
  const note = signNote(text, origin, key.privateKey, key.publicKey);
  const proof = (seq: number, at = size) => ({
    leaf_index: seq - 1,
    tree_size: at,
    root_hash: frontier.root().toString('base64'),
    hashes: inclusionProof(BigInt(seq - 1), BigInt(at), read).map((h) => h.toString('base64')),
  });
  return { note, proof };
}

const verifierKeys = [verifierKey(origin, service.publicKey)];

test('every record of trees of 1 to 20 records is in its checkpoint, as the browser checks it', async () => {
  for (let size = 1; size <= 20; size++) {
    const { note, proof } = log(size);
    for (let seq = 1; seq <= size; seq++) {
      const checked = await checkLogPlace({
        note,
        verifierKeys,
        recordHash: recordHashOf(seq),
        seq,
        proof: proof(seq),
      });
      expect(checked).toEqual({ ok: true, treeSize: size, origin });
    }
  }
});

test('a wrong record, a proof of another record or size, and a checkpoint by another key are refused', async () => {
  const { note, proof } = log(13);
  const place = { note, verifierKeys, recordHash: recordHashOf(6), seq: 6, proof: proof(6) };
  expect(await checkLogPlace({ ...place, recordHash: recordHashOf(7) })).toEqual({
    ok: false,
    reason: 'the record is not in the tree of the checkpoint',
  });
  expect(await checkLogPlace({ ...place, proof: proof(7) })).toEqual({
    ok: false,
    reason: 'the proof is for another record',
  });
  expect(await checkLogPlace({ ...place, proof: { ...proof(6), tree_size: 12 } })).toEqual({
    ok: false,
    reason: 'the proof is not for this checkpoint',
  });
  const forged = log(13, generateKeyPairSync('ed25519'));
  expect(await checkLogPlace({ ...place, note: forged.note })).toEqual({
    ok: false,
    reason: 'the checkpoint is not signed by a key of the service',
  });
});
