import { createCipheriv, createDecipheriv, createHash, randomBytes } from 'node:crypto';

/**
 * Secrets at rest: signing keys' private keys, http tools' secret and header values, webhook
 * secrets. With KEY_ENCRYPTION_KEY set they are sealed with AES-256-GCM (a random 96-bit IV per
 * value, the 128-bit tag checked on every open); without it they are stored as given.
 *
 * Stored forms, told apart by their prefix:
 *   `agw:v1:<key id>:<base64url(iv ‖ tag ‖ ciphertext)>`  sealed; the key id (the first 8 hex
 *       digits of the key's SHA-256) names the key that opens it, so values sealed with a
 *       previous key still open during a rotation, and `agent-gateway reencrypt` knows which
 *       values to rewrite;
 *   `agw:plain:<text>`  a plaintext that would otherwise read as one of these forms (written
 *       without a key; the migration escapes older such values);
 *   anything else  plaintext, as written without a key or before encryption existed.
 * Any other `agw:` value is a form this version does not know (written by a later one): it is
 * refused rather than taken for plaintext.
 */

const SEALED_PREFIX = 'agw:v1:';
const ESCAPED_PREFIX = 'agw:plain:';
const RESERVED_PREFIX = 'agw:';
const IV_BYTES = 12;
const TAG_BYTES = 16;

/** A stored secret that cannot be opened with the configured keys. */
export class SecretUnavailableError extends Error {}

export const keyIdOf = (key: Buffer): string => createHash('sha256').update(key).digest('hex').slice(0, 8);

function encrypt(plain: string, key: Buffer): Buffer {
  const iv = randomBytes(IV_BYTES);
  const cipher = createCipheriv('aes-256-gcm', key, iv);
  const body = Buffer.concat([cipher.update(plain, 'utf8'), cipher.final()]);
  return Buffer.concat([iv, cipher.getAuthTag(), body]);
}

/** Throws when the tag does not verify (another key, or a changed value). */
function decrypt(raw: Buffer, key: Buffer): string {
  const decipher = createDecipheriv('aes-256-gcm', key, raw.subarray(0, IV_BYTES));
  decipher.setAuthTag(raw.subarray(IV_BYTES, IV_BYTES + TAG_BYTES));
  return Buffer.concat([decipher.update(raw.subarray(IV_BYTES + TAG_BYTES)), decipher.final()]).toString('utf8');
}

export class SecretBox {
  /** The current key's id, or undefined when values are stored as given. */
  readonly currentKeyId: string | undefined;
  private readonly current: Buffer | undefined;
  /** Every key values may be sealed with: the current one and the previous ones (read only). */
  private readonly keys = new Map<string, Buffer>();

  constructor(current: Buffer | undefined, previous: readonly Buffer[] = []) {
    this.current = current;
    this.currentKeyId = current && keyIdOf(current);
    for (const key of [...(current ? [current] : []), ...previous]) {
      if (!this.keys.has(keyIdOf(key))) this.keys.set(keyIdOf(key), key);
    }
  }

  get encrypting(): boolean {
    return this.current !== undefined;
  }

  /** The form to store: sealed with the current key, or without one the plaintext (escaped if needed). */
  seal(plain: string): string {
    if (!this.current) return plain.startsWith(RESERVED_PREFIX) ? `${ESCAPED_PREFIX}${plain}` : plain;
    return `${SEALED_PREFIX}${this.currentKeyId}:${encrypt(plain, this.current).toString('base64url')}`;
  }

  /** The plaintext of a stored value in any of its forms. */
  open(stored: string): string {
    if (stored.startsWith(ESCAPED_PREFIX)) return stored.slice(ESCAPED_PREFIX.length);
    if (!stored.startsWith(RESERVED_PREFIX)) return stored;
    if (!stored.startsWith(SEALED_PREFIX))
      throw new SecretUnavailableError(`a secret is stored in an unknown form (${stored.slice(0, 8)}…)`);
    const [keyId, data] = stored.slice(SEALED_PREFIX.length).split(':');
    const key = this.keys.get(keyId);
    if (!key) {
      throw new SecretUnavailableError(
        this.current
          ? `a secret is sealed with key ${keyId}, which is neither KEY_ENCRYPTION_KEY (${this.currentKeyId}) nor in KEY_ENCRYPTION_KEY_PREVIOUS`
          : `a secret is sealed with key ${keyId}, but KEY_ENCRYPTION_KEY is not set`,
      );
    }
    try {
      return decrypt(Buffer.from(data ?? '', 'base64url'), key);
    } catch {
      throw new SecretUnavailableError(
        `a secret sealed with key ${keyId} does not decrypt: it was altered or truncated`,
      );
    }
  }

  /**
   * Signing keys written before this module: `v1:<base64(iv ‖ tag ‖ ciphertext)>`, flagged by
   * their row's `encrypted` column and naming no key, so each configured key is tried.
   */
  openUnlabelled(stored: string): string {
    const raw = Buffer.from(stored.replace(/^v1:/, ''), 'base64');
    for (const key of this.keys.values()) {
      try {
        return decrypt(raw, key);
      } catch {
        // Not this key: try the next.
      }
    }
    throw new SecretUnavailableError(
      this.current
        ? 'an encrypted signing key opens with neither KEY_ENCRYPTION_KEY nor a key in KEY_ENCRYPTION_KEY_PREVIOUS'
        : 'a signing key is encrypted but KEY_ENCRYPTION_KEY is not set',
    );
  }

  /** Whether a stored value is sealed with the current key (what `agent-gateway reencrypt` leaves alone). */
  isCurrent(stored: string): boolean {
    return this.current !== undefined && stored.startsWith(`${SEALED_PREFIX}${this.currentKeyId}:`);
  }

  /** The value sealed with the current key: opened (with any configured key) and sealed again. */
  reseal(stored: string): string {
    return this.isCurrent(stored) ? stored : this.seal(this.open(stored));
  }
}

/** Seals or opens every value of a map (tool header values). */
export const mapValues = (values: Record<string, string>, change: (value: string) => string): Record<string, string> =>
  Object.fromEntries(Object.entries(values).map(([name, value]) => [name, change(value)]));
