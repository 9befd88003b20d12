import type { SqlConnection } from '../../db/sql.js';
import type { KeptDefinition, ToolDefinition } from './tool-definitions.js';

/** The SQL of upstream tool definitions (docs/decisions/0050-upstream-tool-definitions.md). */

interface DefinitionRow {
  name: string;
  pinned: ToolDefinition | null;
  pinned_hash: string | null;
  pinned_at: Date | null;
  current: ToolDefinition | null;
  current_hash: string | null;
  changed_at: Date | null;
}

const keptOf = (row: DefinitionRow): KeptDefinition => ({
  name: row.name,
  pinned: row.pinned,
  pinnedHash: row.pinned_hash,
  pinnedAt: row.pinned_at,
  current: row.current,
  currentHash: row.current_hash,
  changedAt: row.changed_at,
});

/** A tool's kept definitions, by name. */
export async function selectDefinitions(sql: SqlConnection, toolId: string): Promise<KeptDefinition[]> {
  const rows = await sql.query<DefinitionRow>(
    `SELECT name, pinned, pinned_hash, pinned_at, current, current_hash, changed_at
     FROM tool_definitions WHERE tool_id = $1 ORDER BY name`,
    [toolId],
  );
  return rows.map(keptOf);
}

/** What a refresh needs of its tool, locked until the transaction ends, so refreshes of one tool take turns. */
export interface LockedTool {
  org_id: string;
  updated_at: Date;
  definitions_pinned: boolean;
}

export async function lockTool(sql: SqlConnection, toolId: string): Promise<LockedTool | undefined> {
  const [row] = await sql.query<LockedTool>(
    'SELECT org_id, updated_at, definitions_pinned FROM tools WHERE id = $1 FOR UPDATE',
    [toolId],
  );
  return row;
}

/** Replaces a tool's kept definitions by `kept` (in the caller's transaction). */
export async function replaceDefinitions(
  sql: SqlConnection,
  toolId: string,
  kept: readonly KeptDefinition[],
): Promise<void> {
  await sql.query('DELETE FROM tool_definitions WHERE tool_id = $1', [toolId]);
  if (kept.length === 0) return;
  await sql.query(
    `INSERT INTO tool_definitions (tool_id, name, pinned, pinned_hash, pinned_at, current, current_hash, changed_at)
     SELECT $1, d.name, d.pinned, d.pinned_hash, d.pinned_at, d.current, d.current_hash, d.changed_at
     FROM jsonb_to_recordset($2::jsonb) AS d(name text, pinned jsonb, pinned_hash text, pinned_at timestamptz, current jsonb, current_hash text, changed_at timestamptz)`,
    [
      toolId,
      JSON.stringify(
        kept.map((d) => ({
          name: d.name,
          pinned: d.pinned,
          pinned_hash: d.pinnedHash,
          pinned_at: d.pinnedAt,
          current: d.current,
          current_hash: d.currentHash,
          changed_at: d.changedAt,
        })),
      ),
    ],
  );
}

/** Notes a read of the tool's definitions: when, whether they are pinned now, and why it failed (null: it did not). */
export async function markRead(
  sql: SqlConnection,
  toolId: string,
  outcome: { pinned?: boolean; error: string | null },
): Promise<void> {
  await sql.query(
    `UPDATE tools SET definitions_checked_at = now(), definitions_error = $2,
       definitions_pinned = COALESCE($3::boolean, definitions_pinned)
     WHERE id = $1`,
    [toolId, outcome.error, outcome.pinned ?? null],
  );
}

/** Forgets what was read and pinned: the tool now stands for another upstream (in the caller's transaction). */
export async function forgetDefinitions(sql: SqlConnection, toolId: string): Promise<void> {
  await sql.query('DELETE FROM tool_definitions WHERE tool_id = $1', [toolId]);
  await sql.query(
    'UPDATE tools SET definitions_pinned = false, definitions_checked_at = NULL, definitions_error = NULL WHERE id = $1',
    [toolId],
  );
}

/**
 * Claims up to `limit` mcp tools whose definitions were read `intervalSeconds` ago or longer (or
 * never): marks them read now, so another process's sweep passes them over, and returns them.
 */
export async function claimDueTools(
  sql: SqlConnection,
  intervalSeconds: number,
  limit: number,
): Promise<{ id: string; org_id: string }[]> {
  return sql.query<{ id: string; org_id: string }>(
    `UPDATE tools SET definitions_checked_at = now()
     WHERE id IN (
       SELECT id FROM tools
       WHERE connector = 'mcp' AND (definitions_checked_at IS NULL OR definitions_checked_at <= now() - make_interval(secs => $1))
       ORDER BY definitions_checked_at NULLS FIRST
       LIMIT $2
       FOR UPDATE SKIP LOCKED)
     RETURNING id, org_id::text AS org_id`,
    [intervalSeconds, limit],
  );
}
