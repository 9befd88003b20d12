import { randomBytes } from 'node:crypto';
import { crc32 } from 'node:zlib';
import { generateApiKey, isWellFormedApiKey } from '../../src/modules/api-key/api-key-format.js';

/**
 * A key's checksum is part of keys already given out: however it is computed, a key issued
 * earlier must stay well-formed. The reference here is the first implementation's arithmetic
 * (base62 of the CRC32 with bigints), written out independently of the module's.
 */
const alphabet = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';
function referenceBase62(value: bigint, width: number): string {
  let out = '';
  for (let rest = value; rest > 0n; rest /= 62n) out = alphabet[Number(rest % 62n)] + out;
  return out.padStart(width, '0');
}
const referenceKey = (body: string) => `agw_${body}${referenceBase62(BigInt(crc32(body)), 6)}`;
const randomBody = () => referenceBase62(BigInt(`0x${randomBytes(32).toString('hex')}`), 43);

test('keys made with the reference checksum are well-formed, and one character off in the checksum is not', () => {
  // A fixed key (a short checksum, padded with zeros) and many random ones.
  const bodies = ['0'.repeat(43), 'z'.repeat(43), ...Array.from({ length: 2000 }, randomBody)];
  for (const body of bodies) {
    const key = referenceKey(body);
    expect({ key, wellFormed: isWellFormedApiKey(key) }).toEqual({ key, wellFormed: true });
    const last = key.at(-1)!;
    const mistyped = key.slice(0, -1) + (last === 'a' ? 'b' : 'a');
    expect({ mistyped, wellFormed: isWellFormedApiKey(mistyped) }).toEqual({ mistyped, wellFormed: false });
  }
});

test('a generated key carries the reference checksum', () => {
  for (let i = 0; i < 200; i++) {
    const { key } = generateApiKey();
    expect(referenceKey(key.slice(4, 47))).toBe(key);
  }
});
