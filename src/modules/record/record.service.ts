import { isDatabaseUnavailable } from '../../db/unavailable.js';
import type { Deps } from '../../deps.js';
import { keyBatcher, type Queued as QueuedItem } from '../../lib/key-batcher.js';
import {
  boundedTotal,
  cursorOf,
  encodeCursor,
  type HistoryPage,
  limitOffset,
  TOTAL_BOUND,
} from '../../lib/list-page.js';
import { FieldErrors, notFound } from '../../errors.js';
import type { InteractionRecord, Prisma } from '../../generated/prisma/client.js';
import type { SigningKey } from '../../lib/signing-keys.js';
import {
  GENESIS_HASH,
  recordHashOf,
  signRecordHash,
  verifyRecordSignature,
  type InteractionChannel,
  type RecordBody,
  type RecordedConnection,
  type RecordedConfirmation,
  type RecordedPolicy,
} from './record-chain.js';
import { MerkleFrontier, recordLeafHash } from './merkle.js';
import { createRecordLog } from './record-log.js';
import { RECORDS_EXPORT_FORMAT, signHeader, type ExportHeader, type ExportRecordLine } from './record-export.js';
import { randomId } from '../../lib/ids.js';
import {
  countRecords,
  existingRecordIds,
  type ExportedRecord,
  exportPage,
  exportRange,
  findRecord,
  appendIfHeadIs,
  type ChainHead,
  insertRecordsAndAdvanceHead,
  lockChainHead,
  readChainHead,
  recordHashAt,
  recordPage,
  seqWindow,
} from './record.store.js';
import { findUnstorable, MAX_JSON_DEPTH } from '../../lib/storable-input.js';
import { LABEL_RULE, labelPattern } from '../policy/policy-rules.js';
import { secondsSince } from '../../observability/telemetry.js';

/** What a record is about: the org, the agent and its action (params by hash). */
export interface RecordSubject {
  orgId: string;
  svcId: string;
  agentId: string;
  actionType: string;
  tool: string;
  capability: string;
  paramsHash: string;
  /** Null only for journal entries written before channels were recorded. */
  channel: InteractionChannel | null;
}

export interface NewRecord extends RecordSubject {
  params: Record<string, unknown> | undefined;
  decision: 'allow' | 'deny';
  executed: boolean;
  reasons: { code: string; message: string }[];
  resultHash: string | null;
  approvalId: string | null;
  policies: RecordedPolicy[];
  /** The OAuth connection the tool's upstream was called through; null for a tool without one. */
  connection: RecordConnection | null;
  /** The decision's labels, sorted and distinct; empty when none. */
  labels: readonly string[];
  /** After a redaction: the hash of the result the tool gave (`resultHash` is of the redacted one). */
  originalResultHash: string | null;
  /** What a redaction replaced, by kind; empty when none. */
  redactions: readonly { kind: string; count: number }[];
  /** The user's confirmation the call ran with (require_confirmation); null without one. */
  confirmation: RecordedConfirmation | null;
}

/**
 * An OAuth connection a call used (docs/decisions/0068-upstream-connections.md): its id, and its
 * user unless it is the org's.
 */
export interface RecordConnection {
  connectionId: string;
  userId: string | null;
}

/**
 * The connection as the record body signs it and the tables keep it: exactly these two fields,
 * whatever else the caller's object carries, so nothing more (a token) can ride along.
 */
export const recordedConnectionOf = ({ connectionId, userId }: RecordConnection): RecordedConnection => ({
  connection_id: connectionId,
  user_id: userId,
});

export interface RecordFilter {
  agent_id?: string | null;
  action?: string | null;
  status?: 'approved' | 'denied' | null;
  label?: string | null;
  from?: Date | null;
  to?: Date | null;
  limit?: number | null;
  offset?: number | null;
  /** A page's next_cursor: the records after that page. */
  cursor?: string | null;
}

const RECORDS_CURSOR = 'records';
const MAX_SEQ = 2n ** 63n - 1n;
/** A records cursor holds the seq of its page's last record. */
const seqOfCursor = ([seq, ...rest]: string[]): bigint | undefined =>
  rest.length === 0 && /^[1-9][0-9]{0,18}$/.test(seq ?? '') && BigInt(seq) <= MAX_SEQ ? BigInt(seq) : undefined;

export interface RecordExportFilter {
  /** Inclusive: the export starts at the first record created at or after it. */
  from?: Date | null;
  /** Exclusive: the export ends at the last record created before it. */
  to?: Date | null;
}

/**
 * Records per page of the export. Pages of 1,000 (1.3 MB of text with 600-byte params) grew the
 * young generation to its largest and the process by 140 MB over a 76 MB export; pages of 100
 * by 2–11 MB (docs/decisions/0064-exports-streamed-with-backpressure.md).
 */
export const RECORD_EXPORT_BATCH = 100;

/** A record as a line of the export: the hashed body, the params if kept, hash and signature. */
export function exportLineOf(record: ExportedRecord): ExportRecordLine {
  return {
    type: 'record',
    body: bodyOf(record),
    params: record.params ?? null,
    record_hash: record.recordHash,
    signature: record.signature,
  };
}

export const newInteractionId = () => randomId('int');

/** The canonical body of a stored record, exactly as it was hashed when appended. */
export function bodyOf(record: ExportedRecord): RecordBody {
  return {
    record_id: record.id,
    org_id: record.orgId,
    seq: Number(record.seq),
    svc_id: record.svcId,
    agent_id: record.agentId,
    action: { type: record.actionType, tool: record.tool },
    capability: record.capability,
    params_hash: record.paramsHash,
    decision: record.status === 'approved' ? 'allow' : 'deny',
    status: record.status,
    executed: record.executed,
    reasons: record.reasons as RecordBody['reasons'],
    result_hash: record.resultHash,
    approval_id: record.approvalId,
    ...(record.policies === null ? {} : { policies: record.policies as unknown as RecordedPolicy[] }),
    ...(record.channel === null ? {} : { channel: record.channel as InteractionChannel }),
    ...(record.connection === null ? {} : { connection: record.connection as unknown as RecordedConnection }),
    ...(record.labels?.length ? { labels: record.labels } : {}),
    ...(record.originalResultHash === null
      ? {}
      : {
          original_result_hash: record.originalResultHash,
          redactions: record.redactions as unknown as RecordBody['redactions'],
        }),
    ...(record.confirmation === null ? {} : { confirmation: record.confirmation as unknown as RecordedConfirmation }),
    prev_hash: record.prevHash,
    created_at: record.createdAt.toISOString(),
    key_id: record.keyId,
  };
}

/** Records signed on a head, and the head after them. */
interface SignedBatch {
  records: InteractionRecord[];
  head: ChainHead;
}

export function createRecordService(deps: Deps) {
  const { db, keys, telemetry } = deps;
  interface Pending {
    id: string;
    entry: NewRecord;
    storeParams: boolean;
  }
  type Queued = QueuedItem<Pending, InteractionRecord>;
  const MAX_BATCH = 200;

  /**
   * Appends to the org's chain. Appends of one org are queued in this process and written in
   * batches, each batch in one transaction holding the lock on the org's chain head: the chain never
   * forks (also across processes, which queue on that row lock), and a burst of executes costs one
   * lock round per batch instead of one per record.
   */
  function append(id: string, entry: NewRecord, storeParams: boolean): Promise<InteractionRecord> {
    const started = performance.now();
    return telemetry.withSpan(
      'record append',
      { attributes: { 'agw.interaction_id': id, 'agw.org_id': entry.orgId, 'agw.decision': entry.decision } },
      async (span) => {
        const record = await enqueue(id, entry, storeParams);
        telemetry.recordAppended(secondsSince(started));
        if (span.isRecording()) span.setAttribute('agw.record.seq', Number(record.seq));
        return record;
      },
    );
  }

  function enqueue(id: string, entry: NewRecord, storeParams: boolean): Promise<InteractionRecord> {
    // What the database could not store fails this append alone, before it joins a batch. The
    // edge refuses such input (src/lib/storable-input.ts); this guards the chain against a path
    // that forgot to.
    const unstorable = findUnstorable(
      { id, ...entry, params: storeParams ? entry.params : undefined },
      'record',
      MAX_JSON_DEPTH + 1,
    );
    if (unstorable)
      return Promise.reject(new Error(`record ${id} cannot be stored: ${unstorable.field} ${unstorable.message}`));
    return appendQueued(entry.orgId, { id, entry, storeParams });
  }

  const appendQueued = keyBatcher<Pending, InteractionRecord>(async (orgId, batch) => {
    try {
      await write(orgId, batch);
    } catch (error) {
      // Unreachable, the database fails every record alike; and a batch whose commit was cut off
      // may have been written, so appending its records again would fail on their ids.
      if (batch.length === 1 || isDatabaseUnavailable(error)) throw error;
      // One failing record must not fail the others of its batch: each is tried on its own.
      for (const queued of batch) await write(orgId, [queued]).catch(queued.reject);
    }
  }, MAX_BATCH);

  /**
   * The head of each org's chain as this process last appended to it: the next batch is signed on
   * top of it and appended in one statement that holds only if no other process moved the head in
   * between. A process that appends alone to an org pays one statement per batch; when the head
   * moved, it reads it and signs again, and after OPTIMISTIC_ATTEMPTS it appends under the head's
   * row lock (four statements, but never refused).
   */
  const knownHeads = new Map<string, ChainHead>();
  const OPTIMISTIC_ATTEMPTS = 2;

  async function write(orgId: string, batch: Queued[]): Promise<void> {
    // Outside any transaction: on PGlite a second query path would wait for the transaction's connection.
    const key = await keys.activeKey('record');
    const items = batch.map((queued) => queued.item);
    const { records, head } =
      (await appendOptimistically(orgId, items, key)) ?? (await appendLocked(orgId, items, key));
    if (knownHeads.size >= 10_000) knownHeads.clear();
    knownHeads.set(orgId, head);
    batch.forEach((queued, i) => queued.resolve(records[i]));
  }

  /** The batch appended on the head as last known, or undefined when other writers kept moving it. */
  async function appendOptimistically(
    orgId: string,
    items: Pending[],
    key: SigningKey,
  ): Promise<SignedBatch | undefined> {
    for (let attempt = 0; attempt < OPTIMISTIC_ATTEMPTS; attempt++) {
      const head = knownHeads.get(orgId) ?? (await readChainHead(db.sql, orgId));
      const signed = signedBatch(orgId, head, items, key);
      knownHeads.delete(orgId);
      if (await appendIfHeadIs(db.sql, orgId, head, signed.records, signed.head.frontier)) return signed;
    }
    return undefined;
  }

  /** The batch appended under the lock of the org's chain head, whoever else is appending. */
  function appendLocked(orgId: string, items: Pending[], key: SigningKey): Promise<SignedBatch> {
    return db.sql.transaction(async (tx) => {
      const head = await lockChainHead(tx, orgId);
      const signed = signedBatch(orgId, head, items, key);
      await insertRecordsAndAdvanceHead(tx, orgId, signed.records, signed.head.frontier);
      return signed;
    });
  }

  /** Which of these interaction ids already have their record (a record's id is its interaction id). */
  async function existing(ids: readonly string[]): Promise<Set<string>> {
    return ids.length ? existingRecordIds(db.sql, ids) : new Set();
  }

  /**
   * The batch's records, chained from `head`, signed, each with the tree nodes its leaf completes;
   * and the head after them. The statements append them as they are.
   */
  function signedBatch(orgId: string, head: ChainHead, batch: Pending[], key: SigningKey): SignedBatch {
    let seq = head.seq;
    let prevHash = head.hash;
    // Never before the record it follows, whichever process's clock stamped that one: seq order is
    // time order, which a from/to window of the listings needs to be one seq range.
    let createdAt = head.lastCreatedAt ?? new Date(0);
    const tree = MerkleFrontier.of(head.seq, head.frontier);
    const records: InteractionRecord[] = [];
    for (const { id, entry, storeParams } of batch) {
      seq += 1n;
      createdAt = new Date(Math.max(Date.now(), createdAt.getTime()));
      const connection = entry.connection === null ? null : recordedConnectionOf(entry.connection);
      const body: RecordBody = {
        record_id: id,
        org_id: orgId,
        seq: Number(seq),
        svc_id: entry.svcId,
        agent_id: entry.agentId,
        action: { type: entry.actionType, tool: entry.tool },
        capability: entry.capability,
        params_hash: entry.paramsHash,
        decision: entry.decision,
        status: entry.decision === 'allow' ? 'approved' : 'denied',
        executed: entry.executed,
        reasons: entry.reasons.map(({ code, message }) => ({ code, message })),
        result_hash: entry.resultHash,
        approval_id: entry.approvalId,
        policies: entry.policies,
        ...(entry.channel === null ? {} : { channel: entry.channel }),
        // Absent, not null, without a connection: records of other tools hash as they always did.
        ...(connection === null ? {} : { connection }),
        // Absent without labels, as on every record from before labels: those hash as they did.
        ...(entry.labels.length ? { labels: [...entry.labels] } : {}),
        // Only after a redaction, likewise.
        ...(entry.originalResultHash === null
          ? {}
          : { original_result_hash: entry.originalResultHash, redactions: [...entry.redactions] }),
        ...(entry.confirmation === null ? {} : { confirmation: entry.confirmation }),
        prev_hash: prevHash,
        created_at: createdAt.toISOString(),
        key_id: key.kid,
      };
      const recordHash = recordHashOf(body);
      const completed = tree.append(recordLeafHash(recordHash));
      records.push({
        id,
        orgId,
        seq,
        svcId: entry.svcId,
        agentId: entry.agentId,
        actionType: entry.actionType,
        tool: entry.tool,
        capability: entry.capability,
        paramsHash: entry.paramsHash,
        params: storeParams && entry.params ? (entry.params as Prisma.JsonValue) : null,
        status: body.status,
        executed: entry.executed,
        reasons: body.reasons as Prisma.JsonValue,
        resultHash: entry.resultHash,
        approvalId: entry.approvalId,
        policies: entry.policies as unknown as Prisma.JsonValue,
        channel: entry.channel,
        connection: connection as unknown as Prisma.JsonValue,
        labels: [...entry.labels],
        originalResultHash: entry.originalResultHash,
        redactions: entry.originalResultHash === null ? null : (entry.redactions as unknown as Prisma.JsonValue),
        confirmation: entry.confirmation as unknown as Prisma.JsonValue,
        prevHash,
        recordHash,
        signature: signRecordHash(recordHash, key.privateKey),
        treeNodes: completed.length ? Buffer.concat(completed) : null,
        keyId: key.kid,
        createdAt,
      });
      prevHash = recordHash;
    }
    return { records, head: { seq, hash: prevHash, frontier: tree.packed(), lastCreatedAt: createdAt } };
  }

  async function get(orgId: string, recordId: string) {
    const record = await findRecord(db.prisma, orgId, recordId);
    if (!record) throw notFound('Record');
    return record;
  }

  async function list(orgId: string, filter: RecordFilter): Promise<HistoryPage<InteractionRecord>> {
    const errors = new FieldErrors();
    const { limit, offset } = limitOffset(filter, { limit: 100, max: 1000 }, errors);
    const beforeSeq = cursorOf(filter.cursor, offset, seqOfCursor, RECORDS_CURSOR, errors);
    if (filter.label != null && !labelPattern.test(filter.label)) errors.add('label', LABEL_RULE);
    errors.throwIfAny();
    const [type, tool] = filter.action?.includes(':') ? filter.action.split(':', 2) : [filter.action, undefined];
    const timed = Boolean(filter.from || filter.to);
    const window = timed ? await seqWindow(db.sql, orgId, filter.from ?? null, filter.to ?? null) : undefined;
    if (window === null) return { items: [], total: 0, total_exact: true, next_cursor: null };
    const criteria = {
      agentId: filter.agent_id,
      actionType: type,
      tool,
      status: filter.status,
      label: filter.label,
      window,
    };
    // One more than the page: whether a next page exists, without counting.
    const [rows, counted] = await Promise.all([
      recordPage(db.prisma, orgId, criteria, { take: limit + 1, offset, beforeSeq }),
      countRecords(db.prisma, orgId, criteria, TOTAL_BOUND),
    ]);
    const items = rows.slice(0, limit);
    const last = items.at(-1);
    return {
      items,
      ...(counted.fromHead ? { total: counted.count, total_exact: true } : boundedTotal(counted.count)),
      next_cursor: rows.length > limit && last ? encodeCursor(RECORDS_CURSOR, [last.seq.toString()]) : null,
    };
  }

  /** Recomputes the hash, checks the signature against the signing key and the link to the previous record. */
  async function verify(orgId: string, recordId: string) {
    const record = await get(orgId, recordId);
    const hash = recordHashOf(bodyOf(record)) === record.recordHash;
    const key = await keys.byId(record.keyId);
    const signature = Boolean(
      key && key.purpose === 'record' && verifyRecordSignature(record.recordHash, record.signature, key.publicKey),
    );
    const chain =
      record.seq === 1n
        ? record.prevHash === GENESIS_HASH
        : (await recordHashAt(db.prisma, orgId, record.seq - 1n)) === record.prevHash;
    return { record_id: record.id, valid: hash && signature && chain, checks: { hash, signature, chain } };
  }

  /**
   * The records export, taken at one point of the chain: the head is read in the same statement
   * as the range, and only records up to that head are exported (records are append-only, so
   * later reads of seq ≤ head see exactly them). The range is contiguous in seq, from the first
   * record created at or after `from` to the last created before `to`, so the file verifies link
   * by link, and its count is the width of the range: counting the rows read every record of the
   * export before its first byte. The header carries the org's latest signed checkpoint (signed
   * first when one is due) and what rebuilds its root from the file's records up to its size.
   * Pages are read one at a time, when the previous one has been taken, with keyset pagination on
   * seq; no transaction stays open while the client reads.
   */
  async function exportRecords(
    orgId: string,
    filter: RecordExportFilter,
  ): Promise<{ header: ExportHeader; batches: AsyncIterable<ExportedRecord[]> }> {
    const errors = new FieldErrors();
    if (filter.from && filter.to && filter.from.getTime() >= filter.to.getTime())
      errors.add('to', 'must be after from');
    errors.throwIfAny();
    const key = await keys.activeKey('record');
    const jwks = await keys.jwks(['record']);
    // Signed first (when one is due), so that the checkpoint is at most the head the range reads.
    const checkpoint = await log.publish(orgId);
    const range = await exportRange(db.sql, orgId, filter.from ?? null, filter.to ?? null);
    const head = { seq: Number(range?.head_seq ?? 0), head_hash: range?.head_hash ?? GENESIS_HASH };
    let first = range?.first_seq ? BigInt(range.first_seq) : null;
    let last = range?.last_seq ? BigInt(range.last_seq) : null;
    if (first === null || last === null || first > last) first = last = null;
    const coverage = checkpoint
      ? await log.exportCoverage(orgId, checkpoint, first === null ? null : { first, last: last! })
      : null;
    const header = signHeader(
      {
        type: 'header',
        format: RECORDS_EXPORT_FORMAT,
        org_id: orgId,
        from: filter.from?.toISOString() ?? null,
        to: filter.to?.toISOString() ?? null,
        // The chain numbers an org's records from 1 without a gap.
        count: first === null ? 0 : Number(last! - first + 1n),
        first_seq: first === null ? null : Number(first),
        last_seq: last === null ? null : Number(last),
        exported_at: new Date().toISOString(),
        chain_head: head,
        jwks,
        checkpoint: coverage,
        key_id: key.kid,
      },
      key.privateKey,
    );
    async function* batches() {
      if (first === null || last === null) return;
      let next = first;
      while (next <= last) {
        const batch = await exportPage(db.sql, orgId, next, last, RECORD_EXPORT_BATCH);
        if (!batch.length) return;
        next = batch[batch.length - 1].seq + 1n;
        yield batch;
      }
    }
    return { header, batches: batches() };
  }

  /** Checkpoints and proofs of the org's record tree. */
  const log = createRecordLog(deps, get);

  return { append, existing, get, list, verify, exportRecords, log };
}

export type RecordService = ReturnType<typeof createRecordService>;
