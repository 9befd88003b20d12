import { randomBytes } from 'node:crypto';
import type { SqlConnection } from '../../db/sql.js';
import type { Deps } from '../../deps.js';
import type { Prisma } from '../../generated/prisma/client.js';


export const DEFAULT_APPROVAL_TTL_SECONDS = 24 * 3600;

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
}

export type ApprovalCheck = { ok: true } | { ok: false; message: string };

/**
 * The gateway's side of human approval: asking (a pending approval bound to the action's hash)
 * and using an approved one exactly once. Deciding approvals is the approvals module's job.
 */
export function createApprovalService({ db }: Deps) {
  async function request(entry: ApprovalRequest): Promise<string> {
    const id = `apr_${randomBytes(12).toString('base64url')}`;
    await db.prisma.approval.create({
      data: {
        id,
        ...entry,
        action: entry.action as Prisma.InputJsonValue,
        reasons: entry.reasons as Prisma.InputJsonValue,
        status: 'pending',
        expiresAt: new Date(Date.now() + DEFAULT_APPROVAL_TTL_SECONDS * 1000),
      },
    });
    return id;
  }

  /** Whether `approvalId` lets this exact action through now (read-only; evaluate uses it too). */
  async function check(orgId: string, approvalId: string, actionHash: string): Promise<ApprovalCheck> {
    const approval = await db.prisma.approval.findFirst({ where: { id: approvalId, orgId } });
    if (!approval) return { ok: false, message: `Approval ${approvalId} does not exist` };
    if (approval.actionHash !== actionHash) return { ok: false, message: 'The approval was given for a different action' };
    if (approval.status === 'consumed') return { ok: false, message: 'The approval has already been used' };
    if (approval.status !== 'approved') return { ok: false, message: `The approval is ${approval.status}` };
    if (approval.expiresAt.getTime() <= Date.now()) return { ok: false, message: 'The approval has expired' };
    return { ok: true };
  }

  /** Marks the approval used inside the decision's transaction; false if another request used it first. */
  async function consume(tx: SqlConnection, approvalId: string, actionHash: string): Promise<boolean> {
    const rows = await tx.query(
      `UPDATE approvals SET status = 'consumed', consumed_at = now()
       WHERE id = $1 AND status = 'approved' AND action_hash = $2 AND expires_at > now()
       RETURNING id`,
      [approvalId, actionHash],
    );
    return rows.length === 1;
  }

  return { request, check, consume };
}

export type ApprovalService = ReturnType<typeof createApprovalService>;
