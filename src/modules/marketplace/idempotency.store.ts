import type { SqlDriver } from '../../db/sql.js';
import type { Prisma } from '../../generated/prisma/client.js';

/**
 * The Idempotency-Keys of purchases (`purchase_idempotency_keys`). A key is claimed in its own
 * statement, committed before the purchase starts, so that every other request with it sees at once
 * that it is taken: while the purchase runs the key has no transaction, once it completed it names
 * the transaction and the hash of the request that made it.
 */

export interface KeyedRequest {
  key: string;
  /** The canonical hash of the request's meaningful fields. */
  requestHash: string;
}

export interface KeyState {
  /** Null for keys recorded before request hashes were kept. */
  requestHash: string | null;
  /** Null while the first request runs. */
  transactionId: string | null;
}

/**
 * A claim older than this whose purchase never completed or released it (the process stopped in
 * between) may be taken over. A purchase is one short transaction, far below it; should one still
 * outlive it, the unique (buyer_org_id, idempotency_key) of the transactions keeps a second one out.
 */
const ABANDONED_CLAIM_SECONDS = 60;

/** Claims the key for this request: true when the caller now runs the purchase. */
export async function claimKey(sql: SqlDriver, orgId: string, request: KeyedRequest): Promise<boolean> {
  const rows = await sql.query(
    `INSERT INTO purchase_idempotency_keys AS k (org_id, key, request_hash) VALUES ($1::uuid, $2, $3)
     ON CONFLICT (org_id, key) DO UPDATE SET request_hash = EXCLUDED.request_hash, claimed_at = now()
       WHERE k.transaction_id IS NULL AND k.claimed_at < now() - make_interval(secs => $4)
     RETURNING k.key`,
    [orgId, request.key, request.requestHash, ABANDONED_CLAIM_SECONDS],
  );
  return rows.length > 0;
}

/** The key's state, or undefined when nobody holds it (never used, or released meanwhile). */
export async function keyState(sql: SqlDriver, orgId: string, key: string): Promise<KeyState | undefined> {
  const [row] = await sql.query<{ request_hash: string | null; transaction_id: string | null }>(
    'SELECT request_hash, transaction_id FROM purchase_idempotency_keys WHERE org_id = $1::uuid AND key = $2',
    [orgId, key],
  );
  return row && { requestHash: row.request_hash, transactionId: row.transaction_id };
}

/**
 * Binds the key to the transaction the purchase made, in the purchase's own database transaction:
 * the key names a transaction exactly when that transaction committed. An upsert, and the hash is
 * written again: a claim taken over after ABANDONED_CLAIM_SECONDS is this request's again.
 */
export async function bindKey(
  tx: Prisma.TransactionClient,
  orgId: string,
  request: KeyedRequest,
  transactionId: string,
): Promise<void> {
  await tx.purchaseIdempotencyKey.upsert({
    where: { orgId_key: { orgId, key: request.key } },
    create: { orgId, key: request.key, requestHash: request.requestHash, transactionId },
    update: { requestHash: request.requestHash, transactionId },
  });
}

/** Gives up a claim whose purchase failed (it made nothing), so that the key can be used again. */
export async function releaseKey(sql: SqlDriver, orgId: string, request: KeyedRequest): Promise<void> {
  await sql.query(
    'DELETE FROM purchase_idempotency_keys WHERE org_id = $1::uuid AND key = $2 AND request_hash = $3 AND transaction_id IS NULL',
    [orgId, request.key, request.requestHash],
  );
}
