/**
 * A record's place in its org's transparency log, checked in the browser with WebCrypto rather
 * than taken from the service: the checkpoint's signed note against a verifier key (C2SP
 * signed-note, Ed25519), and the record's RFC 9162 inclusion proof against the checkpoint's root.
 * The service's own verifier is src/modules/record (merkle.ts, checkpoint.ts); this one walks the
 * proof recursively, as the tree is defined, so the two share no code.
 */

export interface LogPlace {
  note: string;
  verifierKeys: string[];
  recordHash: string;
  seq: number;
  proof: { leaf_index: number; tree_size: number; root_hash: string; hashes: string[] };
}

export type LogCheck = { ok: true; treeSize: number; origin: string } | { ok: false; reason: string };

const bytes = (text: string) => new TextEncoder().encode(text);
const fromBase64 = (text: string) => Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
const fromHex = (hex: string) => Uint8Array.from(hex.match(/../g) ?? [], (pair) => Number.parseInt(pair, 16));

async function sha256(...parts: Uint8Array[]): Promise<Uint8Array> {
  const joined = new Uint8Array(parts.reduce((n, part) => n + part.length, 0));
  let at = 0;
  for (const part of parts) {
    joined.set(part, at);
    at += part.length;
  }
  return new Uint8Array(await crypto.subtle.digest('SHA-256', joined));
}

const same = (a: Uint8Array, b: Uint8Array) => a.length === b.length && a.every((x, i) => x === b[i]);
const node = (left: Uint8Array, right: Uint8Array) => sha256(Uint8Array.of(1), left, right);

/** The root of leaves [0, size) from leaf `index`'s hash and its audit path (last entry = top sibling). */
async function rootFrom(index: number, size: number, leaf: Uint8Array, path: Uint8Array[]): Promise<Uint8Array> {
  if (size === 1) {
    if (path.length) throw new Error('the proof is longer than the tree is deep');
    return leaf;
  }
  if (!path.length) throw new Error('the proof is shorter than the tree is deep');
  let split = 1;
  while (split * 2 < size) split *= 2;
  const top = path[path.length - 1];
  const below = path.slice(0, -1);
  return index < split
    ? node(await rootFrom(index, split, leaf, below), top)
    : node(top, await rootFrom(index - split, size - split, leaf, below));
}

/** The note's text when one of its signatures is by one of the keys and verifies. */
async function openNote(note: string, verifierKeys: string[]): Promise<string> {
  const split = note.lastIndexOf('\n\n');
  if (split < 0) throw new Error('the checkpoint is not a signed note');
  const text = note.slice(0, split + 1);
  const signatures = note
    .slice(split + 2)
    .trimEnd()
    .split('\n');
  for (const verifier of verifierKeys) {
    const [name, hash, ...rest] = verifier.split('+');
    const key = fromBase64(rest.join('+'));
    for (const line of signatures) {
      const [dash, signer, stamp] = line.split(' ');
      if (dash !== '\u2014' || signer !== name || !stamp) continue;
      const signed = fromBase64(stamp);
      const keyHash = Array.from(signed.slice(0, 4), (b) => b.toString(16).padStart(2, '0')).join('');
      if (keyHash !== hash) continue;
      const publicKey = await crypto.subtle.importKey('raw', key.slice(1), { name: 'Ed25519' }, false, ['verify']);
      if (await crypto.subtle.verify({ name: 'Ed25519' }, publicKey, signed.slice(4), bytes(text))) return text;
    }
  }
  throw new Error('the checkpoint is not signed by a key of the service');
}

export async function checkLogPlace(place: LogPlace): Promise<LogCheck> {
  try {
    const [origin, size, root] = (await openNote(place.note, place.verifierKeys)).split('\n');
    if (Number(size) !== place.proof.tree_size || root !== place.proof.root_hash)
      return { ok: false, reason: 'the proof is not for this checkpoint' };
    if (place.proof.leaf_index !== place.seq - 1) return { ok: false, reason: 'the proof is for another record' };
    const leaf = await sha256(Uint8Array.of(0), fromHex(place.recordHash.replace(/^sha256:/, '')));
    const rebuilt = await rootFrom(place.seq - 1, Number(size), leaf, place.proof.hashes.map(fromBase64));
    if (!same(rebuilt, fromBase64(root)))
      return { ok: false, reason: 'the record is not in the tree of the checkpoint' };
    return { ok: true, treeSize: Number(size), origin };
  } catch (failure) {
    return { ok: false, reason: failure instanceof Error ? failure.message : String(failure) };
  }
}
