import { randomBytes } from 'node:crypto';
import { sha256Hex } from '../../lib/hash.js';
import { crc32 } from 'node:zlib';
import { randomId } from '../../lib/ids.js';

/**
 * `agw_` + 32 random bytes in base62 (43 characters) + CRC32 of that body in base62 (6
 * characters), as GitHub tokens do: secret scanners can recognise a key, and the gateway rejects a
 * mistyped one without a database read. Only the SHA-256 of a key is stored.
 */

export const API_KEY_PREFIX = 'agw_';
const BODY_LENGTH = 43;
const CHECKSUM_LENGTH = 6;
const DISPLAY_PREFIX_LENGTH = 12;
const alphabet = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';

function base62(value: bigint, width: number): string {
  let out = '';
  while (value > 0n) {
    out = alphabet[Number(value % 62n)] + out;
    value /= 62n;
  }
  return out.padStart(width, '0');
}

/** CRC32 of the body in base62; with a number, not a bigint: it is checked on every call with a key. */
function checksum(body: string): string {
  let value = crc32(body);
  let out = '';
  while (value > 0) {
    out = alphabet[value % 62] + out;
    value = Math.floor(value / 62);
  }
  return out.padStart(CHECKSUM_LENGTH, '0');
}

export function generateApiKey(): { key: string; hash: string; prefix: string } {
  const body = base62(BigInt(`0x${randomBytes(32).toString('hex')}`), BODY_LENGTH);
  const key = `${API_KEY_PREFIX}${body}${checksum(body)}`;
  return { key, hash: hashApiKey(key), prefix: key.slice(0, DISPLAY_PREFIX_LENGTH) };
}

const shape = new RegExp(`^${API_KEY_PREFIX}[0-9A-Za-z]{${BODY_LENGTH + CHECKSUM_LENGTH}}$`);

/** True when the key has our shape and its checksum matches: worth a database lookup. */
export function isWellFormedApiKey(key: string): boolean {
  if (!shape.test(key)) return false;
  const body = key.slice(API_KEY_PREFIX.length, API_KEY_PREFIX.length + BODY_LENGTH);
  return key.slice(-CHECKSUM_LENGTH) === checksum(body);
}

export const hashApiKey = (key: string): string => sha256Hex(key);

export const newKeyId = (): string => randomId('key');
