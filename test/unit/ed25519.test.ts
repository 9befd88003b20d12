/**
 * Records and checkpoints are signed with libsodium (src/lib/ed25519.ts, decision 0080): its
 * signatures must be exactly node:crypto's, byte for byte, so that every verifier (node:crypto,
 * WebCrypto in the console, Go's note package for witnesses) accepts them as before.
 */
import { generateKeyPairSync, randomBytes, sign, verify } from 'node:crypto';
import { signEd25519 } from '../../src/lib/ed25519.js';

test('the signatures are node:crypto’s, for many keys and messages of every length', () => {
  for (let k = 0; k < 20; k++) {
    const { privateKey, publicKey } = generateKeyPairSync('ed25519');
    for (const length of [0, 1, 31, 32, 71, 200, 4096]) {
      const message = randomBytes(length);
      const signature = signEd25519(message, privateKey);
      expect(signature.toString('hex')).toBe(sign(null, message, privateKey).toString('hex'));
      expect(verify(null, message, publicKey, signature)).toBe(true);
      // The key's libsodium form is made once: signing again with it still gives the same bytes.
      expect(signEd25519(message, privateKey).equals(signature)).toBe(true);
    }
  }
});

test('a key of another kind is refused, not used', () => {
  const { privateKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  expect(() => signEd25519(Buffer.from('x'), privateKey)).toThrow('an Ed25519 signature needs an Ed25519 private key');
});
