import type { Prisma } from '../../generated/prisma/client.js';

/** The policy module's raw SQL: the row locks that keep concurrent writes exact. */

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
