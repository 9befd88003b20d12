import { plannedOnce, type SqlConnection, type SqlDriver } from '../../db/sql.js';
import type {
  InteractionChannel,
  RecordedConfirmation,
  RecordedConnection,
  RecordedPolicy,
} from '../record/record-chain.js';
import { recordedConnectionOf, type RecordConnection, type RecordSubject } from '../record/record.service.js';
import {
  budgetOutcome,
  type BudgetCounts,
  type BudgetLimits,
  type BudgetOutcome,
  type BudgetWindows,
  type PolicyCounter,
} from './budget.js';

/**
 * The gateway module's SQL: the agent budgets (rate_counters through `take_budget`), the
 * write-ahead journal of executions (`gateway_executions`, see its migration) and the leases of
 * its owners (`gateway_journal_owners`).
 */

/** What the journal keeps of an allowed execute until its record exists: enough to write that record. */
export interface JournalEntry extends RecordSubject {
  /** The interaction id, which its record will carry. */
  id: string;
  /** The params when the org keeps them in records, else null. */
  params: Record<string, unknown> | null;
  approvalId: string | null;
  policies: RecordedPolicy[];
  /** The record's `connection`: kept so that a record written on recovery names it too. */
  connection: RecordConnection | null;
  /** The decision's labels, for the record written on recovery too. */
  labels: readonly string[];
  /** The user's confirmation the call runs with, for the record written on recovery too; null without one. */
  confirmation: RecordedConfirmation | null;
}

/** A fixed-window counter: its bucket and the start of its window. */
export interface CounterKey {
  bucket: string;
  window: { start: Date };
}

export const counterKeyOf = (key: CounterKey) => `${key.bucket}@${key.window.start.getTime()}`;

/** The current counts of the counters (0 for one never hit), by counterKeyOf, in one statement. */
export async function readCounts(sql: SqlDriver, keys: readonly CounterKey[]): Promise<Map<string, number>> {
  const rows = await sql.query<{ bucket: string; window_start: Date; count: number }>(
    `SELECT c.bucket, c.window_start, c.count FROM rate_counters c
     JOIN unnest($1::text[], $2::timestamptz[]) AS k(bucket, window_start) USING (bucket, window_start)`,
    plannedOnce([keys.map((k) => k.bucket), keys.map((k) => k.window.start)]),
    'read_counts',
  );
  return new Map(rows.map((r) => [counterKeyOf({ bucket: r.bucket, window: { start: r.window_start } }), r.count]));
}

/** The hour and day counts of several agents, in one query (agents' `usage`). */
export async function budgetCountsOf(sql: SqlDriver, windows: readonly BudgetWindows[]): Promise<BudgetCounts[]> {
  const buckets = windows.flatMap((w) => [w.hour, w.day]);
  const rows = await sql.query<{ bucket: string; count: number }>(
    `SELECT c.bucket, c.count FROM rate_counters c
     JOIN unnest($1::text[], $2::timestamptz[]) AS k(bucket, window_start) USING (bucket, window_start)`,
    [buckets.map((b) => b.bucket), buckets.map((b) => b.window.start)],
    'budget_counts_of',
  );
  const count = new Map(rows.map((row) => [row.bucket, row.count]));
  return windows.map((w) => ({ hour: count.get(w.hour.bucket) ?? 0, day: count.get(w.day.bucket) ?? 0 }));
}

export type AllowanceOutcome =
  /** The owner's lease is gone: nothing was counted or journaled. */
  | { ok: false; leaseLost: true }
  | { ok: true; budget: BudgetOutcome & { ok: true }; counts: number[] }
  | { ok: false; refusedBy: number; counts: number[] }
  | { ok: false; refusedBy: null; budget: BudgetOutcome & { ok: false } };

interface AllowanceRow {
  limit_counts: number[];
  refused_by: number;
  day_count: number | null;
  hour_count: number | null;
}

/** The counters' parameters of take_allowance, in its order. */
function allowanceParams(counters: readonly PolicyCounter[], windows: BudgetWindows, limits: BudgetLimits): unknown[] {
  return [
    counters.map((c) => c.bucket),
    counters.map((c) => c.window.start),
    counters.map((c) => c.limit),
    counters.map((c) => c.enforced),
    windows.day.bucket,
    windows.day.window.start,
    limits.maxActionsPerDay,
    windows.hour.bucket,
    windows.hour.window.start,
    limits.maxActionsPerHour,
  ];
}

function allowanceOutcome(row: AllowanceRow, windows: BudgetWindows, limits: BudgetLimits): AllowanceOutcome {
  const counts = row.limit_counts ?? [];
  if (row.refused_by > 0) return { ok: false, refusedBy: row.refused_by - 1, counts };
  const budget = budgetOutcome(windows, limits, row);
  return budget.ok ? { ok: true, budget, counts } : { ok: false, refusedBy: null, budget };
}

/**
 * The commit of an allowed execute, in one statement: counts the action against the rate limits
 * of its matched policies and the agent's day and hour (`take_allowance`, which locks those
 * counter rows only while the statement runs) and, only when all had room, writes the journal
 * entry. Counted and journaled are therefore one fact: a crash after it leaves a journal entry for
 * every counted action, and a refusal leaves neither. Nothing happens when `owner` has no lease
 * any more (`take_allowance_as`). `counters` must be sorted by bucket (the
 * lock order). `conn` is the driver itself (the statement is its own transaction) or a
 * transaction that also uses a capability token or an approval.
 */
export async function countAndJournal(
  conn: SqlConnection,
  counters: readonly PolicyCounter[],
  windows: BudgetWindows,
  limits: BudgetLimits,
  owner: number,
  entry: JournalEntry,
): Promise<AllowanceOutcome> {
  const [row] = await conn.query<AllowanceRow>(
    `WITH allowance AS MATERIALIZED (
       SELECT limit_counts, refused_by, day_count, hour_count FROM take_allowance_as($13, $1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
     ),
     journal AS (
       INSERT INTO gateway_executions
         (id, org_id, owner, svc_id, agent_id, action_type, tool, capability, params_hash, params, approval_id, policies, channel,
          connection, labels, confirmation)
       SELECT $11, $12::uuid, $13, $14, $15, $16, $17, $18, $19, $20::jsonb, $21, $22::jsonb, $23, $24::jsonb, $25::text[],
              $26::jsonb
       FROM allowance WHERE refused_by = 0 AND day_count IS NOT NULL AND hour_count IS NOT NULL
     )
     SELECT limit_counts, refused_by, day_count, hour_count FROM allowance`,
    [
      ...allowanceParams(counters, windows, limits),
      entry.id,
      entry.orgId,
      owner,
      entry.svcId,
      entry.agentId,
      entry.actionType,
      entry.tool,
      entry.capability,
      entry.paramsHash,
      entry.params === null ? null : JSON.stringify(entry.params),
      entry.approvalId,
      JSON.stringify(entry.policies),
      entry.channel,
      entry.connection === null ? null : JSON.stringify(recordedConnectionOf(entry.connection)),
      entry.labels.length ? entry.labels : null,
      entry.confirmation === null ? null : JSON.stringify(entry.confirmation),
    ],
    'count_and_journal',
  );
  return row ? allowanceOutcome(row, windows, limits) : { ok: false, leaseLost: true };
}

/**
 * `countAndJournal` for several executes against the same counters, in one statement and so one
 * commit (`take_allowances_as`): each is counted in the order of `entries` and journaled only when
 * it had room, and gets the outcome it would have had alone. Answers in the order of `entries`;
 * every one lease-lost when `owner` has no lease.
 */
export async function countAndJournalMany(
  sql: SqlDriver,
  counters: readonly PolicyCounter[],
  windows: BudgetWindows,
  limits: BudgetLimits,
  owner: number,
  entries: readonly JournalEntry[],
): Promise<AllowanceOutcome[]> {
  const rows = await sql.query<AllowanceRow & { ord: string }>(
    `WITH allowance AS MATERIALIZED (
       SELECT ord, limit_counts, refused_by, day_count, hour_count
       FROM take_allowances_as($11, $12, $1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
     ),
     journal AS (
       INSERT INTO gateway_executions
         (id, org_id, owner, svc_id, agent_id, action_type, tool, capability, params_hash, params, approval_id, policies, channel,
          connection, labels, confirmation)
       SELECT e.id, e.org_id, $11, e.svc_id, e.agent_id, e.action_type, e.tool, e.capability, e.params_hash, e.params,
              e.approval_id, e.policies, e.channel, e.connection, e.labels, e.confirmation
       FROM allowance
       JOIN ROWS FROM (jsonb_to_recordset($13::jsonb)
         AS (id text, org_id uuid, svc_id text, agent_id text, action_type text, tool text, capability text,
             params_hash text, params jsonb, approval_id text, policies jsonb, channel text, connection jsonb, labels text[],
             confirmation jsonb))
         WITH ORDINALITY AS e(id, org_id, svc_id, agent_id, action_type, tool, capability, params_hash, params,
                              approval_id, policies, channel, connection, labels, confirmation, ord) USING (ord)
       WHERE refused_by = 0 AND day_count IS NOT NULL AND hour_count IS NOT NULL
     )
     SELECT ord, limit_counts, refused_by, day_count, hour_count FROM allowance ORDER BY ord`,
    [
      ...allowanceParams(counters, windows, limits),
      owner,
      entries.length,
      // One JSON parameter rather than an array per column: pg's array encoding escapes every
      // element in JavaScript, and the driver sends a string as it is.
      JSON.stringify(
        entries.map((e) => ({
          id: e.id,
          org_id: e.orgId,
          svc_id: e.svcId,
          agent_id: e.agentId,
          action_type: e.actionType,
          tool: e.tool,
          capability: e.capability,
          params_hash: e.paramsHash,
          params: e.params,
          approval_id: e.approvalId,
          policies: e.policies,
          channel: e.channel,
          connection: e.connection === null ? null : recordedConnectionOf(e.connection),
          labels: e.labels.length ? e.labels : null,
          confirmation: e.confirmation,
        })),
      ),
    ],
    'count_and_journal_many',
  );
  if (!rows.length) return entries.map(() => ({ ok: false, leaseLost: true }));
  return rows.map((row) => allowanceOutcome(row, windows, limits));
}

/** Drops the journal entries of executions whose records exist. */
export async function forgetExecutions(sql: SqlDriver, ids: string[]): Promise<void> {
  // After every execute's record: parsed and planned once per connection.
  await sql.query('DELETE FROM gateway_executions WHERE id = ANY($1)', [ids], 'forget_executions');
}

/**
 * Takes `owner` as this process's journal owner, leased for `leaseSeconds`: false when another
 * process has it, or when journal entries still name it (a stopped process's, not yet adopted).
 */
export async function claimOwner(sql: SqlDriver, owner: number, leaseSeconds: number): Promise<boolean> {
  const rows = await sql.query(
    `INSERT INTO gateway_journal_owners (owner, lease_expires_at)
     SELECT $1, now() + make_interval(secs => $2::int)
     WHERE NOT EXISTS (SELECT 1 FROM gateway_executions WHERE owner = $1)
     ON CONFLICT (owner) DO NOTHING RETURNING owner`,
    [owner, leaseSeconds],
  );
  return rows.length > 0;
}

/** Extends the lease of `owner`; false when it is gone (it ran out and another process adopted the owner's entries). */
export async function renewLease(sql: SqlDriver, owner: number, leaseSeconds: number): Promise<boolean> {
  const rows = await sql.query(
    'UPDATE gateway_journal_owners SET lease_expires_at = now() + make_interval(secs => $2::int) WHERE owner = $1 RETURNING owner',
    [owner, leaseSeconds],
  );
  return rows.length > 0;
}

/**
 * Makes `self` the owner of the journal entries whose process is gone, in one transaction; answers
 * how many it took. Gone: its lease ran out (`everyOther`: any owner but `self`, when this process
 * knows that no other one can be alive). Entries whose owner has no lease row are taken too: those
 * of a gateway version that held a session advisory lock (class `legacyLockClass`) while it lived,
 * taken only when that lock is free, and those committed the moment their owner was declared gone.
 * The second statement sees what committed while the first waited.
 */
export async function adoptExecutions(
  sql: SqlDriver,
  self: number,
  everyOther: boolean,
  legacyLockClass: number,
): Promise<number> {
  return sql.transaction(async (tx) => {
    await tx.query(
      'DELETE FROM gateway_journal_owners WHERE owner <> $1 AND ($2::boolean OR lease_expires_at < now())',
      [self, everyOther],
    );
    const adopted = await tx.query(
      `UPDATE gateway_executions e SET owner = $1
       WHERE e.owner <> $1
         AND NOT EXISTS (SELECT 1 FROM gateway_journal_owners o WHERE o.owner = e.owner)
         AND pg_try_advisory_xact_lock($2, e.owner)
       RETURNING e.id`,
      [self, legacyLockClass],
    );
    return adopted.length;
  });
}

interface JournalRow {
  id: string;
  org_id: string;
  svc_id: string;
  agent_id: string;
  action_type: string;
  tool: string;
  capability: string;
  params_hash: string;
  params: Record<string, unknown> | null;
  approval_id: string | null;
  policies: RecordedPolicy[];
  channel: InteractionChannel | null;
  connection: RecordedConnection | null;
  labels: string[] | null;
  confirmation: RecordedConfirmation | null;
}

/** The journal entries of one owner, oldest first. */
export async function executionsOf(conn: SqlConnection, owner: number): Promise<JournalEntry[]> {
  const rows = await conn.query<JournalRow>(
    `SELECT id, org_id::text AS org_id, svc_id, agent_id, action_type, tool, capability, params_hash, params, approval_id, policies, channel,
       connection, labels, confirmation
     FROM gateway_executions WHERE owner = $1 ORDER BY started_at, id`,
    [owner],
  );
  return rows.map((row) => ({
    id: row.id,
    orgId: row.org_id,
    svcId: row.svc_id,
    agentId: row.agent_id,
    actionType: row.action_type,
    tool: row.tool,
    capability: row.capability,
    paramsHash: row.params_hash,
    params: row.params,
    approvalId: row.approval_id,
    policies: row.policies,
    channel: row.channel,
    connection: row.connection && { connectionId: row.connection.connection_id, userId: row.connection.user_id },
    labels: row.labels ?? [],
    confirmation: row.confirmation,
  }));
}
