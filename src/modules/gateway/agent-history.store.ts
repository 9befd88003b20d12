import type { SqlConnection } from '../../db/sql.js';
import type { HistoryFact } from '../policy/policy-condition.js';

/**
 * The SQL of an agent's history (`agent_history`, docs/decisions/0086-policy-history-and-labels.md):
 * what history policies' conditions see of its earlier decisions. Only agents that an enabled
 * history policy targets have entries; their decisions are serialized by a transaction-level
 * advisory lock per agent, taken before their history is read and held until their own entry is
 * written, so two concurrent calls of one agent, on any processes, never both miss each other.
 */

/** At most this many entries are read: the newest ones of the window. */
export const MAX_HISTORY_ENTRIES = 1000;

/** How long an entry is kept: the longest window a policy may have. */
export const KEPT_SECONDS = 86_400;

/**
 * Waits for the agent's lock, held until the transaction ends. A statement of its own: a read in
 * the same statement would see the database as it was before the wait.
 */
export async function lockAgentHistory(tx: SqlConnection, orgId: string, svcId: string): Promise<void> {
  await tx.query(
    "SELECT pg_advisory_xact_lock(hashtextextended('agent_history:' || $1 || '/' || $2, 0))",
    [orgId, svcId],
    'lock_agent_history',
  );
}

/** An entry as the read's JSON carries it: `at` in epoch milliseconds, and its place in the agent's order. */
interface HistoryJson {
  capability: string;
  type: string;
  tool: string;
  decision: string;
  executed: boolean;
  labels: string[] | null;
  at: number;
  seq: number;
}

/** An entry read, with its place in the agent's order (`seq`). */
export interface NumberedFact {
  seq: number;
  fact: HistoryFact;
}

/**
 * The agent's entries after `afterSeq` and since `since`, in the agent's order: the newest
 * MAX_HISTORY_ENTRIES of them. One row of JSON rather than a row per entry: the drivers decode each
 * row's array and timestamp in JavaScript, ≈35 µs a row on the embedded database, where one JSON
 * text parses in well under a millisecond for the whole window.
 */
export async function historyAfter(
  conn: SqlConnection,
  orgId: string,
  svcId: string,
  afterSeq: number,
  since: Date,
): Promise<NumberedFact[]> {
  const [row] = await conn.query<{ entries: string }>(
    `SELECT coalesce(json_agg(json_build_object(
              'capability', capability, 'type', action_type, 'tool', tool, 'decision', decision,
              'executed', executed, 'labels', labels, 'at', (extract(epoch FROM at) * 1000)::bigint, 'seq', seq)
            ORDER BY seq), '[]')::text AS entries
     FROM (SELECT * FROM agent_history
           WHERE org_id = $1::uuid AND svc_id = $2 AND seq > $3 AND at >= $4::timestamptz
           ORDER BY seq DESC LIMIT ${MAX_HISTORY_ENTRIES}) AS newest`,
    [orgId, svcId, afterSeq, since],
    'history_after',
  );
  return (JSON.parse(row.entries) as HistoryJson[]).map(({ seq, labels, at, ...entry }) => ({
    seq,
    fact: { ...entry, labels: labels ?? [], at: new Date(at) },
  }));
}

export interface HistoryEntry {
  orgId: string;
  svcId: string;
  /** The interaction id. */
  id: string;
  at: Date;
  actionType: string;
  tool: string;
  capability: string;
  decision: 'allow' | 'deny';
  executed: boolean;
  labels: readonly string[];
}

/** Writes a decision's entry and drops the agent's entries older than any window can reach, in one statement. */
export async function appendHistory(tx: SqlConnection, entry: HistoryEntry): Promise<void> {
  await tx.query(
    `WITH expired AS (
       DELETE FROM agent_history
       WHERE org_id = $1::uuid AND svc_id = $2 AND at < $4::timestamptz - make_interval(secs => ${KEPT_SECONDS})
     )
     INSERT INTO agent_history (org_id, svc_id, id, at, action_type, tool, capability, decision, executed, labels)
     VALUES ($1::uuid, $2, $3, $4::timestamptz, $5, $6, $7, $8, $9, $10::text[])`,
    [
      entry.orgId,
      entry.svcId,
      entry.id,
      entry.at,
      entry.actionType,
      entry.tool,
      entry.capability,
      entry.decision,
      entry.executed,
      [...entry.labels],
    ],
    'append_history',
  );
}

/**
 * Runs `work` on the transaction after a savepoint and undoes what it wrote when `keep` says no,
 * the transaction going on: a refused commit leaves no trace but the history entry written next.
 */
export async function undoUnless<T>(
  tx: SqlConnection,
  work: () => Promise<T>,
  keep: (value: T) => boolean,
): Promise<T> {
  await tx.exec('SAVEPOINT commit_attempt');
  const value = await work();
  if (!keep(value)) await tx.exec('ROLLBACK TO SAVEPOINT commit_attempt');
  return value;
}
