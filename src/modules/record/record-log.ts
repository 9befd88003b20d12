import { createPublicKey } from 'node:crypto';
import type { JWK } from 'jose';
import type { Deps } from '../../deps.js';
import { AppError, FieldErrors } from '../../errors.js';
import type { InteractionRecord } from '../../generated/prisma/client.js';
import { checkpointText, signNote, verifierKey } from './checkpoint.js';
import type { ExportCheckpoint } from './record-export.js';
import {
  completeSubtrees,
  consistencyProof,
  type Hash,
  HASH_BYTES,
  inclusionProof,
  MerkleFrontier,
  type NodeReader,
  nodesRead,
  recordLeafHash,
  seqOfNode,
  treeRoot,
} from './merkle.js';
import {
  type CheckpointRow,
  checkpointedWithin,
  insertCheckpoint,
  latestCheckpoint,
  lockCheckpoints,
  orgsPastTheirCheckpoint,
  treeAtHead,
  treeNodesOf,
} from './record-log.store.js';

/**
 * Records as a transparency log (docs/decisions/0059-records-as-a-transparency-log.md): signed
 * checkpoints of each org's Merkle tree, inclusion proofs of a record and consistency proofs
 * between two tree sizes, all at sizes a checkpoint covers. The tree itself is written by the
 * appends (record.service.ts); this reads it.
 */

export interface RecordCheckpoint {
  origin: string;
  tree_size: number;
  root_hash: string;
  /** The signed note: C2SP tlog-checkpoint text and its signature line. */
  note: string;
  key_id: string;
  created_at: Date;
}

export interface InclusionProof {
  record_id: string;
  leaf_index: number;
  tree_size: number;
  root_hash: string;
  hashes: string[];
}

export interface ConsistencyProof {
  from: number;
  to: number;
  hashes: string[];
}

/** How many orgs one sweep checkpoints at most; the rest wait for the next. */
const SWEEP_ORGS = 500;

const base64 = (hash: Hash) => hash.toString('base64');

export function createRecordLog(
  { db, keys, env }: Deps,
  findRecord: (orgId: string, id: string) => Promise<InteractionRecord>,
) {
  const host = new URL(env.publicUrl).host;
  /** The checkpoint origin, also the name of the key in the note: `<PUBLIC_URL host>/orgs/<org_id>`. */
  const originOf = (orgId: string) => `${host}/orgs/${orgId}`;

  const view = (orgId: string, row: CheckpointRow): RecordCheckpoint => ({
    origin: originOf(orgId),
    tree_size: Number(row.tree_size),
    root_hash: Buffer.from(row.root_hash).toString('base64'),
    note: row.note,
    key_id: row.key_id,
    created_at: row.created_at,
  });

  /**
   * Signs a checkpoint of the org's tree at its head when it grew past the latest one and the
   * latest is at least CHECKPOINT_SECONDS old; returns the latest checkpoint either way (none before
   * the org's first record). Publishers of one org, in any process, take turns on a lock.
   */
  async function publish(orgId: string): Promise<CheckpointRow | undefined> {
    // Most reads find no checkpoint due: they answer without a transaction or the org's lock, so
    // a flood of proof requests does not queue on it. The locked path decides on the database's clock.
    const [current, head] = await Promise.all([latestCheckpoint(db.sql, orgId), treeAtHead(db.sql, orgId)]);
    const grew = head.size > (current ? BigInt(current.tree_size) : 0n);
    const recent = current && Date.now() - current.created_at.getTime() < env.checkpointSeconds * 1000;
    if (!grew || recent) return current;
    // Outside the transaction: on PGlite a second query path would wait for the transaction's connection.
    const key = await keys.activeKey('checkpoint');
    return db.sql.transaction(async (tx) => {
      await lockCheckpoints(tx, orgId);
      const latest = await latestCheckpoint(tx, orgId);
      const tree = await treeAtHead(tx, orgId);
      const grew = tree.size > (latest ? BigInt(latest.tree_size) : 0n);
      if (!grew) return latest;
      if (latest && env.checkpointSeconds > 0 && (await checkpointedWithin(tx, orgId, env.checkpointSeconds)))
        return latest;
      const root = MerkleFrontier.of(tree.size, tree.frontier).root();
      const text = checkpointText({ origin: originOf(orgId), size: tree.size, root });
      const note = signNote(text, originOf(orgId), key.privateKey, key.publicKey);
      return insertCheckpoint(tx, orgId, { size: tree.size, root, note, keyId: key.kid });
    });
  }

  /** The latest checkpoint, signing a new one first when one is due. */
  async function checkpoint(orgId: string): Promise<RecordCheckpoint> {
    const latest = await publish(orgId);
    if (!latest) throw new AppError('NOT_FOUND', 'No checkpoint yet: the organization has no records');
    return view(orgId, latest);
  }

  /**
   * The verifier keys of the org's checkpoints in the note verifier-key form: the active key's,
   * and every key's, retired ones included, so that old checkpoints keep verifying after a rotation.
   */
  async function verifiers(orgId: string): Promise<{ verifier_key: string; verifier_keys: string[] }> {
    const active = await keys.activeKey('checkpoint');
    const { keys: all } = await keys.jwks(['checkpoint']);
    const name = originOf(orgId);
    const of = (jwk: JWK) =>
      verifierKey(name, createPublicKey({ key: jwk as JWK & Record<string, unknown>, format: 'jwk' }));
    return { verifier_key: verifierKey(name, active.publicKey), verifier_keys: all.reverse().map(of) };
  }

  /** Reads the nodes a computation needs in one statement, then runs it on them. */
  async function withNodes<T>(orgId: string, compute: (read: NodeReader) => T): Promise<T> {
    const needed = nodesRead(compute);
    const stored = await treeNodesOf(
      db.sql,
      orgId,
      needed.map((node) => seqOfNode(node)),
    );
    return compute((node) => {
      const record = stored.get(seqOfNode(node));
      const hash =
        node.level === 0
          ? record && recordLeafHash(record.recordHash)
          : record?.nodes?.subarray((node.level - 1) * HASH_BYTES, node.level * HASH_BYTES);
      if (!hash || hash.length !== HASH_BYTES)
        throw new Error(`the record tree of org ${orgId} has no node ${node.level}/${node.index}`);
      return hash;
    });
  }

  /** The tree size the latest checkpoint covers, signing a new one first when one is due. */
  async function coveredSize(orgId: string): Promise<bigint> {
    const latest = await publish(orgId);
    return latest ? BigInt(latest.tree_size) : 0n;
  }

  /** A tree size a proof is asked at, checked against the latest checkpoint's (422 beyond it). */
  function checkedSize(covered: bigint, field: string, asked: number | null | undefined, errors: FieldErrors) {
    if (asked === null || asked === undefined) return covered;
    if (!Number.isSafeInteger(asked) || asked < 1) errors.add(field, 'must be a tree size of at least 1');
    else if (BigInt(asked) > covered)
      errors.add(field, `must be at most ${covered}, the tree size of the latest checkpoint`);
    return BigInt(Math.max(1, Math.floor(asked)));
  }

  /** RFC 9162 inclusion proof of a record in the tree of `treeSize` (default: the latest checkpoint's). */
  async function inclusion(orgId: string, recordId: string, treeSize?: number | null): Promise<InclusionProof> {
    const record = await findRecord(orgId, recordId);
    const errors = new FieldErrors();
    const size = checkedSize(await coveredSize(orgId), 'tree_size', treeSize, errors);
    errors.throwIfAny();
    if (size === 0n) throw new AppError('NOT_FOUND', 'No checkpoint yet: the organization has no records');
    if (record.seq > size)
      errors.add('tree_size', `record ${record.id} (seq ${record.seq}) is not in the tree of ${size}`);
    errors.throwIfAny();
    const leafIndex = record.seq - 1n;
    const { proof, root } = await withNodes(orgId, (read) => ({
      proof: inclusionProof(leafIndex, size, read),
      root: treeRoot(size, read),
    }));
    return {
      record_id: record.id,
      leaf_index: Number(leafIndex),
      tree_size: Number(size),
      root_hash: base64(root),
      hashes: proof.map(base64),
    };
  }

  /** RFC 9162 consistency proof between the trees of `from` and `to` leaves. */
  async function consistency(orgId: string, from: number, to: number): Promise<ConsistencyProof> {
    const errors = new FieldErrors();
    const covered = await coveredSize(orgId);
    const toSize = checkedSize(covered, 'to', to, errors);
    const fromSize = checkedSize(covered, 'from', from, errors);
    errors.throwIfAny();
    if (fromSize > toSize) errors.add('from', 'must be at most to');
    errors.throwIfAny();
    const proof = await withNodes(orgId, (read) => consistencyProof(fromSize, toSize, read));
    return { from: Number(fromSize), to: Number(toSize), hashes: proof.map(base64) };
  }

  /**
   * What a records export carries to tie its records to a checkpoint of `size` leaves: the note,
   * the key that verifies it, and the roots of the complete subtrees before the first exported leaf
   * and after the last (up to the checkpoint's size), so that a verifier rebuilds the checkpoint's
   * root from the file. Exported records past the checkpoint are in the next one.
   */
  async function exportCoverage(
    orgId: string,
    checkpoint: CheckpointRow,
    range: { first: bigint; last: bigint } | null,
  ): Promise<ExportCheckpoint> {
    const size = BigInt(checkpoint.tree_size);
    // Leaves before the first exported one (all of the checkpoint's when it covers none of them),
    // and after the last exported one that the checkpoint still covers.
    const beforeEnd = range && range.first - 1n < size ? range.first - 1n : size;
    const afterStart = range && range.first - 1n < size && range.last < size ? range.last : size;
    const { before, after } = await withNodes(orgId, (read) => ({
      before: completeSubtrees(0n, beforeEnd).map(read),
      after: completeSubtrees(afterStart, size).map(read),
    }));
    const key = await keys.byId(checkpoint.key_id);
    if (!key) throw new Error(`checkpoint key ${checkpoint.key_id} is missing`);
    return {
      note: checkpoint.note,
      verifier_key: verifierKey(originOf(orgId), key.publicKey),
      tree_size: Number(size),
      before: before.map(base64),
      after: after.map(base64),
    };
  }

  /** Checkpoints every org whose tree grew (the periodic sweep; any number of processes may run it). */
  async function publishDue(): Promise<number> {
    const orgs = await orgsPastTheirCheckpoint(db.sql, SWEEP_ORGS);
    for (const orgId of orgs) await publish(orgId);
    return orgs.length;
  }

  return { checkpoint, verifiers, inclusion, consistency, publishDue, publish, exportCoverage };
}

export type RecordLog = ReturnType<typeof createRecordLog>;
