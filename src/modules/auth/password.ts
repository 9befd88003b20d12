import argon2 from 'argon2';
import type { Telemetry } from '../../observability/telemetry.js';

// OWASP's argon2id baseline (19 MiB, 2 passes) keeps a login near 50 ms on a small machine.
const options = { type: argon2.argon2id, memoryCost: 19456, timeCost: 2, parallelism: 1 } as const;

export const MIN_PASSWORD_LENGTH = 12;

let decoy: Promise<string> | undefined;

export interface Passwords {
  hash(password: string): Promise<string>;
  /**
   * With no stored hash (unknown email) it verifies against a decoy so that both failures cost
   * the same work and cannot be told apart by timing.
   */
  verify(storedHash: string | undefined, password: string): Promise<boolean>;
}

/**
 * argon2 is what logins and sign-ups cost (tens of milliseconds of CPU each), so every computation
 * is counted (`agw_password_hashes_total`): operators see a flood that reaches it, and the
 * throttles are tested against the count rather than against timings.
 */
export function createPasswords(telemetry: Pick<Telemetry, 'passwordHashed'>): Passwords {
  function hash(password: string): Promise<string> {
    telemetry.passwordHashed('hash');
    return argon2.hash(password, options);
  }
  async function verify(storedHash: string | undefined, password: string): Promise<boolean> {
    // Made once per process, and not counted as any request's work.
    decoy ??= argon2.hash('decoy password that matches nothing', options);
    const hashed = storedHash ?? (await decoy);
    telemetry.passwordHashed('verify');
    const valid = await argon2.verify(hashed, password).catch(() => false);
    return storedHash !== undefined && valid;
  }
  return { hash, verify };
}
