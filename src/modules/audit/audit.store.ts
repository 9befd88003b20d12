import type { AuditLog, Prisma, PrismaClient } from '../../generated/prisma/client.js';

/** The audit module's statements: appending entries and reading them back by filter. */

type Tx = Prisma.TransactionClient;

export interface AuditFilter {
  /** An actor id (user id, API key id) or label (email, whatever its case; key prefix). */
  actor?: string | null;
  /** `manifest.approved` exactly, or a family: `manifest` matches every `manifest.…` action. */
  action?: string | null;
  target_type?: string | null;
  target_id?: string | null;
  /** Inclusive. */
  from?: Date | null;
  /** Exclusive. */
  to?: Date | null;
}

/** Appends an entry in the transaction of the change it describes. */
export async function insertAuditEntry(tx: Tx, entry: Prisma.AuditLogUncheckedCreateInput): Promise<void> {
  await tx.auditLog.create({ data: entry });
}

function whereOf(orgId: string, filter: AuditFilter): Prisma.AuditLogWhereInput {
  const { actor, action, target_type: targetType, target_id: targetId, from, to } = filter;
  const conditions: Prisma.AuditLogWhereInput[] = [{ orgId }];
  // Emails are stored lower-cased, so a label also matches in lower case.
  if (actor)
    conditions.push({ OR: [{ actorId: actor }, { actorLabel: { in: [...new Set([actor, actor.toLowerCase()])] } }] });
  if (action) conditions.push({ action: action.includes('.') ? action : { startsWith: `${action}.` } });
  if (targetType) conditions.push({ targetType });
  if (targetId) conditions.push({ targetId });
  if (from) conditions.push({ createdAt: { gte: from } });
  if (to) conditions.push({ createdAt: { lt: to } });
  return { AND: conditions };
}

/** A page of the org's matching entries, newest first, and how many match in all. */
export async function auditPage(
  prisma: PrismaClient,
  orgId: string,
  filter: AuditFilter,
  page: { limit: number; offset: number },
): Promise<{ items: AuditLog[]; total: number }> {
  const where = whereOf(orgId, filter);
  const [items, total] = await Promise.all([
    prisma.auditLog.findMany({
      where,
      orderBy: [{ createdAt: 'desc' }, { id: 'desc' }],
      take: page.limit,
      skip: page.offset,
    }),
    prisma.auditLog.count({ where }),
  ]);
  return { items, total };
}

/**
 * Up to `take` of the org's matching entries, oldest first, from the first after `after` in
 * (created_at, id) order (keyset pagination; from the start without it).
 */
export function auditBatch(
  prisma: PrismaClient,
  orgId: string,
  filter: AuditFilter,
  after: { createdAt: Date; id: string } | undefined,
  take: number,
): Promise<AuditLog[]> {
  const where = whereOf(orgId, filter);
  return prisma.auditLog.findMany({
    where: after
      ? {
          AND: [
            where,
            { createdAt: { gte: after.createdAt } },
            { OR: [{ createdAt: { gt: after.createdAt } }, { id: { gt: after.id } }] },
          ],
        }
      : where,
    orderBy: [{ createdAt: 'asc' }, { id: 'asc' }],
    take,
  });
}
