import type { SqlConnection, SqlDriver } from '../../db/sql.js';

/**
 * The transparency log's SQL: signed checkpoints of each org's record tree, and the tree's nodes,
 * which the records keep (migration record_tree; merkle.ts names them).
 */

export interface CheckpointRow {
  tree_size: string;
  root_hash: Uint8Array;
  note: string;
  key_id: string;
  created_at: Date;
}

const CHECKPOINT_COLUMNS = 'tree_size::text AS tree_size, root_hash, note, key_id, created_at';

/** The org's latest checkpoint. */
export async function latestCheckpoint(sql: SqlConnection, orgId: string): Promise<CheckpointRow | undefined> {
  const [row] = await sql.query<CheckpointRow>(
    `SELECT ${CHECKPOINT_COLUMNS} FROM record_checkpoints WHERE org_id = $1::uuid ORDER BY record_checkpoints.tree_size DESC LIMIT 1`,
    [orgId],
    'latest_checkpoint',
  );
  return row;
}

/** The org's checkpoint of exactly this tree size. */
export async function checkpointOfSize(
  sql: SqlConnection,
  orgId: string,
  size: bigint,
): Promise<CheckpointRow | undefined> {
  const [row] = await sql.query<CheckpointRow>(
    `SELECT ${CHECKPOINT_COLUMNS} FROM record_checkpoints WHERE org_id = $1::uuid AND tree_size = $2::bigint`,
    [orgId, size.toString()],
  );
  return row;
}

/**
 * Serializes the org's checkpoint publishers (every process may run one) until the transaction
 * ends, without touching the chain head that appends update.
 */
export async function lockCheckpoints(tx: SqlConnection, orgId: string): Promise<void> {
  await tx.query("SELECT pg_advisory_xact_lock(hashtextextended('record_checkpoints:' || $1, 0))", [orgId]);
}

/** The org's tree at its chain head: size and right edge (0 and empty before its first record). */
export async function treeAtHead(sql: SqlConnection, orgId: string): Promise<{ size: bigint; frontier: Buffer }> {
  const [row] = await sql.query<{ seq: string; tree_frontier: Uint8Array }>(
    'SELECT seq::text AS seq, tree_frontier FROM record_chain_heads WHERE org_id = $1::uuid',
    [orgId],
  );
  return row
    ? { size: BigInt(row.seq), frontier: Buffer.from(row.tree_frontier) }
    : { size: 0n, frontier: Buffer.alloc(0) };
}

/** Whether the org's latest checkpoint was signed less than `seconds` ago. */
export async function checkpointedWithin(sql: SqlConnection, orgId: string, seconds: number): Promise<boolean> {
  const [row] = await sql.query<{ recent: boolean }>(
    `SELECT EXISTS (SELECT 1 FROM record_checkpoints WHERE org_id = $1::uuid
                    AND created_at > now() - make_interval(secs => $2::int)) AS recent`,
    [orgId, seconds],
  );
  return row.recent;
}

export async function insertCheckpoint(
  tx: SqlConnection,
  orgId: string,
  checkpoint: { size: bigint; root: Buffer; note: string; keyId: string },
): Promise<CheckpointRow> {
  const [row] = await tx.query<CheckpointRow>(
    `INSERT INTO record_checkpoints (org_id, tree_size, root_hash, note, key_id) VALUES ($1::uuid, $2::bigint, $3, $4, $5)
     RETURNING ${CHECKPOINT_COLUMNS}`,
    [orgId, checkpoint.size.toString(), checkpoint.root, checkpoint.note, checkpoint.keyId],
  );
  return row;
}

/** Orgs whose tree grew past their latest checkpoint (or that have records and no checkpoint). */
export async function orgsPastTheirCheckpoint(sql: SqlDriver, limit: number): Promise<string[]> {
  const rows = await sql.query<{ org_id: string }>(
    `SELECT h.org_id FROM record_chain_heads h
     WHERE h.seq > COALESCE((SELECT max(c.tree_size) FROM record_checkpoints c WHERE c.org_id = h.org_id), 0)
     LIMIT $1`,
    [limit],
  );
  return rows.map((row) => row.org_id);
}

/** The stored forms of the records with these seqs: their hash (the leaf) and the nodes they completed. */
export async function treeNodesOf(
  sql: SqlConnection,
  orgId: string,
  seqs: readonly bigint[],
): Promise<Map<bigint, { recordHash: string; nodes: Buffer | null }>> {
  const rows = await sql.query<{ seq: string; record_hash: string; tree_nodes: Uint8Array | null }>(
    `SELECT seq::text AS seq, record_hash, tree_nodes FROM interaction_records
     WHERE org_id = $1::uuid AND seq = ANY($2::bigint[])`,
    [orgId, seqs.map(String)],
    'tree_nodes_of',
  );
  return new Map(
    rows.map((row) => [
      BigInt(row.seq),
      { recordHash: row.record_hash, nodes: row.tree_nodes ? Buffer.from(row.tree_nodes) : null },
    ]),
  );
}
