import { createHash } from 'node:crypto';

/**
 * The Merkle tree of an org's records (RFC 9162 §2.1): leaf `SHA-256(0x00 ‖ data)`, node
 * `SHA-256(0x01 ‖ left ‖ right)`, the leaves in seq order (leaf index = seq − 1), a leaf's data the
 * 32 bytes of the record's hash. Everything here is pure: the service, the offline verifier and the
 * console check proofs with the same functions.
 *
 * A node is named by its level and index: level L, index i covers leaves [i·2^L, (i+1)·2^L), and
 * is complete once leaf (i+1)·2^L − 1 is appended. That record (seq (i+1)·2^L) stores it, so a node
 * is read by the (org, seq) key the records already have, and is written in the statement that
 * appends its record.
 */

export type Hash = Buffer;

const LEAF_PREFIX = Buffer.from([0]);
const NODE_PREFIX = Buffer.from([1]);
export const HASH_BYTES = 32;

export const leafHash = (data: Buffer): Hash => createHash('sha256').update(LEAF_PREFIX).update(data).digest();
export const nodeHash = (left: Hash, right: Hash): Hash =>
  createHash('sha256').update(NODE_PREFIX).update(left).update(right).digest();
/** The root of the empty tree: SHA-256 of nothing. */
export const EMPTY_ROOT: Hash = createHash('sha256').digest();

const RECORD_HASH = /^sha256:([0-9a-f]{64})$/;

/** A record's leaf: the hash of its record hash's 32 bytes. */
export function recordLeafHash(recordHash: string): Hash {
  const hex = RECORD_HASH.exec(recordHash)?.[1];
  if (!hex) throw new Error(`not a record hash: ${recordHash}`);
  return leafHash(Buffer.from(hex, 'hex'));
}

export interface NodeId {
  level: number;
  index: bigint;
}

/** The seq of the record that stores a node (for level 0, the leaf's own record). */
export const seqOfNode = ({ level, index }: NodeId): bigint => (index + 1n) << BigInt(level);

/**
 * The right edge of a tree: the roots of its complete subtrees from the largest to the smallest,
 * one per bit set in its size. Appending a leaf needs nothing else, so the org's chain head keeps
 * it and an append never reads the tree.
 */
export class MerkleFrontier {
  private constructor(
    private treeSize: bigint,
    private readonly roots: Hash[],
  ) {}

  static empty(): MerkleFrontier {
    return new MerkleFrontier(0n, []);
  }

  /** From the stored form: the roots' 32-byte hashes one after another. */
  static of(size: bigint, packed: Buffer): MerkleFrontier {
    const expected = popCount(size);
    if (packed.length !== expected * HASH_BYTES)
      throw new Error(`a tree of ${size} leaves has ${expected} edge hashes, not ${packed.length / HASH_BYTES}`);
    const roots = Array.from({ length: expected }, (_, i) => packed.subarray(i * HASH_BYTES, (i + 1) * HASH_BYTES));
    return new MerkleFrontier(size, roots);
  }

  get size(): bigint {
    return this.treeSize;
  }

  packed(): Buffer {
    return Buffer.concat(this.roots);
  }

  /**
   * Appends a leaf; returns the nodes it completed above level 0, lowest first (node L − 1 of the
   * list is at level L): what the leaf's record stores.
   */
  append(leaf: Hash): Hash[] {
    const completed: Hash[] = [];
    let node = leaf;
    // Each trailing 1 bit of the size is a complete subtree of that level waiting for a sibling.
    for (let level = 0n; (this.treeSize >> level) & 1n; level++) {
      node = nodeHash(this.roots.pop()!, node);
      completed.push(node);
    }
    this.roots.push(node);
    this.treeSize += 1n;
    return completed;
  }

  /**
   * Appends a whole complete subtree of 2^level leaves by its root: the size must be a multiple of
   * 2^level, as it is for each subtree of `completeSubtrees(size, end)` in order.
   */
  appendSubtree(level: number, root: Hash): void {
    if (level === 0) {
      this.append(root);
      return;
    }
    const width = 1n << BigInt(level);
    if (this.treeSize % width !== 0n) throw new Error(`a subtree of ${width} leaves cannot follow ${this.treeSize}`);
    let node = root;
    for (let at = BigInt(level); (this.treeSize >> at) & 1n; at++) node = nodeHash(this.roots.pop()!, node);
    this.roots.push(node);
    this.treeSize += width;
  }

  root(): Hash {
    return foldRight(this.roots);
  }
}

/** Folds subtree roots from the right: the root of their concatenation (RFC 9162's MTH). */
function foldRight(roots: readonly Hash[]): Hash {
  if (!roots.length) return EMPTY_ROOT;
  let hash = roots[roots.length - 1];
  for (let i = roots.length - 2; i >= 0; i--) hash = nodeHash(roots[i], hash);
  return hash;
}

function popCount(n: bigint): number {
  let count = 0;
  for (let rest = n; rest > 0n; rest >>= 1n) count += Number(rest & 1n);
  return count;
}

/** The largest power of two smaller than n (n ≥ 2). */
function splitPoint(n: bigint): bigint {
  let k = 1n;
  while (k << 1n < n) k <<= 1n;
  return k;
}

/** The complete subtrees that make up leaves [start, end), left to right. */
export function completeSubtrees(start: bigint, end: bigint): NodeId[] {
  const nodes: NodeId[] = [];
  let at = start;
  while (at < end) {
    let level = 0;
    while (at % (1n << BigInt(level + 1)) === 0n && at + (1n << BigInt(level + 1)) <= end) level++;
    nodes.push({ level, index: at >> BigInt(level) });
    at += 1n << BigInt(level);
  }
  return nodes;
}

/** Reads a node of the tree; the proofs ask for complete nodes only. */
export type NodeReader = (node: NodeId) => Hash;

const rangeHash = (start: bigint, end: bigint, read: NodeReader) => foldRight(completeSubtrees(start, end).map(read));

/** RFC 9162 §2.1.3.1: the inclusion proof of a leaf in the tree of `size` leaves. */
export function inclusionProof(leafIndex: bigint, size: bigint, read: NodeReader): Hash[] {
  if (leafIndex < 0n || leafIndex >= size) throw new RangeError(`leaf ${leafIndex} is not in a tree of ${size}`);
  const path: Hash[] = [];
  const walk = (start: bigint, end: bigint) => {
    if (end - start <= 1n) return;
    const middle = start + splitPoint(end - start);
    if (leafIndex < middle) {
      walk(start, middle);
      path.push(rangeHash(middle, end, read));
    } else {
      walk(middle, end);
      path.push(rangeHash(start, middle, read));
    }
  };
  walk(0n, size);
  return path;
}

/** RFC 9162 §2.1.4.1: the consistency proof between the trees of `from` and `to` leaves. */
export function consistencyProof(from: bigint, to: bigint, read: NodeReader): Hash[] {
  if (from < 1n || from > to) throw new RangeError(`no consistency proof from ${from} to ${to}`);
  const proof: Hash[] = [];
  const sub = (m: bigint, start: bigint, end: bigint, whole: boolean) => {
    if (start + m === end) {
      if (!whole) proof.push(rangeHash(start, end, read));
      return;
    }
    const k = splitPoint(end - start);
    if (m <= k) {
      sub(m, start, start + k, whole);
      proof.push(rangeHash(start + k, end, read));
    } else {
      sub(m - k, start + k, end, false);
      proof.push(rangeHash(start, start + k, read));
    }
  };
  sub(from, 0n, to, true);
  return proof;
}

/** The root of the tree of `size` leaves from its complete nodes. */
export const treeRoot = (size: bigint, read: NodeReader): Hash => rangeHash(0n, size, read);

/**
 * The nodes a computation reads, found by running it once against zeros: the service reads them
 * in one statement, then runs it again on the real hashes.
 */
export function nodesRead(compute: (read: NodeReader) => unknown): NodeId[] {
  const seen = new Map<string, NodeId>();
  compute((node) => {
    seen.set(`${node.level}:${node.index}`, node);
    return Buffer.alloc(HASH_BYTES);
  });
  return [...seen.values()];
}

/** RFC 9162 §2.1.3.2: whether `proof` proves the leaf at `leafIndex` in the tree of `size` with `root`. */
export function verifyInclusion(
  leafIndex: bigint,
  size: bigint,
  leaf: Hash,
  proof: readonly Hash[],
  root: Hash,
): boolean {
  if (leafIndex < 0n || leafIndex >= size) return false;
  let fn = leafIndex;
  let sn = size - 1n;
  let hash = leaf;
  for (const sibling of proof) {
    if (sn === 0n) return false;
    if (fn & 1n || fn === sn) {
      hash = nodeHash(sibling, hash);
      if (!(fn & 1n)) {
        while (fn !== 0n && !(fn & 1n)) {
          fn >>= 1n;
          sn >>= 1n;
        }
      }
    } else {
      hash = nodeHash(hash, sibling);
    }
    fn >>= 1n;
    sn >>= 1n;
  }
  return sn === 0n && hash.equals(root);
}

/** RFC 9162 §2.1.4.2: whether `proof` shows the tree of `to` leaves extends the tree of `from` leaves. */
export function verifyConsistency(
  from: bigint,
  to: bigint,
  fromRoot: Hash,
  toRoot: Hash,
  proof: readonly Hash[],
): boolean {
  if (from < 1n || from > to) return false;
  if (from === to) return proof.length === 0 && fromRoot.equals(toRoot);
  if (!proof.length) return false;
  const path = [...proof];
  // When `from` is a power of two its tree is a complete subtree of the new one: its root starts the path.
  if ((from & (from - 1n)) === 0n) path.unshift(fromRoot);
  let fn = from - 1n;
  let sn = to - 1n;
  while (fn & 1n) {
    fn >>= 1n;
    sn >>= 1n;
  }
  let fr = path[0];
  let sr = path[0];
  for (const c of path.slice(1)) {
    if (sn === 0n) return false;
    if (fn & 1n || fn === sn) {
      fr = nodeHash(c, fr);
      sr = nodeHash(c, sr);
      while (!(fn & 1n) && fn !== 0n) {
        fn >>= 1n;
        sn >>= 1n;
      }
    } else {
      sr = nodeHash(sr, c);
    }
    fn >>= 1n;
    sn >>= 1n;
  }
  return sn === 0n && fr.equals(fromRoot) && sr.equals(toRoot);
}
