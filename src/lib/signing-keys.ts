import { createPrivateKey, createPublicKey, generateKeyPairSync, randomBytes, type KeyObject } from 'node:crypto';
import type { JWK } from 'jose';
import type { SqlConnection, SqlDriver } from '../db/sql.js';
import { configChangedLocally, type ConfigCache } from './config-cache.js';
import { incrementConfigVersionOn } from './config-cache.store.js';
import { SecretUnavailableError, type SecretBox } from './secret-box.js';
import {
  activeKeyRow,
  insertKeyRow,
  type KeyRow,
  keyRowByKid,
  lockKeyGeneration,
  privateKeysForUpdate,
  publicJwksOf,
  retireActiveKeys,
  updateSealedPrivateKey,
} from './signing-keys.store.js';

/**
 * Ed25519 keys the service signs with, one active key per purpose, generated on first use and
 * stored in the database so every process on that database signs and verifies alike. Retired keys
 * stay for verification. With KEY_ENCRYPTION_KEY set, private keys are sealed at rest (secret-box.ts).
 */

export type KeyPurpose = 'session' | 'capability' | 'record' | 'oauth' | 'checkpoint';

export interface SigningKey {
  kid: string;
  purpose: KeyPurpose;
  privateKey: KeyObject;
  publicKey: KeyObject;
  publicJwk: JWK;
  retired: boolean;
}

export class SigningKeyStore {
  private readonly byKid = new Map<string, SigningKey>();
  private readonly active = new Map<KeyPurpose, SigningKey>();

  /**
   * With `cache`, the active keys live in the process's config cache, so a rotation by another
   * process (`agent-gateway rotate-keys`) reaches this one within a poll interval.
   */
  constructor(
    private readonly sql: SqlDriver,
    private readonly secrets: SecretBox,
    private readonly cache?: ConfigCache,
  ) {}

  activeKey(purpose: KeyPurpose): Promise<SigningKey> {
    if (this.cache) return this.cache.get(`signing-key:${purpose}`, () => this.loadActive(purpose));
    const cached = this.active.get(purpose);
    return cached ? Promise.resolve(cached) : this.loadActive(purpose);
  }

  private async loadActive(purpose: KeyPurpose): Promise<SigningKey> {
    // The lock makes processes starting at once on an empty database agree on one key.
    const key = await this.sql.transaction(async (tx) => {
      await lockKeyGeneration(tx);
      const row = await activeKeyRow(tx, purpose);
      if (row) return this.fromRow(row);
      return this.insertNew(tx, purpose);
    });
    this.active.set(purpose, key);
    return key;
  }

  /** Finds a key by `kid`, reading the database when another process created or rotated it. */
  async byId(kid: string): Promise<SigningKey | undefined> {
    const cached = this.byKid.get(kid);
    if (cached) return cached;
    const row = await keyRowByKid<KeyPurpose>(this.sql, kid);
    return row ? this.fromRow(row) : undefined;
  }

  /** Public keys (active and retired) of the purposes, as a JWKS, for offline verification. */
  async jwks(purposes: KeyPurpose[]): Promise<{ keys: JWK[] }> {
    await Promise.all(purposes.map((purpose) => this.activeKey(purpose)));
    return { keys: await publicJwksOf(this.sql, purposes) };
  }

  /** Makes a new active key for the purpose and retires the old one (which still verifies). */
  async rotate(purpose: KeyPurpose): Promise<SigningKey> {
    const key = await this.sql.transaction(async (tx) => {
      await lockKeyGeneration(tx);
      await retireActiveKeys(tx, purpose);
      const created = await this.insertNew(tx, purpose);
      // Other processes drop their cached active key on their next config poll.
      await incrementConfigVersionOn(tx);
      return created;
    });
    for (const cached of this.byKid.values())
      if (cached.purpose === purpose && cached.kid !== key.kid) cached.retired = true;
    this.active.set(purpose, key);
    configChangedLocally();
    return key;
  }

  private async insertNew(conn: SqlConnection, purpose: KeyPurpose): Promise<SigningKey> {
    const { privateKey, publicKey } = generateKeyPairSync('ed25519');
    const kid = `${purpose}_${randomBytes(9).toString('base64url')}`;
    const publicJwk = { ...publicKey.export({ format: 'jwk' }), kid, alg: 'EdDSA', use: 'sig' } as JWK;
    const pem = privateKey.export({ format: 'pem', type: 'pkcs8' }).toString();
    await insertKeyRow(conn, {
      kid,
      purpose,
      publicJwk,
      privateKey: this.secrets.seal(pem),
      encrypted: this.secrets.encrypting,
    });
    const key: SigningKey = { kid, purpose, privateKey, publicKey, publicJwk, retired: false };
    this.byKid.set(kid, key);
    return key;
  }

  private fromRow(row: KeyRow<KeyPurpose>): SigningKey {
    const privateKey = createPrivateKey(openPrivateKey(row, this.secrets));
    const key: SigningKey = {
      kid: row.kid,
      purpose: row.purpose,
      privateKey,
      publicKey: createPublicKey(privateKey),
      publicJwk: row.public_jwk,
      retired: row.retired_at !== null,
    };
    this.byKid.set(key.kid, key);
    return key;
  }
}

/** The PEM of a stored private key, whichever form it was stored in. */
function openPrivateKey(row: Pick<KeyRow, 'kid' | 'private_key' | 'encrypted'>, secrets: SecretBox): string {
  try {
    // `v1:` is how keys were encrypted before secret-box.ts; plain PEM is never flagged encrypted.
    return row.encrypted && row.private_key.startsWith('v1:')
      ? secrets.openUnlabelled(row.private_key)
      : secrets.open(row.private_key);
  } catch (error) {
    if (error instanceof SecretUnavailableError)
      throw new SecretUnavailableError(`signing key ${row.kid}: ${error.message}`);
    throw error;
  }
}

/**
 * Seals every private key not yet sealed with the current key (`agent-gateway reencrypt`, in the
 * caller's transaction); returns how many it rewrote.
 */
export async function reencryptSigningKeys(conn: SqlConnection, secrets: SecretBox): Promise<number> {
  const rows = await privateKeysForUpdate(conn);
  const stale = rows.filter((row) => !secrets.isCurrent(row.private_key));
  for (const row of stale) {
    await updateSealedPrivateKey(conn, row.kid, secrets.seal(openPrivateKey(row, secrets)));
  }
  return stale.length;
}
