import { sqlConnectionOf } from '../../db/prisma-sql.js';
import type { SqlDriver } from '../../db/sql.js';
import type { Agent, Prisma } from '../../generated/prisma/client.js';

/** The agent module's statements: agents, created by hand or when their first manifest arrives, their status and last_seen_at. */

export interface NewAgentRow {
  orgId: string;
  id: string;
  name: string;
  description: string;
  team: string | null;
  ownerEmail: string | null;
  createdBy: string;
}

interface AgentRow {
  status: string;
  labels: Record<string, string>;
  owner_email: string | null;
  name: string;
  team: string | null;
}

/**
 * Creates the agent unless it exists, then reads it under a share lock held until the caller's
 * transaction ends: a concurrent deactivation (an UPDATE) waits for it, and it waits for one
 * already running, so a manifest is never registered for an agent deactivated meanwhile.
 */
export type AgentState = Pick<Agent, 'name' | 'team' | 'ownerEmail' | 'labels' | 'status'>;

export async function ensureAgentRow(
  tx: Prisma.TransactionClient,
  row: NewAgentRow,
): Promise<{ created: boolean; row: AgentState }> {
  const conn = sqlConnectionOf(tx);
  const inserted = await conn.query<{ id: string }>(
    `INSERT INTO agents (org_id, id, name, description, team, owner_email, created_by)
     VALUES ($1::uuid, $2, $3, $4, $5, $6, $7)
     ON CONFLICT (org_id, id) DO NOTHING RETURNING id`,
    [row.orgId, row.id, row.name, row.description, row.team, row.ownerEmail, row.createdBy],
  );
  const [current] = await conn.query<AgentRow>(
    'SELECT status, labels, owner_email, name, team FROM agents WHERE org_id = $1::uuid AND id = $2 FOR SHARE',
    [row.orgId, row.id],
  );
  return {
    created: inserted.length === 1,
    row: {
      name: current.name,
      team: current.team,
      ownerEmail: current.owner_email,
      labels: current.labels,
      status: current.status,
    },
  };
}

/** Sets last_seen_at unless another process did within the interval. */
export async function touchLastSeen(
  sql: SqlDriver,
  orgId: string,
  agentId: string,
  intervalSeconds: number,
): Promise<void> {
  await sql.query(
    `UPDATE agents SET last_seen_at = now()
     WHERE org_id = $1::uuid AND id = $2 AND (last_seen_at IS NULL OR last_seen_at < now() - make_interval(secs => $3))`,
    [orgId, agentId, intervalSeconds],
  );
}

/** The Prisma client, or a transaction on it. */
type Client = Prisma.TransactionClient;

export async function insertAgent(tx: Client, row: NewAgentRow & { labels: Record<string, string> }): Promise<Agent> {
  return tx.agent.create({ data: row });
}

export function findAgent(prisma: Client, orgId: string, agentId: string): Promise<Agent | null> {
  return prisma.agent.findUnique({ where: { orgId_id: { orgId, id: agentId } } });
}

export function findAgentOrThrow(prisma: Client, orgId: string, agentId: string): Promise<Agent> {
  return prisma.agent.findUniqueOrThrow({ where: { orgId_id: { orgId, id: agentId } } });
}

export function findAgentSummary(prisma: Client, orgId: string, agentId: string) {
  return prisma.agent.findUnique({
    where: { orgId_id: { orgId, id: agentId } },
    select: { id: true, name: true, status: true },
  });
}

export function findAgentGate(prisma: Client, orgId: string, agentId: string) {
  return prisma.agent.findUnique({
    where: { orgId_id: { orgId, id: agentId } },
    select: { status: true, deactivationReason: true },
  });
}

export interface AgentListFilter {
  orgId: string;
  /** Only these agent ids (an API key limited to agent ids); undefined for all. */
  ids?: readonly string[];
  status?: string | null;
  team?: string | null;
  label?: [key: string, value: string] | null;
  /** A prefix of the id, or of the name in any case, as a LIKE literal (likeLiteral). */
  prefix?: string;
}

/** One page of the org's agents, newest first, and how many match. */
export async function listAgents(
  prisma: Client,
  filter: AgentListFilter,
  page: { take: number; skip: number },
): Promise<{ items: Agent[]; total: number }> {
  const { orgId, ids, status, team, label, prefix } = filter;
  const where: Prisma.AgentWhereInput = {
    orgId,
    ...(ids ? { id: { in: [...ids] } } : {}),
    ...(status ? { status } : {}),
    ...(team ? { team } : {}),
    ...(label ? { labels: { path: [label[0]], equals: label[1] } } : {}),
    ...(prefix ? { OR: [{ id: { startsWith: prefix } }, { name: { startsWith: prefix, mode: 'insensitive' } }] } : {}),
  };
  const [items, total] = await Promise.all([
    prisma.agent.findMany({ where, orderBy: [{ createdAt: 'desc' }, { id: 'asc' }], ...page }),
    prisma.agent.count({ where }),
  ]);
  return { items, total };
}

/** Deactivates the agent if it is active; false when it was not. */
export async function deactivateAgent(
  tx: Client,
  orgId: string,
  agentId: string,
  deactivation: { by: string; reason: string | null },
): Promise<boolean> {
  const changed = await tx.agent.updateMany({
    where: { orgId, id: agentId, status: 'active' },
    data: {
      status: 'deactivated',
      deactivatedAt: new Date(),
      deactivatedBy: deactivation.by,
      deactivationReason: deactivation.reason,
    },
  });
  return changed.count > 0;
}

/** Reactivates the agent if it is deactivated; false when it was not. */
export async function reactivateAgent(tx: Client, orgId: string, agentId: string): Promise<boolean> {
  const changed = await tx.agent.updateMany({
    where: { orgId, id: agentId, status: 'deactivated' },
    data: { status: 'active', deactivatedAt: null, deactivatedBy: null, deactivationReason: null },
  });
  return changed.count > 0;
}
