import canonicalizeModule from 'canonicalize';
import { sha256Hex } from './hash.js';

// The package is CommonJS with `export default`-style typings that NodeNext resolution misreads.
const canonicalize = canonicalizeModule as unknown as (value: unknown) => string | undefined;

/** RFC 8785 (JCS) canonical JSON: key order and whitespace do not change the bytes. */
export function canonicalJson(value: unknown): string {
  const text = canonicalize(value);
  if (text === undefined) throw new TypeError('value cannot be canonicalized');
  return text;
}

/** `sha256:` + hex SHA-256 of the canonical JSON, the form of `manifest_hash`. */
export const canonicalHash = (value: unknown): string => `sha256:${sha256Hex(canonicalJson(value))}`;
