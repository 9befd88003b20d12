import type { SqlConnection } from '../../db/sql.js';

/** The capability-token module's raw SQL. */

/**
 * Counts one use of a live token in the gateway's commit; false when it was used up, revoked or
 * expired meanwhile (the condition and the increment are one statement, so concurrent uses of a
 * token with `max_uses` allow exactly that many).
 */
export async function useToken(tx: SqlConnection, tokenId: string): Promise<boolean> {
  const rows = await tx.query(
    `UPDATE capability_tokens SET uses = uses + 1
     WHERE id = $1 AND revoked_at IS NULL AND expires_at > now() AND (max_uses IS NULL OR uses < max_uses)
     RETURNING id`,
    [tokenId],
  );
  return rows.length === 1;
}
