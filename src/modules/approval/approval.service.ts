import { sqlConnectionOf } from '../../db/prisma-sql.js';
import type { SqlConnection } from '../../db/sql.js';
import type { Deps } from '../../deps.js';
import { limitOffset } from '../../lib/list-page.js';
import { AppError, FieldErrors, forbidden, notFound } from '../../errors.js';
import type { Approval, ApprovalStatus, Prisma } from '../../generated/prisma/client.js';
import { actorOf } from '../audit/audit-events.js';
import { recordAudit } from '../audit/audit.service.js';
import { agentScope, principalName, type Principal } from '../auth/authz.js';
import { enqueueWebhookEvent } from '../webhook/webhook.service.js';
import { wakeWebhookDispatchers } from '../webhook/webhook.dispatcher.js';
import { randomId } from '../../lib/ids.js';
import { consumeApproval, expireDueApprovals, insertPendingApproval, type ApprovalRequest } from './approval.store.js';

export type { ApprovalRequest } from './approval.store.js';

export type ApprovalCheck = { ok: true } | { ok: false; message: string };

export interface ApprovalFilter {
  status?: ApprovalStatus | null;
  svc_id?: string | null;
  limit?: number | null;
  offset?: number | null;
}

/** The relations a GraphQL selection needs, from Pothos' prisma plugin; empty outside GraphQL. */
type ApprovalQuery = { include?: Prisma.ApprovalInclude; select?: Prisma.ApprovalSelect };

const MAX_TEXT = 2000;

/** What webhooks and the agent's poll see of an approval. */
export function approvalSummary(approval: Approval) {
  return {
    approval_id: approval.id,
    status: approval.status,
    svc_id: approval.svcId,
    agent_id: approval.agentId,
    capability: approval.capability,
    action_hash: approval.actionHash,
    requested_at: approval.requestedAt.toISOString(),
    expires_at: approval.expiresAt.toISOString(),
    decided_by: approval.decidedBy,
    decided_at: approval.decidedAt?.toISOString() ?? null,
    notes: approval.notes,
    reason: approval.reason,
  };
}

/**
 * Human approval: the gateway asks (a pending approval bound to the action's hash) and later uses
 * an approved one exactly once; operators list and decide; pending and unused approved approvals
 * expire after the org's TTL, lazily on every read and in a periodic sweep.
 */
export function createApprovalService({ db, telemetry }: Deps) {
  // `agw_approvals_pending`: one count per scrape, over all orgs (an org is no label). Pending ones
  // past their TTL await the sweep and are not counted.
  telemetry.observePendingApprovals(async () => {
    const [row] = await db.sql.query<{ pending: number }>(
      `SELECT count(*)::int AS pending FROM approvals WHERE status = 'pending' AND expires_at > now()`,
    );
    return row.pending;
  });

  async function request(entry: ApprovalRequest): Promise<string> {
    const id = randomId('apr');
    await db.sql.transaction(async (tx) => {
      const approval = await insertPendingApproval(tx, id, entry);
      await enqueueWebhookEvent(tx, entry.orgId, 'approval.requested', {
        approval_id: id,
        status: 'pending',
        svc_id: entry.svcId,
        agent_id: entry.agentId,
        capability: entry.capability,
        action: entry.action,
        action_hash: entry.actionHash,
        reasons: entry.reasons,
        requested_at: new Date(approval.requested_at).toISOString(),
        expires_at: new Date(approval.expires_at).toISOString(),
      });
    });
    wakeWebhookDispatchers();
    return id;
  }

  /** Whether `approvalId` lets this exact action through now (read-only; evaluate uses it too). */
  async function check(orgId: string, approvalId: string, actionHash: string): Promise<ApprovalCheck> {
    const approval = await db.prisma.approval.findFirst({ where: { id: approvalId, orgId } });
    if (!approval) return { ok: false, message: `Approval ${approvalId} does not exist` };
    if (approval.actionHash !== actionHash)
      return { ok: false, message: 'The approval was given for a different action' };
    if (approval.status === 'consumed') return { ok: false, message: 'The approval has already been used' };
    if (approval.expiresAt.getTime() <= Date.now()) return { ok: false, message: 'The approval has expired' };
    if (approval.status !== 'approved') return { ok: false, message: `The approval is ${approval.status}` };
    return { ok: true };
  }

  /** Marks the approval used inside the decision's transaction; false if another request used it first. */
  function consume(tx: SqlConnection, approvalId: string, actionHash: string): Promise<boolean> {
    return consumeApproval(tx, approvalId, actionHash);
  }

  /**
   * Turns pending and unused approved approvals past their expiry into `expired` (one org, or all
   * for the sweep). Reads call it first, so nobody sees an approval that is already over as open.
   */
  function expireDue(orgId?: string): Promise<number> {
    return expireDueApprovals(db.sql, orgId);
  }

  /** API keys limited to some agents see only those agents' approvals. */
  const visibleTo = (principal: Principal): Prisma.ApprovalWhereInput =>
    agentScope(principal) ? { svcId: { in: [...agentScope(principal)!] } } : {};

  async function list(orgId: string, filter: ApprovalFilter, principal: Principal, query: ApprovalQuery = {}) {
    const errors = new FieldErrors();
    const { limit, offset } = limitOffset(filter, { limit: 50, max: 200 }, errors);
    errors.throwIfAny();
    await expireDue(orgId);
    const visible = { orgId, ...visibleTo(principal) };
    const where: Prisma.ApprovalWhereInput = {
      ...visible,
      ...(filter.status ? { status: filter.status } : {}),
      ...(filter.svc_id ? { AND: [{ svcId: filter.svc_id }] } : {}),
    };
    const [items, total, pendingCount] = await Promise.all([
      db.prisma.approval.findMany({
        ...query,
        where,
        orderBy: [{ requestedAt: 'desc' }, { id: 'desc' }],
        take: limit,
        skip: offset,
      }),
      db.prisma.approval.count({ where }),
      db.prisma.approval.count({ where: { ...visible, status: 'pending' } }),
    ]);
    return { items, total, pending_count: pendingCount };
  }

  async function get(orgId: string, approvalId: string, principal: Principal, query: ApprovalQuery = {}) {
    await expireDue(orgId);
    const approval = await db.prisma.approval.findFirst({
      ...query,
      where: { id: approvalId, orgId, ...visibleTo(principal) },
    });
    if (!approval) throw notFound('Approval');
    return approval;
  }

  async function decide(
    orgId: string,
    approvalId: string,
    principal: Principal,
    verdict: 'approved' | 'denied',
    text: { notes?: string | null; reason?: string | null },
    query: ApprovalQuery = {},
  ) {
    const errors = new FieldErrors();
    const notes = text.notes?.trim() || null;
    const reason = text.reason?.trim() || null;
    if (verdict === 'denied' && !reason) errors.add('reason', 'is required to deny');
    if (notes && notes.length > MAX_TEXT) errors.add('notes', `must be at most ${MAX_TEXT} characters`);
    if (reason && reason.length > MAX_TEXT) errors.add('reason', `must be at most ${MAX_TEXT} characters`);
    errors.throwIfAny();

    const current = await get(orgId, approvalId, principal);
    if (principal.type !== 'user' && agentScope(principal)?.includes(current.svcId)) {
      throw forbidden('An API key limited to the agent that asked cannot decide its approval');
    }
    const decidedBy = principalName(principal);
    const decided = await db.prisma.$transaction(async (tx) => {
      // Conditional on `pending`: of two concurrent decisions exactly one changes the row.
      const changed = await tx.approval.updateMany({
        where: { id: approvalId, orgId, status: 'pending', expiresAt: { gt: new Date() } },
        data: {
          status: verdict,
          decidedBy,
          decidedByUserId: principal.type === 'user' ? principal.userId : null,
          decidedAt: new Date(),
          notes,
          reason: verdict === 'denied' ? reason : null,
        },
      });
      if (changed.count === 0) {
        const now = await tx.approval.findUniqueOrThrow({ where: { id: approvalId } });
        const status = now.status === 'pending' ? 'expired' : now.status;
        throw new AppError('INVALID_STATE_TRANSITION', `The approval is already ${status}`, {
          details: { from: status, to: verdict },
        });
      }
      const decided = await tx.approval.findUniqueOrThrow({ ...query, where: { id: approvalId } });
      const snapshot = { svc_id: decided.svcId, capability: decided.capability, action_hash: decided.actionHash };
      await recordAudit(tx, orgId, actorOf(principal), {
        action: verdict === 'approved' ? 'approval.approved' : 'approval.denied',
        targetType: 'approval',
        targetId: approvalId,
        before: { status: 'pending', ...snapshot },
        after: { status: verdict, ...snapshot, notes },
        reason: reason ?? undefined,
      });
      // Subscribers hear of the decision exactly when it commits.
      await enqueueWebhookEvent(sqlConnectionOf(tx), orgId, 'approval.decided', approvalSummary(decided));
      return decided;
    });
    wakeWebhookDispatchers();
    return decided;
  }

  /**
   * Denies every pending approval of an agent, in the caller's transaction (an agent's
   * deactivation); subscribers hear of each decision when it commits. Returns how many.
   */
  async function denyPendingOfAgent(
    tx: Prisma.TransactionClient,
    orgId: string,
    svcId: string,
    reason: string,
    decidedBy: string,
  ) {
    const pending = await tx.approval.findMany({ where: { orgId, svcId, status: 'pending' }, select: { id: true } });
    if (!pending.length) return 0;
    const ids = pending.map((approval) => approval.id);
    await tx.approval.updateMany({
      where: { id: { in: ids }, status: 'pending' },
      data: { status: 'denied', decidedBy, decidedAt: new Date(), reason },
    });
    const decided = await tx.approval.findMany({ where: { id: { in: ids } } });
    for (const approval of decided) {
      await enqueueWebhookEvent(sqlConnectionOf(tx), orgId, 'approval.decided', approvalSummary(approval));
    }
    return decided.length;
  }

  return { request, check, consume, expireDue, list, get, decide, denyPendingOfAgent };
}

export type ApprovalService = ReturnType<typeof createApprovalService>;
