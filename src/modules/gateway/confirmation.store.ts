import type { SqlConnection } from '../../db/sql.js';

/**
 * The SQL of confirmations by an MCP client's user (`call_confirmations`,
 * docs/decisions/0089-confirmation-by-the-agents-user.md): a question is a row bound to the call's
 * hash; its answer is taken by one statement that only one request can win, on any process.
 */

export interface PendingConfirmation {
  id: string;
  orgId: string;
  svcId: string;
  callHash: string;
  expiresAt: Date;
}

/** Keeps a question, and drops the agent's questions that expired, in one statement. */
export async function askConfirmation(sql: SqlConnection, pending: PendingConfirmation): Promise<void> {
  await sql.query(
    `WITH expired AS (
       DELETE FROM call_confirmations WHERE org_id = $2::uuid AND svc_id = $3 AND expires_at < now()
     )
     INSERT INTO call_confirmations (id, org_id, svc_id, call_hash, expires_at) VALUES ($1, $2::uuid, $3, $4, $5)`,
    [pending.id, pending.orgId, pending.svcId, pending.callHash, pending.expiresAt],
  );
}

/**
 * Takes the answer to a question of this agent about this call: true exactly once, for the first
 * answer that arrives before it expires; false for a second answer, an expired or unknown question,
 * or one about another call.
 */
export async function answerConfirmation(
  sql: SqlConnection,
  answer: { id: string; orgId: string; svcId: string; callHash: string; action: string; by: string },
): Promise<boolean> {
  const rows = await sql.query(
    `UPDATE call_confirmations SET answered_at = now(), action = $5, answered_by = $6
     WHERE id = $1 AND org_id = $2::uuid AND svc_id = $3 AND call_hash = $4 AND answered_at IS NULL AND expires_at > now()
     RETURNING id`,
    [answer.id, answer.orgId, answer.svcId, answer.callHash, answer.action, answer.by],
  );
  return rows.length === 1;
}
