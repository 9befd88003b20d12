import type { SqlDriver } from '../../db/sql.js';
import type { AuditLog, Prisma } from '../../generated/prisma/client.js';

/** The audit module's statements: appending entries and reading them back by filter. */

type Tx = Prisma.TransactionClient;

export interface AuditFilter {
  /** An actor id (user id, API key id) or label (email, whatever its case; key prefix). */
  actor?: string | null;
  /** `manifest.approved` exactly, or a family: `manifest` matches every `manifest.…` action. */
  action?: string | null;
  target_type?: string | null;
  target_id?: string | null;
  /** Inclusive. */
  from?: Date | null;
  /** Exclusive. */
  to?: Date | null;
}

/** Appends an entry in the transaction of the change it describes. */
export async function insertAuditEntry(tx: Tx, entry: Prisma.AuditLogUncheckedCreateInput): Promise<void> {
  await tx.auditLog.create({ data: entry });
}

/** The columns of an entry, named as Prisma's AuditLog. */
const entryColumns = `id, org_id AS "orgId", actor_type AS "actorType", actor_id AS "actorId",
  actor_label AS "actorLabel", action, target_type AS "targetType", target_id AS "targetId", before, after,
  reason, request_id AS "requestId", created_at AS "createdAt"`;

/** Where an entry of the listing's order comes after `after` (newest first: older; oldest first: newer). */
export interface AuditKey {
  createdAt: Date;
  id: string;
}

/**
 * The statement's conditions, each of which an index begins with (see the migration
 * history_indexes), and their parameters. An actor is matched by id or label: one branch per way,
 * each read in index order, since no single index orders both.
 */
function conditionsOf(orgId: string, filter: AuditFilter) {
  const values: unknown[] = [orgId];
  const param = (value: unknown) => {
    values.push(value);
    return `$${values.length}`;
  };
  const { actor, action, target_type: targetType, target_id: targetId, from, to } = filter;
  const shared = ['org_id = $1::uuid'];
  if (action?.includes('.')) shared.push(`action = ${param(action)}`);
  // Every action is `family.name` (audit-events.ts), so its family is what precedes the first dot.
  else if (action) shared.push(`split_part(action, '.', 1) = ${param(action)}`);
  if (targetType) shared.push(`target_type = ${param(targetType)}`);
  if (targetId) shared.push(`target_id = ${param(targetId)}`);
  if (from) shared.push(`created_at >= ${param(from)}`);
  if (to) shared.push(`created_at < ${param(to)}`);
  // Emails are stored lower-cased, so a label also matches in lower case.
  const branches: string[][] = [];
  if (actor) {
    const id = param(actor);
    branches.push([`actor_id = ${id}`]);
    for (const label of new Set([actor, actor.toLowerCase()]))
      branches.push([`actor_label = ${param(label)}`, `actor_id IS DISTINCT FROM ${id}`]);
  } else branches.push([]);
  return { values, param, branches: branches.map((own) => [...shared, ...own].join(' AND ')) };
}

/**
 * Up to `take` of the org's matching entries after `offset` of them, newest first (`desc`) or
 * oldest first (`asc`), from after `after` (keyset pagination) when given, and none after `upTo`
 * (the newest entry when an export began) when given.
 */
export async function auditEntries(
  sql: SqlDriver,
  orgId: string,
  filter: AuditFilter,
  page: { order: 'asc' | 'desc'; take: number; offset: number; after?: AuditKey; upTo?: AuditKey },
): Promise<AuditLog[]> {
  const { values, param, branches } = conditionsOf(orgId, filter);
  const order = `ORDER BY created_at ${page.order}, id ${page.order}`;
  const keyOf = (key: AuditKey) => `(${param(key.createdAt)}::timestamptz, ${param(key.id)}::text)`;
  const after = page.after ? ` AND (created_at, id) ${page.order === 'desc' ? '<' : '>'} ${keyOf(page.after)}` : '';
  const keyset = page.upTo ? `${after} AND (created_at, id) <= ${keyOf(page.upTo)}` : after;
  const limit = param(page.take);
  const offset = param(page.offset);
  if (branches.length === 1)
    return sql.query<AuditLog>(
      `SELECT ${entryColumns} FROM audit_logs WHERE ${branches[0]}${keyset} ${order} LIMIT ${limit} OFFSET ${offset}`,
      values,
    );
  const union = branches
    .map(
      (where) =>
        `(SELECT * FROM audit_logs WHERE ${where}${keyset} ${order} LIMIT ${limit}::bigint + ${offset}::bigint)`,
    )
    .join(' UNION ALL ');
  return sql.query<AuditLog>(
    `SELECT ${entryColumns} FROM (${union}) AS entries ${order} LIMIT ${limit} OFFSET ${offset}`,
    values,
  );
}

/** The key of the org's newest entry (whatever a filter would match), undefined before its first. */
export async function newestAuditKey(sql: SqlDriver, orgId: string): Promise<AuditKey | undefined> {
  const [row] = await sql.query<AuditKey>(
    `SELECT created_at AS "createdAt", id FROM audit_logs WHERE org_id = $1::uuid
     ORDER BY created_at DESC, id DESC LIMIT 1`,
    [orgId],
  );
  return row;
}

/** How many entries match, counting no further than `bound + 1`. */
export async function countAuditEntries(
  sql: SqlDriver,
  orgId: string,
  filter: AuditFilter,
  bound: number,
): Promise<number> {
  const { values, param, branches } = conditionsOf(orgId, filter);
  const limit = param(bound + 1);
  const union = branches.map((where) => `(SELECT 1 FROM audit_logs WHERE ${where} LIMIT ${limit})`).join(' UNION ALL ');
  const [row] = await sql.query<{ count: number }>(`SELECT count(*)::int AS count FROM (${union}) AS matches`, values);
  return row.count;
}
