import argon2 from 'argon2';

// OWASP's argon2id baseline (19 MiB, 2 passes) keeps a login near 50 ms on a small machine.
const options = { type: argon2.argon2id, memoryCost: 19456, timeCost: 2, parallelism: 1 } as const;

export const MIN_PASSWORD_LENGTH = 12;

export const hashPassword = (password: string): Promise<string> => argon2.hash(password, options);

let decoy: Promise<string> | undefined;

/**
 * Verifies a password; with no stored hash (unknown email) it verifies against a decoy so that
 * both failures cost the same work and cannot be told apart by timing.
 */
export async function verifyPassword(storedHash: string | undefined, password: string): Promise<boolean> {
  decoy ??= hashPassword('decoy password that matches nothing');
  const hash = storedHash ?? (await decoy);
  const valid = await argon2.verify(hash, password).catch(() => false);
  return storedHash !== undefined && valid;
}
