import type { SqlConnection, SqlDriver } from '../../db/sql.js';

/** The approval module's raw SQL: the statements the gateway's hot path and the expiry sweep run. */

/** What the gateway asks a human about. */
export interface ApprovalRequest {
  orgId: string;
  svcId: string;
  agentId: string;
  manifestId: string;
  capability: string;
  action: Record<string, unknown>;
  actionHash: string;
  reasons: { code: string; message: string }[];
  requestedBy: string;
  ttlSeconds: number;
}

/** A new pending approval that expires `ttlSeconds` after the database's now. */
export async function insertPendingApproval(tx: SqlConnection, id: string, entry: ApprovalRequest) {
  const [approval] = await tx.query<{ requested_at: Date; expires_at: Date }>(
    `INSERT INTO approvals (id, org_id, svc_id, agent_id, manifest_id, capability, action, action_hash, reasons,
                            status, requested_by, requested_at, expires_at)
     VALUES ($1, $2::uuid, $3, $4, $5::uuid, $6, $7::jsonb, $8, $9::jsonb, 'pending', $10, now(),
             now() + make_interval(secs => $11::int))
     RETURNING requested_at, expires_at`,
    [
      id,
      entry.orgId,
      entry.svcId,
      entry.agentId,
      entry.manifestId,
      entry.capability,
      JSON.stringify(entry.action),
      entry.actionHash,
      JSON.stringify(entry.reasons),
      entry.requestedBy,
      entry.ttlSeconds,
    ],
  );
  return approval;
}

/** Marks an approved, unexpired approval of this action used; false if another request used it first. */
export async function consumeApproval(tx: SqlConnection, approvalId: string, actionHash: string): Promise<boolean> {
  const rows = await tx.query(
    `UPDATE approvals SET status = 'consumed', consumed_at = now()
     WHERE id = $1 AND status = 'approved' AND action_hash = $2 AND expires_at > now()
     RETURNING id`,
    [approvalId, actionHash],
  );
  return rows.length === 1;
}

/** Pending and unused approved approvals past their expiry become `expired` (one org, or all). */
export async function expireDueApprovals(sql: SqlDriver, orgId?: string): Promise<number> {
  const rows = await sql.query(
    `UPDATE approvals SET status = 'expired'
     WHERE status IN ('pending', 'approved') AND expires_at <= now() ${orgId ? 'AND org_id = $1::uuid' : ''}
     RETURNING id`,
    orgId ? [orgId] : [],
  );
  return rows.length;
}
