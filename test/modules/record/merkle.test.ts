import { createHash } from 'node:crypto';
import {
  completeSubtrees,
  consistencyProof,
  EMPTY_ROOT,
  type Hash,
  inclusionProof,
  leafHash,
  MerkleFrontier,
  nodeHash,
  type NodeId,
  nodesRead,
  recordLeafHash,
  seqOfNode,
  treeRoot,
  verifyConsistency,
  verifyInclusion,
} from '../../../src/modules/record/merkle.js';

/** RFC 9162's MTH straight from its definition, as the reference. */
function referenceRoot(leaves: Hash[]): Hash {
  if (leaves.length === 0) return createHash('sha256').digest();
  if (leaves.length === 1) return leaves[0];
  let k = 1;
  while (k * 2 < leaves.length) k *= 2;
  return nodeHash(referenceRoot(leaves.slice(0, k)), referenceRoot(leaves.slice(k)));
}

const leafOf = (i: number) => leafHash(Buffer.from(`leaf ${i}`));

/** A tree built the way the service stores it: each record keeps the nodes its leaf completed. */
function storedTree(size: number) {
  const frontier = MerkleFrontier.empty();
  const stored = new Map<bigint, Hash[]>(); // seq → [leaf hash, level 1, level 2, …]
  for (let i = 0; i < size; i++) {
    const leaf = leafOf(i);
    stored.set(BigInt(i + 1), [leaf, ...frontier.append(leaf)]);
  }
  const read = (node: NodeId) => {
    const hash = stored.get(seqOfNode(node))?.[node.level];
    if (!hash) throw new Error(`node ${node.level}/${node.index} is not stored`);
    return hash;
  };
  return { frontier, read };
}

describe('the tree (RFC 9162 §2.1)', () => {
  test('the root of the empty tree is SHA-256 of nothing; a leaf is SHA-256(0x00 ‖ data)', () => {
    expect(MerkleFrontier.empty().root().toString('hex')).toBe(
      'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855',
    );
    expect(EMPTY_ROOT.equals(MerkleFrontier.empty().root())).toBe(true);
    expect(leafHash(Buffer.alloc(0)).toString('hex')).toBe(
      '6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d',
    );
  });

  test('a record leaf is the hash of its record hash bytes; anything else is refused', () => {
    const hex = 'ab'.repeat(32);
    expect(recordLeafHash(`sha256:${hex}`).equals(leafHash(Buffer.from(hex, 'hex')))).toBe(true);
    expect(() => recordLeafHash(hex)).toThrow('not a record hash');
    expect(() => recordLeafHash('sha256:XY')).toThrow('not a record hash');
  });

  test('appending leaf by leaf gives the root of the definition at every size, from stored nodes too', () => {
    const frontier = MerkleFrontier.empty();
    const leaves: Hash[] = [];
    for (let size = 1; size <= 130; size++) {
      leaves.push(leafOf(size - 1));
      frontier.append(leaves[size - 1]);
      expect(frontier.root().equals(referenceRoot(leaves))).toBe(true);
    }
    const { read } = storedTree(130);
    for (const size of [1, 2, 3, 7, 8, 9, 64, 65, 100, 130])
      expect(treeRoot(BigInt(size), read).equals(referenceRoot(leaves.slice(0, size)))).toBe(true);
  });

  test('a frontier survives its stored form, and a stored form of the wrong length is refused', () => {
    const { frontier } = storedTree(13);
    const restored = MerkleFrontier.of(13n, frontier.packed());
    expect(frontier.packed()).toHaveLength(3 * 32);
    expect(restored.root().equals(frontier.root())).toBe(true);
    restored.append(leafOf(13));
    frontier.append(leafOf(13));
    expect(restored.root().equals(frontier.root())).toBe(true);
    expect(() => MerkleFrontier.of(12n, frontier.packed())).toThrow('edge hashes');
  });

  test('a leaf completes the nodes of its trailing one bits', () => {
    const frontier = MerkleFrontier.empty();
    const completed = Array.from({ length: 16 }, (_, i) => frontier.append(leafOf(i)).length);
    expect(completed).toEqual([0, 1, 0, 2, 0, 1, 0, 3, 0, 1, 0, 2, 0, 1, 0, 4]);
  });
});

describe('inclusion proofs (RFC 9162 §2.1.3)', () => {
  test('every leaf of every tree up to 70 leaves verifies against its root; a wrong leaf, index, tree or root does not', () => {
    const { read } = storedTree(70);
    for (let size = 1n; size <= 70n; size++) {
      const root = treeRoot(size, read);
      for (let index = 0n; index < size; index++) {
        const proof = inclusionProof(index, size, read);
        const leaf = leafOf(Number(index));
        expect(verifyInclusion(index, size, leaf, proof, root)).toBe(true);
        expect(verifyInclusion(index, size, leafOf(Number(index) + 1), proof, root)).toBe(false);
        if (size > 1n) expect(verifyInclusion((index + 1n) % size, size, leaf, proof, root)).toBe(false);
        if (size < 70n) expect(verifyInclusion(index, size + 1n, leaf, proof, treeRoot(size + 1n, read))).toBe(false);
        expect(verifyInclusion(index, size, leaf, proof, leafOf(999))).toBe(false);
      }
    }
  });

  test('a proof with a hash changed, one dropped or one added does not verify', () => {
    const { read } = storedTree(37);
    const root = treeRoot(37n, read);
    const proof = inclusionProof(20n, 37n, read);
    const changed = proof.map((hash, i) => (i === 2 ? leafOf(1234) : hash));
    expect(verifyInclusion(20n, 37n, leafOf(20), changed, root)).toBe(false);
    expect(verifyInclusion(20n, 37n, leafOf(20), proof.slice(1), root)).toBe(false);
    expect(verifyInclusion(20n, 37n, leafOf(20), [...proof, leafOf(1)], root)).toBe(false);
  });

  test('a leaf outside the tree has no proof', () => {
    const { read } = storedTree(5);
    expect(() => inclusionProof(5n, 5n, read)).toThrow(RangeError);
  });

  test('a proof reads O(log n) nodes: the plan names each once', () => {
    const { read } = storedTree(1000);
    const nodes = nodesRead((reader) => inclusionProof(500n, 1000n, reader));
    expect(nodes.length).toBeLessThanOrEqual(2 * Math.ceil(Math.log2(1000)));
    expect(new Set(nodes.map((n) => `${n.level}:${n.index}`)).size).toBe(nodes.length);
    for (const node of nodes) expect(() => read(node)).not.toThrow();
  });
});

describe('consistency proofs (RFC 9162 §2.1.4)', () => {
  test('every pair of sizes up to 45 is consistent; another root or a changed proof is not', () => {
    const { read } = storedTree(45);
    for (let to = 1n; to <= 45n; to++) {
      const toRoot = treeRoot(to, read);
      for (let from = 1n; from <= to; from++) {
        const fromRoot = treeRoot(from, read);
        const proof = consistencyProof(from, to, read);
        expect(verifyConsistency(from, to, fromRoot, toRoot, proof)).toBe(true);
        if (from < to) {
          expect(verifyConsistency(from, to, leafOf(777), toRoot, proof)).toBe(false);
          expect(verifyConsistency(from, to, fromRoot, leafOf(777), proof)).toBe(false);
          expect(verifyConsistency(from, to, fromRoot, toRoot, [...proof.slice(1), leafOf(5)])).toBe(false);
          expect(verifyConsistency(from, to, fromRoot, toRoot, [])).toBe(false);
        }
      }
    }
  });

  test('a history rewritten at one leaf is not consistent with the first', () => {
    const { read } = storedTree(20);
    const forged = MerkleFrontier.empty();
    for (let i = 0; i < 30; i++) forged.append(i === 3 ? leafOf(9999) : leafOf(i));
    const fromRoot = treeRoot(20n, read);
    // A proof made from the real tree of 30 does not tie the real 20 to the forged 30.
    const real30 = storedTree(30);
    const proof = consistencyProof(20n, 30n, real30.read);
    expect(verifyConsistency(20n, 30n, fromRoot, treeRoot(30n, real30.read), proof)).toBe(true);
    expect(verifyConsistency(20n, 30n, fromRoot, forged.root(), proof)).toBe(false);
  });

  test('sizes out of order have no proof', () => {
    const { read } = storedTree(5);
    expect(() => consistencyProof(0n, 5n, read)).toThrow(RangeError);
    expect(() => consistencyProof(4n, 3n, read)).toThrow(RangeError);
  });
});

describe('a range of the tree between two compact edges (the records export)', () => {
  test('the roots before a range, its leaves, then the subtrees after it rebuild the root of every size', () => {
    const { read } = storedTree(40);
    for (let size = 1n; size <= 40n; size++)
      for (let first = 1n; first <= size; first++)
        for (const last of new Set([first, (first + size) / 2n, size])) {
          if (last < first) continue;
          const before = completeSubtrees(0n, first - 1n).map(read);
          const tree = MerkleFrontier.of(first - 1n, Buffer.concat(before));
          for (let seq = first; seq <= last; seq++) tree.append(leafOf(Number(seq - 1n)));
          for (const node of completeSubtrees(last, size)) tree.appendSubtree(node.level, read(node));
          expect(tree.size).toBe(size);
          expect(tree.root().equals(treeRoot(size, read))).toBe(true);
        }
  });

  test('a subtree that does not start at a multiple of its width is refused', () => {
    const tree = MerkleFrontier.empty();
    tree.append(leafOf(0));
    expect(() => tree.appendSubtree(1, leafOf(1))).toThrow('cannot follow');
  });
});
