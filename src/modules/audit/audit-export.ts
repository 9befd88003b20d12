import type { AuditLog } from '../../generated/prisma/client.js';

/**
 * The wire forms of an audit entry outside GraphQL: the JSONL line (the shape of the items of
 * GET /orgs/{org_id}/audit-logs) and the CSV row of the export.
 */

export interface AuditEntry {
  audit_id: string;
  org_id: string;
  actor: { type: string; id: string | null; label: string | null };
  action: string;
  target: { type: string; id: string };
  before: unknown;
  after: unknown;
  reason: string | null;
  request_id: string | null;
  created_at: string;
}

export function auditEntryOf(row: AuditLog): AuditEntry {
  return {
    audit_id: row.id,
    org_id: row.orgId,
    actor: { type: row.actorType, id: row.actorId, label: row.actorLabel },
    action: row.action,
    target: { type: row.targetType, id: row.targetId },
    before: row.before ?? null,
    after: row.after ?? null,
    reason: row.reason,
    request_id: row.requestId,
    created_at: row.createdAt.toISOString(),
  };
}

export const auditCsvColumns = [
  'audit_id',
  'org_id',
  'actor_type',
  'actor_id',
  'actor_label',
  'action',
  'target_type',
  'target_id',
  'before',
  'after',
  'reason',
  'request_id',
  'created_at',
] as const;

/**
 * RFC 4180: a field with a comma, a quote, CR or LF is quoted, quotes doubled; lines end in CRLF.
 * Null is the empty field; JSON values (before, after) are their JSON text. Values are written as
 * stored: nothing is prefixed to defuse spreadsheet formulas, since an audit export must be exact.
 */
export function csvField(value: string | null): string {
  if (value === null) return '';
  return /[",\r\n]/.test(value) ? `"${value.replace(/"/g, '""')}"` : value;
}

export const csvLine = (fields: readonly (string | null)[]): string => `${fields.map(csvField).join(',')}\r\n`;

export const auditCsvHeader = (): string => csvLine(auditCsvColumns);

export function auditCsvRow(row: AuditLog): string {
  const json = (value: unknown) => (value === null || value === undefined ? null : JSON.stringify(value));
  return csvLine([
    row.id,
    row.orgId,
    row.actorType,
    row.actorId,
    row.actorLabel,
    row.action,
    row.targetType,
    row.targetId,
    json(row.before),
    json(row.after),
    row.reason,
    row.requestId,
    row.createdAt.toISOString(),
  ]);
}
