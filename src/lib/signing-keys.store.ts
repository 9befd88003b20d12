import type { JWK } from 'jose';
import type { SqlConnection } from '../db/sql.js';

/** The statements of the signing keys (signing-keys.ts): the `signing_keys` table. */

export interface KeyRow<Purpose extends string = string> {
  kid: string;
  purpose: Purpose;
  public_jwk: JWK;
  private_key: string;
  encrypted: boolean;
  retired_at: Date | null;
}

// Distinct from the migration lock; serializes first-start key generation across processes.
const KEY_GENERATION_LOCK = 72707370;

/** Waits for, then holds until the transaction ends, the lock of key generation and rotation. */
export async function lockKeyGeneration(tx: SqlConnection): Promise<void> {
  await tx.query('SELECT pg_advisory_xact_lock($1)', [KEY_GENERATION_LOCK]);
}

/** The newest unretired key of the purpose. */
export async function activeKeyRow<Purpose extends string>(
  tx: SqlConnection,
  purpose: Purpose,
): Promise<KeyRow<Purpose> | undefined> {
  const [row] = await tx.query<KeyRow<Purpose>>(
    'SELECT * FROM signing_keys WHERE purpose = $1 AND retired_at IS NULL ORDER BY created_at DESC LIMIT 1',
    [purpose],
  );
  return row;
}

export async function keyRowByKid<Purpose extends string = string>(
  sql: SqlConnection,
  kid: string,
): Promise<KeyRow<Purpose> | undefined> {
  const [row] = await sql.query<KeyRow<Purpose>>('SELECT * FROM signing_keys WHERE kid = $1', [kid]);
  return row;
}

/** The public keys (active and retired) of the purposes, oldest first. */
export async function publicJwksOf(sql: SqlConnection, purposes: readonly string[]): Promise<JWK[]> {
  const rows = await sql.query<{ public_jwk: JWK; purpose: string; retired_at: Date | null }>(
    'SELECT public_jwk, purpose, retired_at FROM signing_keys WHERE purpose = ANY($1) ORDER BY created_at',
    [purposes],
  );
  return rows.map((row) => row.public_jwk);
}

export async function retireActiveKeys(tx: SqlConnection, purpose: string): Promise<void> {
  await tx.query('UPDATE signing_keys SET retired_at = now() WHERE purpose = $1 AND retired_at IS NULL', [purpose]);
}

export interface NewKeyRow {
  kid: string;
  purpose: string;
  publicJwk: JWK;
  /** As stored: sealed, or plain PEM when secrets are not encrypted. */
  privateKey: string;
  encrypted: boolean;
}

export async function insertKeyRow(tx: SqlConnection, row: NewKeyRow): Promise<void> {
  await tx.query(
    'INSERT INTO signing_keys (kid, purpose, algorithm, public_jwk, private_key, encrypted) VALUES ($1, $2, $3, $4, $5, $6)',
    [row.kid, row.purpose, 'EdDSA', JSON.stringify(row.publicJwk), row.privateKey, row.encrypted],
  );
}

/** Every key's private part, locked until the transaction ends, oldest first. */
export async function privateKeysForUpdate(
  tx: SqlConnection,
): Promise<Pick<KeyRow, 'kid' | 'private_key' | 'encrypted'>[]> {
  return tx.query<Pick<KeyRow, 'kid' | 'private_key' | 'encrypted'>>(
    'SELECT kid, private_key, encrypted FROM signing_keys ORDER BY created_at FOR UPDATE',
  );
}

export async function updateSealedPrivateKey(tx: SqlConnection, kid: string, sealed: string): Promise<void> {
  await tx.query('UPDATE signing_keys SET private_key = $2, encrypted = true WHERE kid = $1', [kid, sealed]);
}
