import { sqlConnectionOf } from '../../db/prisma-sql.js';
import type { SqlConnection } from '../../db/sql.js';
import type { Deps } from '../../deps.js';
import { limitOffset } from '../../lib/list-page.js';
import { AppError, FieldErrors, forbidden, notFound } from '../../errors.js';
import type { Approval, ApprovalStatus, Prisma } from '../../generated/prisma/client.js';
import { actorOf } from '../audit/audit-events.js';
import { recordAudit } from '../audit/audit.service.js';
import { agentScope, principalName, type Principal } from '../../authz/authz.js';
import { enqueueWebhookEvent } from '../webhook/webhook.service.js';
import type { WebhookWake } from '../webhook/webhook.service.js';
import { randomId } from '../../lib/ids.js';
import {
  approvalById,
  approvalPage,
  approvalsByIds,
  consumeApproval,
  countOpenPending,
  decidePendingApproval,
  denyPendingApprovalsOf,
  expireDueApprovals,
  findApproval,
  findVisibleApproval,
  insertPendingApproval,
  type ApprovalQuery,
  type ApprovalRequest,
  type ApprovalScope,
} from './approval.store.js';

export type { ApprovalRequest } from './approval.store.js';

export type ApprovalCheck = { ok: true } | { ok: false; message: string };

export interface ApprovalFilter {
  status?: ApprovalStatus | null;
  svc_id?: string | null;
  limit?: number | null;
  offset?: number | null;
}

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
export function createApprovalService({ db, telemetry }: Deps, { webhooks }: { webhooks: WebhookWake }) {
  // `agw_approvals_pending`: one count per scrape, over all orgs (an org is no label). Pending ones
  // past their TTL await the sweep and are not counted.
  telemetry.observePendingApprovals(() => countOpenPending(db.sql));

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
    webhooks.wake();
    return id;
  }

  /** Whether `approvalId` lets this exact action through now (read-only; evaluate uses it too). */
  async function check(orgId: string, approvalId: string, actionHash: string): Promise<ApprovalCheck> {
    const approval = await findApproval(db.prisma, orgId, approvalId);
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
  const visibleTo = (orgId: string, principal: Principal): ApprovalScope => ({ orgId, svcIds: agentScope(principal) });

  /** Approvals by id within the org, in one query (the dashboards' `approval` of a record). */
  function byIds(orgId: string, ids: readonly string[]): Promise<Approval[]> {
    return approvalsByIds(db.prisma, orgId, ids);
  }

  async function list(orgId: string, filter: ApprovalFilter, principal: Principal, query: ApprovalQuery = {}) {
    const errors = new FieldErrors();
    const { limit, offset } = limitOffset(filter, { limit: 50, max: 200 }, errors);
    errors.throwIfAny();
    await expireDue(orgId);
    const { items, total, pendingCount } = await approvalPage(
      db.prisma,
      visibleTo(orgId, principal),
      { status: filter.status, svcId: filter.svc_id },
      { limit, offset },
      query,
    );
    return { items, total, pending_count: pendingCount };
  }

  async function get(orgId: string, approvalId: string, principal: Principal, query: ApprovalQuery = {}) {
    await expireDue(orgId);
    const approval = await findVisibleApproval(db.prisma, visibleTo(orgId, principal), approvalId, query);
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
      const changed = await decidePendingApproval(tx, orgId, approvalId, {
        status: verdict,
        decidedBy,
        decidedByUserId: principal.type === 'user' ? principal.userId : null,
        notes,
        reason: verdict === 'denied' ? reason : null,
      });
      if (!changed) {
        const now = await approvalById(tx, approvalId);
        const status = now.status === 'pending' ? 'expired' : now.status;
        throw new AppError('INVALID_STATE_TRANSITION', `The approval is already ${status}`, {
          details: { from: status, to: verdict },
        });
      }
      const decided = await approvalById(tx, approvalId, query);
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
    webhooks.wake();
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
    const decided = await denyPendingApprovalsOf(tx, orgId, svcId, { decidedBy, reason });
    for (const approval of decided) {
      await enqueueWebhookEvent(sqlConnectionOf(tx), orgId, 'approval.decided', approvalSummary(approval));
    }
    return decided.length;
  }

  return { request, check, consume, expireDue, list, get, byIds, decide, denyPendingOfAgent };
}

export type ApprovalService = ReturnType<typeof createApprovalService>;
