import type { SqlConnection } from '../../db/sql.js';
import type { Prisma } from '../../generated/prisma/client.js';

/** The org module's statements. */

type Tx = Prisma.TransactionClient;

/** The relations a GraphQL selection needs, from Pothos' prisma plugin; empty outside GraphQL. */
export type OrgQuery = { include?: Prisma.OrganizationInclude; select?: Prisma.OrganizationSelect };

export function gatewaySettingsRow(prisma: Tx, orgId: string) {
  return prisma.organization.findUniqueOrThrow({
    where: { id: orgId },
    select: { recordParams: true, approvalTtlSeconds: true },
  });
}

export function findOrgIdBySlug(prisma: Tx, slug: string) {
  return prisma.organization.findUnique({ where: { slug }, select: { id: true } });
}

export function insertOrganization(tx: Tx, org: { name: string; slug: string }) {
  return tx.organization.create({ data: org });
}

export function findOrganization(prisma: Tx, orgId: string, query: OrgQuery = {}) {
  return prisma.organization.findUnique({ ...query, where: { id: orgId } });
}

export function findOrganizationOrThrow(prisma: Tx, orgId: string, query: OrgQuery = {}) {
  return prisma.organization.findUniqueOrThrow({ ...query, where: { id: orgId } });
}

export function updateOrganization(tx: Tx, orgId: string, data: Prisma.OrganizationUpdateInput, query: OrgQuery = {}) {
  return tx.organization.update({ ...query, where: { id: orgId }, data });
}

/**
 * Counts `requests` operator requests of the org in the window and reads its limit, in one round
 * trip: every process on the database shares the count.
 */
export async function countOperatorRequests(
  sql: SqlConnection,
  orgId: string,
  windowStart: Date,
  requests: number,
): Promise<{ count: number; limit: number | null }> {
  const [row] = await sql.query<{ count: number; limit: number | null }>(
    `INSERT INTO operator_rate_counters AS c (org_id, window_start, count) VALUES ($1::uuid, $2, $3)
     ON CONFLICT (org_id, window_start) DO UPDATE SET count = c.count + $3
     RETURNING count, (SELECT operator_rate_limit_per_minute FROM organizations WHERE id = $1::uuid) AS limit`,
    [orgId, windowStart, requests],
    // Every operator request runs it: parsed and planned once per connection.
    'count_operator_requests',
  );
  return row;
}
