import type { MarketplaceTransaction, Prisma } from '../../generated/prisma/client.js';

/** The statements of purchases (`marketplace_transactions`); their Idempotency-Keys are idempotency.store.ts's. */

/** The Prisma client, or a transaction on it. */
type Client = Prisma.TransactionClient;

export type NewTransaction = Omit<
  Prisma.MarketplaceTransactionUncheckedCreateInput,
  'manifestId' | 'confirmedBy' | 'createdAt' | 'completedAt'
>;

export function insertTransaction(tx: Client, transaction: NewTransaction): Promise<MarketplaceTransaction> {
  return tx.marketplaceTransaction.create({ data: transaction });
}

export function findTransaction(prisma: Client, id: string): Promise<MarketplaceTransaction | null> {
  return prisma.marketplaceTransaction.findUnique({ where: { id } });
}

export function findTransactionOrThrow(prisma: Client, id: string): Promise<MarketplaceTransaction> {
  return prisma.marketplaceTransaction.findUniqueOrThrow({ where: { id } });
}

/** A transaction the org sold (it publishes the template). */
export function findSale(prisma: Client, publisherOrgId: string, id: string): Promise<MarketplaceTransaction | null> {
  return prisma.marketplaceTransaction.findFirst({ where: { id, publisherOrgId } });
}

/** The purchase completed now, with the manifest it registered. */
export function completeTransaction(tx: Client, id: string, manifestId: string): Promise<MarketplaceTransaction> {
  return tx.marketplaceTransaction.update({
    where: { id },
    data: { status: 'completed', manifestId, completedAt: new Date() },
  });
}

/** Marks a pending transaction completed by the publisher's confirmation; false when it was not pending. */
export async function confirmPendingTransaction(tx: Client, id: string, confirmedBy: string): Promise<boolean> {
  const claimed = await tx.marketplaceTransaction.updateMany({
    where: { id, status: 'pending' },
    data: { status: 'completed', confirmedBy },
  });
  return claimed.count > 0;
}

/** One page of the org's purchases and sales, newest first, and how many there are. */
export async function listTransactions(
  prisma: Client,
  orgId: string,
  page: { take: number; skip: number },
): Promise<{ items: MarketplaceTransaction[]; total: number }> {
  const where: Prisma.MarketplaceTransactionWhereInput = { OR: [{ buyerOrgId: orgId }, { publisherOrgId: orgId }] };
  const [items, total] = await Promise.all([
    prisma.marketplaceTransaction.findMany({ where, orderBy: [{ createdAt: 'desc' }, { id: 'asc' }], ...page }),
    prisma.marketplaceTransaction.count({ where }),
  ]);
  return { items, total };
}

export function countCompletedPurchases(prisma: Client, templateId: string): Promise<number> {
  return prisma.marketplaceTransaction.count({ where: { templateId, status: 'completed' } });
}

/** The template of the agent's newest completed purchase, or null when the agent was not acquired there. */
export async function templateIdOfAgent(prisma: Client, buyerOrgId: string, agentId: string): Promise<string | null> {
  const txn = await prisma.marketplaceTransaction.findFirst({
    where: { buyerOrgId, agentId, status: 'completed' },
    orderBy: [{ completedAt: 'desc' }],
    select: { templateId: true },
  });
  return txn?.templateId ?? null;
}
