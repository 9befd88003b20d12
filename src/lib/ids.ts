import { randomFillSync } from 'node:crypto';

/**
 * Identifiers: a type prefix and random bytes from the system CSPRNG. The bytes are drawn from a
 * pool refilled 4 KiB at a time: a gateway call makes two ids (request, interaction), and one
 * `getrandom` per id showed up at ~2% of a call.
 */
const POOL_BYTES = 4096;
let pool = Buffer.alloc(0);
let used = 0;

function randomSlice(length: number): Buffer {
  if (used + length > pool.length) {
    pool = randomFillSync(Buffer.allocUnsafe(POOL_BYTES));
    used = 0;
  }
  const slice = Buffer.from(pool.subarray(used, used + length));
  used += length;
  return slice;
}

/** `<prefix>_` + base64url of `bytes` random bytes. */
export const randomId = (prefix: string, bytes = 12): string => `${prefix}_${randomSlice(bytes).toString('base64url')}`;

/** `<prefix>_` + the time in ms (base 36, sortable) + hex of `bytes` random bytes. */
export const timeOrderedId = (prefix: string, now = Date.now(), bytes = 8): string =>
  `${prefix}_${now.toString(36).padStart(9, '0')}${randomSlice(bytes).toString('hex')}`;

/** `<prefix>_` + hex of `bytes` random bytes. */
export const randomHexId = (prefix: string, bytes = 12): string => `${prefix}_${randomSlice(bytes).toString('hex')}`;

const uuidPattern = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
/** Whether a path parameter can name a UUID row at all: anything else is a 404 without a query (PostgreSQL would reject it as uuid). */
export const isUuid = (text: string) => uuidPattern.test(text);
