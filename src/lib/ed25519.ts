import type { KeyObject } from 'node:crypto';
import sodium from 'sodium-native';

/**
 * Ed25519 signatures with libsodium (docs/decisions/0080-ed25519-with-libsodium.md): the same
 * bytes as `crypto.sign(null, message, key)` (Ed25519 is deterministic), in half its CPU, which
 * matters because every interaction record is signed. Verification stays with node:crypto.
 */

/** libsodium's secret key of each private key (its seed, then its public key), made once per key. */
const secretKeys = new WeakMap<KeyObject, Buffer>();

function secretKeyOf(privateKey: KeyObject): Buffer {
  const known = secretKeys.get(privateKey);
  if (known) return known;
  if (privateKey.asymmetricKeyType !== 'ed25519') throw new Error('an Ed25519 signature needs an Ed25519 private key');
  const { d, x } = privateKey.export({ format: 'jwk' });
  const secretKey = sodium.sodium_malloc(sodium.crypto_sign_SECRETKEYBYTES);
  Buffer.from(d!, 'base64url').copy(secretKey, 0);
  Buffer.from(x!, 'base64url').copy(secretKey, 32);
  secretKeys.set(privateKey, secretKey);
  return secretKey;
}

/** The Ed25519 signature of `message` by `privateKey`. */
export function signEd25519(message: Uint8Array, privateKey: KeyObject): Buffer {
  const signature = Buffer.allocUnsafe(sodium.crypto_sign_BYTES);
  sodium.crypto_sign_detached(signature, message, secretKeyOf(privateKey));
  return signature;
}
