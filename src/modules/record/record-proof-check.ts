import { openNote, parseCheckpoint, parseVerifierKey } from './checkpoint.js';
import { HASH_BYTES, recordLeafHash, verifyInclusion } from './merkle.js';
import { type RecordBody, recordHashOf } from './record-chain.js';

/**
 * `agent-gateway verify-proof`: one record, its inclusion proof and a checkpoint, checked offline
 * against a checkpoint verifier key. Pure, like the export's verifier.
 */

export interface RecordProofInput {
  /** A record as a line of the records export: `{body, record_hash, …}`. */
  record: unknown;
  /** What GET /records/{id}/proof answers. */
  proof: unknown;
  /** The signed note GET /records/checkpoint served. */
  checkpoint: string;
  verifierKeys: string[];
}

export type RecordProofResult =
  | { ok: true; recordId: string; seq: number; treeSize: number; origin: string }
  | { ok: false; reason: string };

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

function base64Hash(value: unknown): Buffer | undefined {
  if (typeof value !== 'string') return undefined;
  const bytes = Buffer.from(value, 'base64');
  return bytes.length === HASH_BYTES && bytes.toString('base64') === value ? bytes : undefined;
}

export function verifyRecordProof({ record, proof, checkpoint, verifierKeys }: RecordProofInput): RecordProofResult {
  const fail = (reason: string): RecordProofResult => ({ ok: false, reason });
  const verifiers = [];
  for (const key of verifierKeys) {
    const parsed = parseVerifierKey(key);
    if ('error' in parsed) return fail(`verifier key: ${parsed.error}`);
    verifiers.push(parsed);
  }
  const opened = openNote(checkpoint, verifiers);
  if ('error' in opened) return fail(`checkpoint: ${opened.error}`);
  const tree = parseCheckpoint(opened.text);
  if ('error' in tree) return fail(`checkpoint: ${tree.error}`);
  if (tree.origin !== opened.signer) return fail('checkpoint: its origin is not the name of the key that signed it');

  if (!isObject(record) || !isObject(record.body) || typeof record.record_hash !== 'string')
    return fail('record: expected a line of the records export ({"body": {…}, "record_hash": …})');
  const body = record.body as unknown as RecordBody;
  if (recordHashOf(body) !== record.record_hash) return fail('record: the body does not hash to record_hash');
  if (!tree.origin.endsWith(`/orgs/${body.org_id}`))
    return fail(`checkpoint: ${tree.origin} is not the log of org ${body.org_id}`);

  if (!isObject(proof) || !Array.isArray(proof.hashes))
    return fail('proof: expected {leaf_index, tree_size, root_hash, hashes}');
  if (proof.tree_size !== Number(tree.size))
    return fail(`proof: at tree size ${proof.tree_size}, the checkpoint is at ${tree.size}`);
  if (proof.leaf_index !== body.seq - 1)
    return fail(`proof: for leaf ${proof.leaf_index}, the record is seq ${body.seq}`);
  const hashes = proof.hashes.map(base64Hash);
  if (hashes.some((hash) => !hash)) return fail('proof: a hash is not 32 bytes of base64');
  const leaf = recordLeafHash(record.record_hash);
  if (!verifyInclusion(BigInt(body.seq - 1), tree.size, leaf, hashes as Buffer[], tree.root))
    return fail('proof: the record is not in the tree of the checkpoint');
  return { ok: true, recordId: body.record_id, seq: body.seq, treeSize: Number(tree.size), origin: tree.origin };
}
