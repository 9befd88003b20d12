import type { Policy, Prisma } from '../../generated/prisma/client.js';

/** The policy module's statements: policies, and the row locks that keep concurrent writes exact. */

/** The Prisma client, or a transaction on it. */
type Tx = Prisma.TransactionClient;

/**
 * Locks the org's row, then counts its policies: concurrent creates in one org queue on the lock,
 * so each counts the others' committed rows and the per-org limit holds exactly. `NO KEY UPDATE`
 * rather than `UPDATE`: it still excludes itself, but not the key-share locks that inserting any
 * row referencing the org takes (records, audit entries), so the gateway never waits on it.
 */
export async function lockOrgAndCountPolicies(tx: Tx, orgId: string): Promise<number> {
  await tx.$queryRaw`SELECT id FROM organizations WHERE id = ${orgId}::uuid FOR NO KEY UPDATE`;
  const [row] = await tx.$queryRaw<
    { n: number }[]
  >`SELECT count(*)::int AS n FROM policies WHERE org_id = ${orgId}::uuid`;
  return Number(row.n);
}

/**
 * Locks one policy of the org until the transaction ends; false when there is none. A replace
 * reads the row it audits as `before` under this lock, so concurrent replaces each record the
 * version they actually replaced.
 */
export async function lockPolicy(tx: Tx, orgId: string, policyId: string): Promise<boolean> {
  const rows = await tx.$queryRaw<{ id: string }[]>`
    SELECT id FROM policies WHERE id = ${policyId} AND org_id = ${orgId}::uuid FOR UPDATE`;
  return rows.length === 1;
}

export type PolicyColumns = Omit<
  Prisma.PolicyUncheckedCreateInput,
  'id' | 'orgId' | 'version' | 'createdBy' | 'updatedBy' | 'createdAt' | 'updatedAt'
>;

export function insertPolicy(
  tx: Tx,
  policy: PolicyColumns & { id: string; orgId: string; createdBy: string; updatedBy: string },
): Promise<Policy> {
  return tx.policy.create({ data: policy });
}

export function findPolicy(prisma: Tx, orgId: string, policyId: string): Promise<Policy | null> {
  return prisma.policy.findFirst({ where: { id: policyId, orgId } });
}

export function findPolicyOrThrow(prisma: Tx, policyId: string): Promise<Policy> {
  return prisma.policy.findUniqueOrThrow({ where: { id: policyId } });
}

/** The org's policies with these values (each filter left out when null or undefined), in no order. */
export function policiesOfOrg(
  prisma: Tx,
  filter: { orgId: string; enabled?: boolean | null; mode?: string | null; effect?: string | null },
): Promise<Policy[]> {
  return prisma.policy.findMany({
    where: {
      orgId: filter.orgId,
      ...(filter.enabled != null && { enabled: filter.enabled }),
      ...(filter.mode != null && { mode: filter.mode }),
      ...(filter.effect != null && { effect: filter.effect }),
    },
  });
}

/** Every policy of these orgs, in no order. */
export function policiesOfOrgs(prisma: Tx, orgIds: readonly string[]): Promise<Policy[]> {
  return prisma.policy.findMany({ where: { orgId: { in: [...orgIds] } } });
}

/** Replaces every column of the org's policy and counts a version; throws Prisma's P2025 when there is none. */
export function replacePolicy(
  tx: Tx,
  orgId: string,
  policyId: string,
  columns: PolicyColumns & { updatedBy: string },
): Promise<Policy> {
  return tx.policy.update({
    where: { id: policyId, orgId },
    data: { ...columns, version: { increment: 1 } },
  });
}

/** Deletes the org's policy and returns it; throws Prisma's P2025 when there is none. */
export function deletePolicy(tx: Tx, orgId: string, policyId: string): Promise<Policy> {
  return tx.policy.delete({ where: { id: policyId, orgId } });
}
