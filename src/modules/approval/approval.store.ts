import type { SqlConnection, SqlDriver } from '../../db/sql.js';
import type { Approval, ApprovalStatus, Prisma, PrismaClient } from '../../generated/prisma/client.js';

/**
 * The approval module's statements: raw SQL for the gateway's hot path and the expiry sweep,
 * Prisma for what operators list and decide.
 */

type Tx = Prisma.TransactionClient;

/** The relations a GraphQL selection needs, from Pothos' prisma plugin; empty outside GraphQL. */
export type ApprovalQuery = { include?: Prisma.ApprovalInclude; select?: Prisma.ApprovalSelect };

/** The approvals a reader sees: the org's, only these agents' when `svcIds` is set. */
export interface ApprovalScope {
  orgId: string;
  svcIds: readonly string[] | undefined;
}

const visibleIn = ({ orgId, svcIds }: ApprovalScope): Prisma.ApprovalWhereInput => ({
  orgId,
  ...(svcIds ? { svcId: { in: [...svcIds] } } : {}),
});

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

/** Pending approvals of every org not yet past their expiry (those await the sweep). */
export async function countOpenPending(sql: SqlDriver): Promise<number> {
  const [row] = await sql.query<{ pending: number }>(
    `SELECT count(*)::int AS pending FROM approvals WHERE status = 'pending' AND expires_at > now()`,
  );
  return row.pending;
}

/** The org's approval, whatever its status, or null. */
export function findApproval(prisma: PrismaClient, orgId: string, approvalId: string): Promise<Approval | null> {
  return prisma.approval.findFirst({ where: { id: approvalId, orgId } });
}

/** The org's approvals among these ids. */
export function approvalsByIds(prisma: PrismaClient, orgId: string, ids: readonly string[]): Promise<Approval[]> {
  return prisma.approval.findMany({ where: { orgId, id: { in: [...ids] } } });
}

/**
 * A page of the visible approvals that match, newest request first, how many match in all, and
 * how many visible ones are pending whatever the filter.
 */
export async function approvalPage(
  prisma: PrismaClient,
  scope: ApprovalScope,
  filter: { status?: ApprovalStatus | null; svcId?: string | null },
  page: { limit: number; offset: number },
  query: ApprovalQuery,
) {
  const visible = visibleIn(scope);
  const where: Prisma.ApprovalWhereInput = {
    ...visible,
    ...(filter.status ? { status: filter.status } : {}),
    ...(filter.svcId ? { AND: [{ svcId: filter.svcId }] } : {}),
  };
  const [items, total, pendingCount] = await Promise.all([
    prisma.approval.findMany({
      ...query,
      where,
      orderBy: [{ requestedAt: 'desc' }, { id: 'desc' }],
      take: page.limit,
      skip: page.offset,
    }),
    prisma.approval.count({ where }),
    prisma.approval.count({ where: { ...visible, status: 'pending' } }),
  ]);
  return { items, total, pendingCount };
}

/** A visible approval, or null. */
export function findVisibleApproval(
  prisma: PrismaClient,
  scope: ApprovalScope,
  approvalId: string,
  query: ApprovalQuery,
) {
  return prisma.approval.findFirst({ ...query, where: { id: approvalId, ...visibleIn(scope) } });
}

/**
 * Records a decision on a pending, unexpired approval; false when it was no longer pending or had
 * expired. Conditional on `pending`: of two concurrent decisions exactly one changes the row.
 */
export async function decidePendingApproval(
  tx: Tx,
  orgId: string,
  approvalId: string,
  decision: {
    status: 'approved' | 'denied';
    decidedBy: string;
    decidedByUserId: string | null;
    notes: string | null;
    reason: string | null;
  },
): Promise<boolean> {
  const changed = await tx.approval.updateMany({
    where: { id: approvalId, orgId, status: 'pending', expiresAt: { gt: new Date() } },
    data: { ...decision, decidedAt: new Date() },
  });
  return changed.count > 0;
}

/** An approval that exists, by id, as the selection asks for it. */
export function approvalById(tx: Tx, approvalId: string, query: ApprovalQuery = {}) {
  return tx.approval.findUniqueOrThrow({ ...query, where: { id: approvalId } });
}

/** Denies every pending approval of the agent; returns them as they are now (none if none was pending). */
export async function denyPendingApprovalsOf(
  tx: Tx,
  orgId: string,
  svcId: string,
  decision: { decidedBy: string; reason: string },
): Promise<Approval[]> {
  const pending = await tx.approval.findMany({ where: { orgId, svcId, status: 'pending' }, select: { id: true } });
  if (!pending.length) return [];
  const ids = pending.map((approval) => approval.id);
  await tx.approval.updateMany({
    where: { id: { in: ids }, status: 'pending' },
    data: { status: 'denied', decidedBy: decision.decidedBy, decidedAt: new Date(), reason: decision.reason },
  });
  return tx.approval.findMany({ where: { id: { in: ids } } });
}
