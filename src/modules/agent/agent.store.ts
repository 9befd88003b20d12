import { sqlConnectionOf } from '../../db/prisma-sql.js';
import type { SqlDriver } from '../../db/sql.js';
import type { Agent, Prisma } from '../../generated/prisma/client.js';

/** The agent module's SQL: creating an agent when its first manifest arrives, and last_seen_at. */

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
