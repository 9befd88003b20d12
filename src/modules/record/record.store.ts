import type { SqlConnection, SqlDriver } from '../../db/sql.js';
import type { InteractionRecord, Prisma, PrismaClient } from '../../generated/prisma/client.js';
import { GENESIS_HASH } from './record-chain.js';

/**
 * The record module's SQL: the org's chain head (locked by every append, so the chain never
 * forks), batch inserts of signed records, and the reads the dashboards, verification, the export
 * and recovery need.
 */

/**
 * The seq and hash of the org's last record (seq 0 and the genesis hash before its first), and the
 * right edge of its Merkle tree there (merkle.ts: the packed roots of the complete subtrees).
 */
export interface ChainHead {
  seq: bigint;
  hash: string;
  frontier: Buffer;
  /** When the record at `seq` was made: the earliest the next may be (null before the first). */
  lastCreatedAt: Date | null;
}

interface HeadRow {
  seq: string;
  head_hash: string;
  tree_frontier: Uint8Array;
  last_created_at: Date | string | null;
}

const headOf = (row: HeadRow | undefined): ChainHead =>
  row
    ? {
        seq: BigInt(row.seq),
        hash: row.head_hash,
        frontier: Buffer.from(row.tree_frontier),
        lastCreatedAt: row.last_created_at === null ? null : new Date(row.last_created_at),
      }
    : { seq: 0n, hash: GENESIS_HASH, frontier: Buffer.alloc(0), lastCreatedAt: null };

/**
 * Creates the org's head on its first record and locks it, in one statement: a no-op update of an
 * existing head takes the row lock like SELECT … FOR UPDATE. Held until the transaction ends.
 */
export async function lockChainHead(tx: SqlConnection, orgId: string): Promise<ChainHead> {
  const [head] = await tx.query<HeadRow>(
    `INSERT INTO record_chain_heads AS h (org_id, seq, head_hash, tree_frontier, updated_at)
     VALUES ($1::uuid, 0, $2, '\\x'::bytea, now())
     ON CONFLICT (org_id) DO UPDATE SET seq = h.seq
     RETURNING h.seq::text AS seq, h.head_hash, h.tree_frontier, h.last_created_at`,
    [orgId, GENESIS_HASH],
    'lock_chain_head',
  );
  return headOf(head);
}

/** The org's chain head as committed, without locking it. */
export async function readChainHead(sql: SqlConnection, orgId: string): Promise<ChainHead> {
  const [head] = await sql.query<HeadRow>(
    'SELECT seq::text AS seq, head_hash, tree_frontier, last_created_at FROM record_chain_heads WHERE org_id = $1::uuid',
    [orgId],
    'read_chain_head',
  );
  return headOf(head);
}

const columns = [
  'id',
  'org_id',
  'seq',
  'svc_id',
  'agent_id',
  'action_type',
  'tool',
  'capability',
  'params_hash',
  'params',
  'status',
  'executed',
  'reasons',
  'result_hash',
  'approval_id',
  'policies',
  'channel',
  'connection',
  'labels',
  'original_result_hash',
  'redactions',
  'confirmation',
  'prev_hash',
  'record_hash',
  'signature',
  'tree_nodes',
  'key_id',
  'created_at',
];
/** Each column's type as read from the batch's JSON (`batchRows`); `tree_nodes` comes as hex. */
const types: Record<string, string> = {
  org_id: 'uuid',
  seq: 'bigint',
  params: 'jsonb',
  reasons: 'jsonb',
  policies: 'jsonb',
  connection: 'jsonb',
  labels: 'text[]',
  redactions: 'jsonb',
  confirmation: 'jsonb',
  status: '"RecordStatus"',
  executed: 'boolean',
  created_at: 'timestamptz',
};

/**
 * The batch's rows from one JSON array of objects, `$1`: one statement text whatever the batch's
 * size, so that it is parsed and planned once per connection, and one parameter the driver sends
 * as it is. As 24 arrays, pg's array encoding (escaping every element in JavaScript) was ~5% of an
 * execute's CPU.
 */
const batchRows = `SELECT ${columns.map((column) => (column === 'tree_nodes' ? "decode(r.tree_nodes, 'hex')" : `r.${column}`)).join(', ')}
  FROM jsonb_to_recordset($1::jsonb) AS r(${columns.map((column) => `${column} ${types[column] ?? 'text'}`).join(', ')})`;

/** The parameter of `batchRows`: the batch as JSON, a row per record in the batch's order. */
function recordBatch(records: InteractionRecord[]): string {
  return JSON.stringify(
    records.map((r) => ({
      id: r.id,
      org_id: r.orgId,
      seq: r.seq.toString(),
      svc_id: r.svcId,
      agent_id: r.agentId,
      action_type: r.actionType,
      tool: r.tool,
      capability: r.capability,
      params_hash: r.paramsHash,
      params: r.params,
      status: r.status,
      executed: r.executed,
      reasons: r.reasons,
      result_hash: r.resultHash,
      approval_id: r.approvalId,
      policies: r.policies,
      channel: r.channel,
      connection: r.connection,
      // Null, not an empty list, without labels: the listing's partial index keeps labelled records only.
      labels: r.labels?.length ? r.labels : null,
      original_result_hash: r.originalResultHash,
      redactions: r.redactions,
      confirmation: r.confirmation,
      prev_hash: r.prevHash,
      record_hash: r.recordHash,
      signature: r.signature,
      tree_nodes: r.treeNodes === null ? null : Buffer.from(r.treeNodes).toString('hex'),
      key_id: r.keyId,
      created_at: r.createdAt,
    })),
  );
}

const HEAD = 1;

/** Inserts a batch of chained records (seq order) and moves the org's head to the last, in one statement. */
export async function insertRecordsAndAdvanceHead(
  tx: SqlConnection,
  orgId: string,
  records: InteractionRecord[],
  frontier: Buffer,
): Promise<void> {
  const last = records[records.length - 1];
  await tx.query(
    `WITH appended AS (INSERT INTO interaction_records (${columns.join(', ')}) ${batchRows})
     UPDATE record_chain_heads
     SET seq = $${HEAD + 2}::bigint, head_hash = $${HEAD + 3}, tree_frontier = $${HEAD + 4}::bytea,
       last_created_at = $${HEAD + 5}::timestamptz, updated_at = now()
     WHERE org_id = $${HEAD + 1}::uuid`,
    [recordBatch(records), orgId, last.seq.toString(), last.recordHash, frontier, last.createdAt],
    'insert_records_and_advance_head',
  );
}

/**
 * Appends a batch chained on `expected` and moves the org's head to its last record, in one
 * statement that does either both or nothing: nothing when the head is no longer `expected`
 * (another writer appended first; its row lock makes a concurrent statement see its new head).
 * Whether it appended.
 */
export async function appendIfHeadIs(
  sql: SqlConnection,
  orgId: string,
  expected: ChainHead,
  records: InteractionRecord[],
  frontier: Buffer,
): Promise<boolean> {
  const last = records[records.length - 1];
  const [result] = await sql.query<{ advanced: number }>(
    `WITH head AS (
       INSERT INTO record_chain_heads AS h (org_id, seq, head_hash, tree_frontier, last_created_at, updated_at)
       VALUES ($${HEAD + 1}::uuid, $${HEAD + 2}::bigint, $${HEAD + 3}, $${HEAD + 6}::bytea, $${HEAD + 7}::timestamptz, now())
       ON CONFLICT (org_id) DO UPDATE
         SET seq = EXCLUDED.seq, head_hash = EXCLUDED.head_hash, tree_frontier = EXCLUDED.tree_frontier,
           last_created_at = EXCLUDED.last_created_at, updated_at = now()
         WHERE h.seq = $${HEAD + 4}::bigint AND h.head_hash = $${HEAD + 5}
       RETURNING 1
     ), appended AS (
       INSERT INTO interaction_records (${columns.join(', ')})
       SELECT * FROM (${batchRows}) AS batch WHERE EXISTS (SELECT 1 FROM head)
     )
     SELECT count(*)::int AS advanced FROM head`,
    [
      recordBatch(records),
      orgId,
      last.seq.toString(),
      last.recordHash,
      expected.seq.toString(),
      expected.hash,
      frontier,
      last.createdAt,
    ],
    'append_if_head_is',
  );
  return result.advanced === 1;
}

/** Which of these record ids exist. */
export async function existingRecordIds(sql: SqlDriver, ids: readonly string[]): Promise<Set<string>> {
  const rows = await sql.query<{ id: string }>('SELECT id FROM interaction_records WHERE id = ANY($1)', [ids]);
  return new Set(rows.map((row) => row.id));
}

/**
 * SQL for the seq of the org's ($1) first record created at or after `from` and of its last
 * created before `to`, up to seq `upTo` (an expression). Each is one step into the (org,
 * created_at) index, however long the history: an append stamps no record before the one it
 * follows (migration record_time_order), so the records in [from, to) are the seq range between
 * them. Without a bound, the first record or `upTo` itself (the chain numbers records from 1).
 */
function windowEnds(orgId: string, from: Date | null, to: Date | null, upTo: string) {
  const params: unknown[] = [orgId];
  const param = (value: Date) => `$${params.push(value)}::timestamptz`;
  const first = from
    ? `(SELECT r.seq FROM interaction_records r WHERE r.org_id = $1::uuid AND r.created_at >= ${param(from)}
         AND r.seq <= ${upTo} ORDER BY r.created_at, r.seq LIMIT 1)`
    : `(CASE WHEN ${upTo} > 0 THEN 1::bigint END)`;
  const last = to
    ? `(SELECT r.seq FROM interaction_records r WHERE r.org_id = $1::uuid AND r.created_at < ${param(to)}
         AND r.seq <= ${upTo} ORDER BY r.created_at DESC, r.seq DESC LIMIT 1)`
    : `(NULLIF(${upTo}, 0))`;
  return { first, last, params };
}

/**
 * The org's chain head and the seq range of its records created in [from, to), read in one
 * statement so the range never runs past the head it is reported with.
 */
export async function exportRange(sql: SqlDriver, orgId: string, from: Date | null, to: Date | null) {
  const ends = windowEnds(orgId, from, to, 'h.seq');
  const [range] = await sql.query<{
    head_seq: string;
    head_hash: string;
    first_seq: string | null;
    last_seq: string | null;
  }>(
    `SELECT h.seq::text AS head_seq, h.head_hash, ${ends.first}::text AS first_seq, ${ends.last}::text AS last_seq
     FROM record_chain_heads h WHERE h.org_id = $1::uuid`,
    ends.params,
  );
  return range as typeof range | undefined;
}

/**
 * The seq range of the org's records created in [from, to), null when none was; what a listing
 * by time reads through the indexes that end in seq rather than by sorting the window.
 */
export async function seqWindow(
  sql: SqlDriver,
  orgId: string,
  from: Date | null,
  to: Date | null,
): Promise<{ first: bigint; last: bigint } | null> {
  const head = '(SELECT h.seq FROM record_chain_heads h WHERE h.org_id = $1::uuid)';
  const ends = windowEnds(orgId, from, to, head);
  const [row] = await sql.query<{ first_seq: string | null; last_seq: string | null }>(
    `SELECT ${ends.first}::text AS first_seq, ${ends.last}::text AS last_seq`,
    ends.params,
  );
  const window = row?.first_seq && row.last_seq ? { first: BigInt(row.first_seq), last: BigInt(row.last_seq) } : null;
  return window && window.first <= window.last ? window : null;
}

/** One record of the org, or null. */
export function findRecord(prisma: PrismaClient, orgId: string, recordId: string): Promise<InteractionRecord | null> {
  return prisma.interactionRecord.findFirst({ where: { id: recordId, orgId } });
}

/** What the dashboards filter records by; an empty criterion matches every record. */
export interface RecordCriteria {
  agentId?: string | null;
  actionType?: string | null;
  tool?: string | null;
  status?: 'approved' | 'denied' | null;
  /** Records carrying this label: read through the partial index of labelled records. */
  label?: string | null;
  /** The seq range of the records created in a time window (seqWindow). */
  window?: { first: bigint; last: bigint };
}

/**
 * A page of the org's records that match, newest (highest seq) first: up to `take` of them, from
 * below `beforeSeq` (the next_cursor) when given. Every filter has an index that ends in seq, so a
 * page reads about `take` rows however long the history.
 */
export function recordPage(
  prisma: PrismaClient,
  orgId: string,
  criteria: RecordCriteria,
  page: { take: number; offset: number; beforeSeq?: bigint },
): Promise<InteractionRecord[]> {
  const where = recordWhere(orgId, criteria);
  return prisma.interactionRecord.findMany({
    where: page.beforeSeq === undefined ? where : { ...where, seq: { ...seqBounds(criteria), lt: page.beforeSeq } },
    orderBy: [{ seq: 'desc' }],
    take: page.take,
    skip: page.offset,
  });
}

/**
 * How many records match, counting no further than `bound + 1`; with no criterion, exactly at any
 * size (`fromHead`): the chain head's seq, since the chain numbers its records from 1 without gaps.
 */
export async function countRecords(
  prisma: PrismaClient,
  orgId: string,
  criteria: RecordCriteria,
  bound: number,
): Promise<{ count: number; fromHead: boolean }> {
  if (!Object.values(criteria).some(Boolean)) {
    const head = await prisma.recordChainHead.findUnique({ where: { orgId }, select: { seq: true } });
    return { count: Number(head?.seq ?? 0n), fromHead: true };
  }
  // In seq order, which every filter's index has (Prisma orders a bounded count by id otherwise,
  // and sorting every match by id is the scan the bound is there to avoid).
  const counted = await prisma.interactionRecord.count({
    where: recordWhere(orgId, criteria),
    orderBy: { seq: 'desc' },
    take: bound + 1,
  });
  return { count: counted, fromHead: false };
}

function recordWhere(orgId: string, criteria: RecordCriteria): Prisma.InteractionRecordWhereInput {
  const { agentId, actionType, tool, status, label } = criteria;
  return {
    orgId,
    ...(agentId ? { agentId } : {}),
    ...(actionType ? { actionType } : {}),
    ...(tool ? { tool } : {}),
    ...(status ? { status } : {}),
    ...(label ? { labels: { has: label } } : {}),
    // The window's seq range is the window (seqWindow). With created_at beside it, the planner
    // would rather read the window by time and sort all of it for a page's first rows.
    ...(criteria.window ? { seq: seqBounds(criteria) } : {}),
  };
}

/** The seq range a time window reads, when the criteria have one. */
const seqBounds = ({ window }: RecordCriteria) => (window ? { gte: window.first, lte: window.last } : {});

/** The hash of the org's record at `seq`, undefined when there is none. */
export async function recordHashAt(prisma: PrismaClient, orgId: string, seq: bigint): Promise<string | undefined> {
  const record = await prisma.interactionRecord.findUnique({
    where: { orgId_seq: { orgId, seq } },
    select: { recordHash: true },
  });
  return record?.recordHash;
}

/** A record as the export reads it: every column but its Merkle nodes, which the file does not carry. */
export type ExportedRecord = Omit<InteractionRecord, 'treeNodes'>;

/**
 * Up to `take` of the org's records with a seq in [first, last], in seq order: one page of the
 * export. Through the driver, not Prisma: each page Prisma read outlived two young-generation
 * collections, so a long export filled the old generation at the pace it was read
 * (docs/decisions/0064-exports-streamed-with-backpressure.md). The columns are named as Prisma's
 * InteractionRecord, so the export's lines are built as from any other read.
 */
export async function exportPage(
  sql: SqlDriver,
  orgId: string,
  first: bigint,
  last: bigint,
  take: number,
): Promise<ExportedRecord[]> {
  const rows = await sql.query<Omit<ExportedRecord, 'seq'> & { seq: string }>(
    `SELECT r.id, r.org_id AS "orgId", r.seq::text AS seq, r.svc_id AS "svcId", r.agent_id AS "agentId",
       r.action_type AS "actionType", r.tool, r.capability, r.params_hash AS "paramsHash", r.params, r.status,
       r.executed, r.reasons, r.result_hash AS "resultHash", r.approval_id AS "approvalId", r.policies, r.channel,
       r.connection, r.labels, r.original_result_hash AS "originalResultHash", r.redactions, r.confirmation, r.prev_hash AS "prevHash", r.record_hash AS "recordHash", r.signature,
       r.key_id AS "keyId", r.created_at AS "createdAt"
     FROM interaction_records r
     WHERE r.org_id = $1::uuid AND r.seq >= $2::bigint AND r.seq <= $3::bigint
     ORDER BY r.seq LIMIT $4::int`,
    [orgId, first.toString(), last.toString(), take],
    'export_page',
  );
  return rows.map((row) => ({ ...row, seq: BigInt(row.seq) }));
}
