import { randomBytes } from 'node:crypto';
import type { Manifest, ManifestEvent, ManifestStatus, Prisma } from '../../generated/prisma/client.js';

/** The manifest module's statements: manifests, their history (manifest_events) and the locks of a transition. */

/** The Prisma client, or a transaction on it. */
type Client = Prisma.TransactionClient;
export type ManifestQuery = { include?: Prisma.ManifestInclude; select?: Prisma.ManifestSelect };

const live: ManifestStatus[] = ['active', 'suspended'];
const newestFirst: Prisma.ManifestOrderByWithRelationInput[] = [{ createdAt: 'desc' }, { id: 'desc' }];

// Events written in one transaction share `changed_at` (the transaction's time), so the id breaks
// the tie: milliseconds, then a per-process sequence, then randomness for uniqueness across processes.
let eventSequence = 0;
const eventId = () => {
  eventSequence = (eventSequence + 1) % 36 ** 4;
  return `mev_${Date.now().toString(36).padStart(9, '0')}${eventSequence.toString(36).padStart(4, '0')}${randomBytes(6).toString('hex')}`;
};

export type NewManifestEvent = Omit<Prisma.ManifestEventUncheckedCreateInput, 'id' | 'changedAt'>;

export async function insertManifestEvent(tx: Client, event: NewManifestEvent): Promise<void> {
  await tx.manifestEvent.create({ data: { id: eventId(), ...event } });
}

export type NewManifest = Omit<Prisma.ManifestUncheckedCreateInput, 'status' | 'approvedCapabilities'>;

/** A new manifest, pending and with nothing approved yet. */
export function insertPendingManifest(tx: Client, manifest: NewManifest): Promise<Manifest> {
  return tx.manifest.create({ data: { ...manifest, status: 'pending', approvedCapabilities: [] } });
}

export function findManifestOrThrow(prisma: Client, id: string, query: ManifestQuery = {}) {
  return prisma.manifest.findUniqueOrThrow({ ...query, where: { id } });
}

export function findManifest(prisma: Client, id: string): Promise<Manifest | null> {
  return prisma.manifest.findUnique({ where: { id } });
}

export function findManifestOfOrg(prisma: Client, orgId: string, id: string, query: ManifestQuery = {}) {
  return prisma.manifest.findFirst({ ...query, where: { id, orgId } });
}

/** The agent's active or suspended manifest (a partial unique index allows one). */
export function findLiveManifest(prisma: Client, orgId: string, svcId: string, query: ManifestQuery = {}) {
  return prisma.manifest.findFirst({ ...query, where: { orgId, svcId, status: { in: live } } });
}

/** The agent's newest manifest of any status. */
export function findNewestManifest(prisma: Client, orgId: string, svcId: string, query: ManifestQuery = {}) {
  return prisma.manifest.findFirst({ ...query, where: { orgId, svcId }, orderBy: newestFirst });
}

/** What the gateway judges the agent by: its active or suspended manifest, else its newest. */
export async function findJudgedManifest(prisma: Client, orgId: string, svcId: string): Promise<Manifest | null> {
  return (
    (await findLiveManifest(prisma, orgId, svcId)) ??
    (await prisma.manifest.findFirst({ where: { orgId, svcId }, orderBy: [{ createdAt: 'desc' }] }))
  );
}

export interface ManifestListFilter {
  orgId: string;
  /** Only these agents' manifests (an API key limited to agent ids); undefined for all. */
  svcIds?: readonly string[];
  status?: ManifestStatus | null;
  team?: string | null;
}

/** One page of the org's manifests, newest first, and how many match. */
export async function listManifests(
  prisma: Client,
  filter: ManifestListFilter,
  page: { take: number; skip: number },
  query: ManifestQuery = {},
) {
  const where: Prisma.ManifestWhereInput = {
    orgId: filter.orgId,
    ...(filter.svcIds ? { svcId: { in: [...filter.svcIds] } } : {}),
    ...(filter.status ? { status: filter.status } : {}),
    ...(filter.team ? { team: filter.team } : {}),
  };
  const [items, total] = await Promise.all([
    prisma.manifest.findMany({ ...query, where, orderBy: newestFirst, ...page }),
    prisma.manifest.count({ where }),
  ]);
  return { items, total };
}

type AgentKey = { orgId: string; svcId: string };

/** Every manifest of several agents, newest first. */
export function manifestsOfAgents(prisma: Client, agents: readonly AgentKey[]): Promise<Manifest[]> {
  return prisma.manifest.findMany({
    where: { OR: agents.map(({ orgId, svcId }) => ({ orgId, svcId })) },
    orderBy: newestFirst,
  });
}

/** The manifests of several agents that were ever approved, in the order of their approval. */
export function approvedManifestsOfAgents(prisma: Client, agents: readonly AgentKey[]): Promise<Manifest[]> {
  return prisma.manifest.findMany({
    where: { approvedAt: { not: null }, OR: agents.map(({ orgId, svcId }) => ({ orgId, svcId })) },
    orderBy: [{ approvedAt: 'asc' }, { id: 'asc' }],
  });
}

/** Every history event of several agents, newest first. */
export function eventsOfAgents(prisma: Client, agents: readonly AgentKey[]): Promise<ManifestEvent[]> {
  return prisma.manifestEvent.findMany({
    where: { OR: agents.map(({ orgId, svcId }) => ({ orgId, svcId })) },
    orderBy: [{ changedAt: 'desc' }, { id: 'desc' }],
  });
}

/**
 * Locks the agent's active or suspended manifests other than `exceptId` until the transaction
 * ends, and reads them: a concurrent suspend or reactivate of one either finished first and is
 * seen here, or waits and then finds it superseded.
 */
export async function lockOtherLiveManifests(
  tx: Client,
  orgId: string,
  svcId: string,
  exceptId: string,
): Promise<Manifest[]> {
  const locked = await tx.$queryRaw<{ id: string }[]>`
    SELECT id::text AS id FROM manifests
    WHERE org_id = ${orgId}::uuid AND svc_id = ${svcId}
      AND status IN ('active', 'suspended') AND id <> ${exceptId}::uuid
    FOR UPDATE`;
  return locked.length ? tx.manifest.findMany({ where: { id: { in: locked.map((row) => row.id) } } }) : [];
}

export async function markSuperseded(tx: Client, id: string): Promise<void> {
  await tx.manifest.update({ where: { id }, data: { status: 'superseded' } });
}

/** Updates the manifest only while it still has status `from`; false when it no longer had. */
export async function updateManifestFrom(
  tx: Client,
  manifest: { id: string; orgId: string; from: ManifestStatus },
  data: Prisma.ManifestUncheckedUpdateManyInput,
): Promise<boolean> {
  const updated = await tx.manifest.updateMany({
    where: { id: manifest.id, orgId: manifest.orgId, status: manifest.from },
    data,
  });
  return updated.count > 0;
}
