import type { SqlConnection } from '../../db/sql.js';

/**
 * The SQL of confirmations by an MCP client's user (`call_confirmations`,
 * docs/decisions/0089-confirmation-by-the-agents-user.md): a question is a row bound to the call's
 * hash; its answer is taken by one statement that only one request can win, on any process. An
 * answer is either carried by the call (2026-07-28) or posted first and taken by the waiting call
 * (2025-11-25); a question answered one way cannot be taken the other.
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
 * Takes the answer a call carries (2026-07-28's retry) to a question of this agent about this call:
 * true exactly once, for the first answer that arrives before it expires; false for a second answer,
 * an expired or unknown question, one about another call, or one whose answer was posted instead.
 * Taking it removes the question: the record of the call keeps what it was.
 */
export async function answerConfirmation(
  sql: SqlConnection,
  answer: { id: string; orgId: string; svcId: string; callHash: string },
): Promise<boolean> {
  const rows = await sql.query(
    `DELETE FROM call_confirmations
     WHERE id = $1 AND org_id = $2::uuid AND svc_id = $3 AND call_hash = $4 AND answered_at IS NULL AND expires_at > now()
     RETURNING id`,
    [answer.id, answer.orgId, answer.svcId, answer.callHash],
  );
  return rows.length === 1;
}

/**
 * Keeps the answer a client posted on its own (2025-11-25's response to `elicitation/create`),
 * on whichever process it reached: true for the first answer to an open question of this agent;
 * false when it was answered already, expired, or is not this agent's.
 */
export async function postConfirmationAnswer(
  sql: SqlConnection,
  answer: { id: string; orgId: string; svcId: string; action: string; by: string },
): Promise<boolean> {
  const rows = await sql.query(
    `UPDATE call_confirmations SET answered_at = now(), action = $4, answered_by = $5
     WHERE id = $1 AND org_id = $2::uuid AND svc_id = $3 AND answered_at IS NULL AND expires_at > now()
     RETURNING id`,
    [answer.id, answer.orgId, answer.svcId, answer.action, answer.by],
  );
  return rows.length === 1;
}

/** Where a question stands for the call waiting on it: still open, answered (by a posted answer), or gone. */
export async function confirmationState(
  sql: SqlConnection,
  question: { id: string; orgId: string; svcId: string },
): Promise<'open' | 'answered' | 'gone'> {
  const [row] = await sql.query<{ answered: boolean; open: boolean }>(
    `SELECT answered_at IS NOT NULL AS answered, expires_at > now() AS open
     FROM call_confirmations WHERE id = $1 AND org_id = $2::uuid AND svc_id = $3`,
    [question.id, question.orgId, question.svcId],
  );
  if (!row) return 'gone';
  return row.answered ? 'answered' : row.open ? 'open' : 'gone';
}

/**
 * Takes a posted answer for the call that asked, once: the question is removed whatever it held.
 * Null when it is gone (taken, or never this call's); `action` null when nobody answered it.
 */
export async function takePostedAnswer(
  sql: SqlConnection,
  question: { id: string; orgId: string; svcId: string; callHash: string },
): Promise<{ action: string | null; by: string | null } | null> {
  const [row] = await sql.query<{ action: string | null; answered_by: string | null }>(
    `DELETE FROM call_confirmations WHERE id = $1 AND org_id = $2::uuid AND svc_id = $3 AND call_hash = $4
     RETURNING action, answered_by`,
    [question.id, question.orgId, question.svcId, question.callHash],
  );
  return row ? { action: row.action, by: row.answered_by } : null;
}
