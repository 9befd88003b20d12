import { createHash, createPublicKey, verify, type KeyObject } from 'node:crypto';
import { signEd25519 } from '../../lib/ed25519.js';

/**
 * Checkpoints of an org's Merkle tree as C2SP `tlog-checkpoint` text in a C2SP `signed-note`, with
 * Ed25519 keys named in the note verifier-key form. Pure, so that the service signs and the offline
 * verifier, the console and the tests check with the same code; Go's golang.org/x/mod/sumdb/note
 * reads what this writes.
 *
 *   <origin>\n<tree size>\n<base64 root hash>\n
 *   \n
 *   — <key name> <base64(4-byte key hash ‖ 64-byte signature)>\n
 */

export interface Checkpoint {
  origin: string;
  size: bigint;
  root: Buffer;
}

/** The signature algorithm byte of Ed25519 in a verifier key and in the key hash. */
const ED25519 = 0x01;
const SIGNATURE_PREFIX = '\u2014 ';

export function checkpointText({ origin, size, root }: Checkpoint): string {
  return `${origin}\n${size}\n${root.toString('base64')}\n`;
}

const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

/** The checkpoint a note's text holds, or why it is not one. */
export function parseCheckpoint(text: string): Checkpoint | { error: string } {
  const lines = text.split('\n');
  if (lines.length < 4 || lines[lines.length - 1] !== '') return { error: 'a checkpoint has at least three lines' };
  const [origin, size, root] = lines;
  if (!origin) return { error: 'the checkpoint has no origin' };
  if (!/^(0|[1-9][0-9]{0,18})$/.test(size)) return { error: 'the tree size is not a decimal number' };
  const rootBytes = BASE64.test(root) ? Buffer.from(root, 'base64') : Buffer.alloc(0);
  if (rootBytes.length !== 32) return { error: 'the root hash is not 32 bytes of base64' };
  return { origin, size: BigInt(size), root: rootBytes };
}

const rawPublicKey = (publicKey: KeyObject): Buffer =>
  Buffer.from(publicKey.export({ format: 'jwk' }).x as string, 'base64url');

/** The 4-byte hash that names a key in signature lines: SHA-256(name ‖ "\n" ‖ 0x01 ‖ key)[:4]. */
function keyHash(name: string, rawKey: Buffer): Buffer {
  return createHash('sha256')
    .update(`${name}\n`)
    .update(Buffer.from([ED25519]))
    .update(rawKey)
    .digest()
    .subarray(0, 4);
}

const validKeyName = (name: string) => name.length > 0 && !/[\s+]/.test(name);

/** The verifier key: `<name>+<hex key hash>+<base64 of 0x01 ‖ public key>`. */
export function verifierKey(name: string, publicKey: KeyObject): string {
  if (!validKeyName(name)) throw new Error(`not a note key name: ${name}`);
  const raw = rawPublicKey(publicKey);
  return `${name}+${keyHash(name, raw).toString('hex')}+${Buffer.concat([Buffer.from([ED25519]), raw]).toString('base64')}`;
}

export interface NoteVerifier {
  name: string;
  hash: Buffer;
  publicKey: KeyObject;
}

/** A verifier key read back, or why it is not one. */
export function parseVerifierKey(text: string): NoteVerifier | { error: string } {
  // The key's base64 may hold '+' itself; the name and the hash cannot.
  const [name, hash, ...keyParts] = text.trim().split('+');
  const key = keyParts.join('+');
  if (!name || !hash || !key) return { error: 'a verifier key is <name>+<hash>+<key>' };
  if (!/^[0-9a-f]{8}$/.test(hash)) return { error: 'the key hash is not 8 hex digits' };
  const keyBytes = BASE64.test(key) ? Buffer.from(key, 'base64') : Buffer.alloc(0);
  if (keyBytes.length !== 33 || keyBytes[0] !== ED25519) return { error: 'the key is not an Ed25519 public key' };
  const raw = keyBytes.subarray(1);
  if (!keyHash(name, raw).equals(Buffer.from(hash, 'hex'))) return { error: 'the key hash does not match the key' };
  const publicKey = createPublicKey({
    key: { kty: 'OKP', crv: 'Ed25519', x: raw.toString('base64url') },
    format: 'jwk',
  });
  return { name, hash: Buffer.from(hash, 'hex'), publicKey };
}

/** A signed note of `text` (which ends with a newline) by the key named `name`. */
export function signNote(text: string, name: string, privateKey: KeyObject, publicKey: KeyObject): string {
  if (!text.endsWith('\n')) throw new Error('a note text ends with a newline');
  const signature = signEd25519(Buffer.from(text, 'utf8'), privateKey);
  const stamp = Buffer.concat([keyHash(name, rawPublicKey(publicKey)), signature]).toString('base64');
  return `${text}\n${SIGNATURE_PREFIX}${name} ${stamp}\n`;
}

/**
 * The text of a note if one of its signatures is by one of `verifiers` and verifies; otherwise why
 * not. Signatures by keys not given are ignored, as C2SP signed-note says.
 */
export function openNote(
  note: string,
  verifiers: readonly NoteVerifier[],
): { text: string; signer: string } | { error: string } {
  const split = note.lastIndexOf('\n\n');
  if (split < 0 || !note.endsWith('\n')) return { error: 'not a signed note' };
  const text = note.slice(0, split + 1);
  const lines = note.slice(split + 2, -1).split('\n');
  let known = false;
  for (const line of lines) {
    if (!line.startsWith(SIGNATURE_PREFIX)) return { error: 'a signature line does not start with an em dash' };
    const [name, stamp, ...rest] = line.slice(SIGNATURE_PREFIX.length).split(' ');
    const bytes = stamp && BASE64.test(stamp) ? Buffer.from(stamp, 'base64') : Buffer.alloc(0);
    if (rest.length || bytes.length < 5) return { error: 'a signature line is malformed' };
    const verifier = verifiers.find((v) => v.name === name && v.hash.equals(bytes.subarray(0, 4)));
    if (!verifier) continue;
    known = true;
    if (verify(null, Buffer.from(text, 'utf8'), verifier.publicKey, bytes.subarray(4))) return { text, signer: name };
  }
  return { error: known ? 'the signature does not verify' : 'no signature by a known key' };
}
