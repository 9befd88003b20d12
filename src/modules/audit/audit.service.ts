import type { Deps } from '../../deps.js';
import {
  boundedTotal,
  cursorOf,
  encodeCursor,
  type HistoryPage,
  limitOffset,
  TOTAL_BOUND,
} from '../../lib/list-page.js';
import { FieldErrors } from '../../errors.js';
import type { AuditLog, Prisma } from '../../generated/prisma/client.js';
import { currentRequestId } from '../../lib/request-id.js';
import type { Actor, AuditEvent } from './audit-events.js';
import { timeOrderedId } from '../../lib/ids.js';
import {
  type AuditFilter,
  type AuditKey,
  auditEntries,
  countAuditEntries,
  insertAuditEntry,
  newestAuditKey,
} from './audit.store.js';

export type { AuditFilter } from './audit.store.js';

type Tx = Prisma.TransactionClient;

/** Sortable by time, unique without coordination: `aud_` + ms timestamp + random. */
export function auditId(now = Date.now()): string {
  return timeOrderedId('aud', now);
}

/**
 * Writes an audit entry with the transaction of the change it describes, so an entry exists
 * exactly when the change committed. It writes nothing else: a change to what the gateway caches
 * says so itself (`bumpConfigVersion`, src/lib/config-cache.ts) in the same transaction.
 */
export async function recordAudit(tx: Tx, orgId: string, actor: Actor, event: AuditEvent): Promise<void> {
  await insertAuditEntry(tx, {
    id: auditId(),
    orgId,
    actorType: actor.type,
    actorId: actor.id,
    actorLabel: actor.label,
    action: event.action,
    targetType: event.targetType,
    targetId: event.targetId,
    before: (event.before ?? undefined) as Prisma.InputJsonValue | undefined,
    after: (event.after ?? undefined) as Prisma.InputJsonValue | undefined,
    reason: event.reason,
    requestId: currentRequestId(),
  });
}

export interface AuditPage {
  limit?: number | null;
  offset?: number | null;
  /** A page's next_cursor: the entries after that page. */
  cursor?: string | null;
}

const AUDIT_CURSOR = 'audit';
/** An audit cursor holds the time and id of its page's last entry. */
function keyOfCursor([time, id, ...rest]: string[]): AuditKey | undefined {
  const createdAt = new Date(time ?? '');
  // Within what the database stores (a next_cursor's time is an entry's, so always is).
  const inRange = createdAt.getUTCFullYear() >= 1970 && createdAt.getUTCFullYear() <= 9999;
  if (rest.length || !inRange || !/^[\x21-\x7e]{1,200}$/.test(id ?? '')) return undefined;
  return { createdAt, id };
}

/** Entries per page of the export: as the records export's, and for the same reason (record.service.ts). */
export const AUDIT_EXPORT_BATCH = 100;

const actionPattern = /^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$/;
const targetTypePattern = /^[a-z][a-z0-9_]*$/;

function checkFilter(filter: AuditFilter, errors: FieldErrors): void {
  const { actor, action, target_type: targetType, target_id: targetId, from, to } = filter;
  if (actor != null && (actor.length < 1 || actor.length > 320)) errors.add('actor', 'must be 1 to 320 characters');
  if (action != null && !(action.length <= 100 && actionPattern.test(action))) {
    errors.add('action', 'must be an action such as manifest.approved, or a family such as manifest');
  }
  if (targetType != null && !(targetType.length <= 100 && targetTypePattern.test(targetType))) {
    errors.add('target_type', 'must be a target type such as manifest or api_key');
  }
  if (targetId != null && (targetId.length < 1 || targetId.length > 200))
    errors.add('target_id', 'must be 1 to 200 characters');
  if (from && to && from.getTime() >= to.getTime()) errors.add('to', 'must be after from');
}

export function createAuditService({ db }: Deps) {
  /** Newest first. */
  async function list(orgId: string, filter: AuditFilter & AuditPage): Promise<HistoryPage<AuditLog>> {
    const errors = new FieldErrors();
    const { limit, offset } = limitOffset(filter, { limit: 50, max: 1000 }, errors);
    const after = cursorOf(filter.cursor, offset, keyOfCursor, AUDIT_CURSOR, errors);
    checkFilter(filter, errors);
    errors.throwIfAny();
    // One more than the page: whether a next page exists, without counting.
    const [rows, counted] = await Promise.all([
      auditEntries(db.sql, orgId, filter, { order: 'desc', take: limit + 1, offset, after }),
      countAuditEntries(db.sql, orgId, filter, TOTAL_BOUND),
    ]);
    const items = rows.slice(0, limit);
    const last = items.at(-1);
    return {
      items,
      ...boundedTotal(counted),
      next_cursor:
        rows.length > limit && last ? encodeCursor(AUDIT_CURSOR, [last.createdAt.toISOString(), last.id]) : null,
    };
  }

  /**
   * Every matching entry, oldest first, up to the org's newest entry when the export began (read
   * now: entries written while the client reads are not in it), in pages read one at a time when
   * the previous one has been taken, with keyset pagination on (created_at, id): no transaction or
   * cursor stays open between pages, so a slow reader holds nothing in the database, and memory
   * holds one page. An entry of a change whose transaction was still open then (dated by its
   * start, so before that newest entry) is in the file if the pages had not passed its time: the
   * log has no order of commits, as the records' chain has. The filter is checked now (422 before
   * any byte is sent).
   */
  async function exportBatches(
    orgId: string,
    filter: AuditFilter,
    batchSize = AUDIT_EXPORT_BATCH,
  ): Promise<AsyncIterable<AuditLog[]>> {
    const errors = new FieldErrors();
    checkFilter(filter, errors);
    errors.throwIfAny();
    const upTo = await newestAuditKey(db.sql, orgId);
    return (async function* () {
      if (!upTo) return;
      let after: AuditKey | undefined;
      for (;;) {
        const page = { order: 'asc', take: batchSize, offset: 0, after, upTo } as const;
        const batch = await auditEntries(db.sql, orgId, filter, page);
        if (batch.length) yield batch;
        if (batch.length < batchSize) return;
        const last = batch[batch.length - 1];
        after = { createdAt: last.createdAt, id: last.id };
      }
    })();
  }

  return { list, exportBatches };
}

export type AuditService = ReturnType<typeof createAuditService>;
