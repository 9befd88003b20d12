import { randomBytes } from 'node:crypto';
import { keyIdOf, SecretBox, SecretUnavailableError } from '../../src/lib/secret-box.js';

/** The stored forms of secrets at rest (src/lib/secret-box.ts); test/secrets-at-rest.test.ts runs them through the service. */

const FIRST_KEY = randomBytes(32);
const SECOND_KEY = randomBytes(32);

describe('the stored forms (SecretBox)', () => {
  const box = new SecretBox(FIRST_KEY);
  const sealed = box.seal('a secret value');

  test('sealed values open with their key, each with its own IV; plaintext and escaped values open as written', () => {
    expect(sealed).toMatch(new RegExp(`^agw:v1:${keyIdOf(FIRST_KEY)}:`));
    expect(box.seal('a secret value')).not.toBe(sealed);
    expect(box.open(sealed)).toBe('a secret value');
    expect(box.open('written before any key')).toBe('written before any key');
    expect(new SecretBox(undefined).seal('agw:v1:looks-sealed')).toBe('agw:plain:agw:v1:looks-sealed');
    expect(box.open('agw:plain:agw:v1:looks-sealed')).toBe('agw:v1:looks-sealed');
    expect(box.isCurrent(sealed)).toBe(true);
    expect(new SecretBox(SECOND_KEY, [FIRST_KEY]).isCurrent(sealed)).toBe(false);
  });

  test.each([
    ['another key', () => new SecretBox(SECOND_KEY).open(sealed), /neither KEY_ENCRYPTION_KEY/],
    ['no key', () => new SecretBox(undefined).open(sealed), /KEY_ENCRYPTION_KEY is not set/],
    [
      'a changed ciphertext',
      () => box.open(`${sealed.slice(0, -2)}${sealed.endsWith('AA') ? 'BB' : 'AA'}`),
      /altered or truncated/,
    ],
    ['a truncated value', () => box.open(sealed.slice(0, 30)), /altered or truncated/],
    ['an unknown form', () => box.open('agw:v9:whatever'), /unknown form/],
  ])('%s: SecretUnavailableError, never a wrong plaintext', (_label, open, message) => {
    expect(open).toThrow(SecretUnavailableError);
    expect(open).toThrow(message);
  });
});
