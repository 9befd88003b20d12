import { builder } from '../../api/builder.js';
import { closedValues, graphqlOnly } from '../../api/closed-values.js';
import { cursorArgDescription, historyListType } from '../../api/list.js';
import { query } from '../../api/operations.js';
import { streamResponse, type StreamParam, type StreamRoute } from '../../api/stream-routes.js';
import { UserRef } from '../user/user.graphql.js';
import { ACTOR_TYPES, AUDIT_ACTIONS, AUDIT_TARGET_TYPES } from './audit-events.js';
import { auditCsvHeader, auditCsvRow, auditEntryOf } from './audit-export.js';
import type { AuditFilter } from './audit.service.js';

const AuditActor = builder
  .objectRef<{ type: string; id: string | null; label: string | null }>('AuditActor')
  .implement({
    description: 'Who made the change.',
    fields: (t) => ({
      type: t.exposeString('type', {
        description: '`user`, `api_key`, `oauth_grant` (an MCP client revoking its own grant) or `system`.',
        ...closedValues(ACTOR_TYPES),
      }),
      id: t.exposeString('id', {
        nullable: true,
        description: 'User id, API key id or grant id; null for the system.',
      }),
      label: t.exposeString('label', {
        nullable: true,
        description: 'Email of a user, key prefix of an API key, name of an OAuth client.',
      }),
    }),
  });

const AuditTarget = builder.objectRef<{ type: string; id: string }>('AuditTarget').implement({
  description: 'What was changed.',
  fields: (t) => ({
    type: t.exposeString('type', {
      description: 'e.g. `manifest`, `api_key`, `user`, `organization`.',
      ...closedValues(AUDIT_TARGET_TYPES),
    }),
    id: t.exposeString('id'),
  }),
});

export const AuditLogRef = builder.prismaObject('AuditLog', {
  name: 'AuditLogEntry',
  fields: (t) => ({
    audit_id: t.exposeID('id'),
    org_id: t.exposeID('orgId'),
    actor: t.field({ type: AuditActor, resolve: (a) => ({ type: a.actorType, id: a.actorId, label: a.actorLabel }) }),
    action: t.exposeString('action', { description: 'e.g. `manifest.approved`.', ...closedValues(AUDIT_ACTIONS) }),
    target: t.field({ type: AuditTarget, resolve: (a) => ({ type: a.targetType, id: a.targetId }) }),
    before: t.field({
      type: 'JSON',
      nullable: true,
      description: 'The changed fields before.',
      resolve: (a) => a.before,
    }),
    after: t.field({ type: 'JSON', nullable: true, description: 'The changed fields after.', resolve: (a) => a.after }),
    reason: t.exposeString('reason', { nullable: true }),
    request_id: t.exposeString('requestId', { nullable: true, description: 'The X-Request-Id of the change.' }),
    created_at: t.expose('createdAt', { type: 'Timestamp' }),
    actor_user: t.field({
      type: UserRef,
      nullable: true,
      extensions: graphqlOnly,
      description: 'The user who acted, when the actor is a user.',
      resolve: (a, _, ctx) =>
        a.actorType === 'user' && a.actorId ? ctx.loaders.userById.load({ orgId: a.orgId, id: a.actorId }) : null,
    }),
  }),
});

const AuditLogList = historyListType('AuditLogList', AuditLogRef);

const filterArgs = builder.args((t) => ({
  actor: t.string({ description: 'Actor id (user id, API key id) or label (email, key prefix).' }),
  action: t.string({ description: 'An action (`manifest.approved`) or a family (`manifest`).' }),
  target_type: t.string(),
  target_id: t.string(),
  from: t.field({ type: 'Timestamp', description: 'Inclusive.' }),
  to: t.field({ type: 'Timestamp', description: 'Exclusive.' }),
}));
const pageArgs = builder.args((t) => ({
  limit: t.int({ description: 'Default 50, at most 1000.' }),
  offset: t.int({ description: 'Default 0.' }),
  cursor: t.string({ description: cursorArgDescription }),
}));

const tag = 'Audit logs';

const auditLogsQuery = query('audit_logs', {
  field: (t) =>
    t.field({
      type: AuditLogList,
      description: 'Audit log of the organization, newest first.',
      args: { org_id: t.arg.id({ required: true }), ...filterArgs, ...pageArgs },
      authScopes: (_, args) => ({ org: { orgId: String(args.org_id), action: 'log:read' } }),
      resolve: (_, args, ctx) => ctx.services.audit.list(String(args.org_id), args),
    }),
  rest: {
    method: 'GET',
    path: '/orgs/:org_id/audit-logs',
    tag,
    summary: 'List audit log entries, newest first',
    auth: ['bearer', 'apiKey'],
  },
});

builder.prismaObjectField('Organization', 'audit_logs', (t) =>
  t.field({
    type: AuditLogList,
    extensions: graphqlOnly,
    args: { ...filterArgs, ...pageArgs },
    authScopes: (org) => ({ org: { orgId: org.id, action: 'log:read' } }),
    resolve: (org, args, ctx) => ctx.services.audit.list(org.id, args),
  }),
);

const filterParams: StreamParam[] = [
  { name: 'actor', type: 'string', description: 'Actor id (user id, API key id) or label (email, key prefix).' },
  { name: 'action', type: 'string', description: 'An action (`manifest.approved`) or a family (`manifest`).' },
  { name: 'target_type', type: 'string', description: 'e.g. `manifest`.' },
  { name: 'target_id', type: 'string', description: 'The id of the changed resource.' },
  { name: 'from', type: 'timestamp', description: 'Inclusive.' },
  { name: 'to', type: 'timestamp', description: 'Exclusive.' },
];

const exportAuditStream: StreamRoute = {
  operationId: 'export_audit_logs',
  method: 'GET',
  path: '/orgs/:org_id/audit-logs/export',
  tag,
  summary: 'Export the audit log (JSON Lines or CSV), streamed, oldest first',
  description:
    'Every entry matching the filters, oldest first, written while it is read from the database in batches. ' +
    'JSON Lines: one object per line, shaped like the items of GET /orgs/{org_id}/audit-logs. ' +
    'CSV (RFC 4180): a header row, then one row per entry; `before` and `after` as JSON text, null as an empty field.',
  auth: ['bearer', 'apiKey'],
  action: 'log:export',
  query: [{ name: 'format', type: 'string', values: ['jsonl', 'csv'], description: 'Default jsonl.' }, ...filterParams],
  media: {
    'application/x-ndjson': 'One JSON object per line (an AuditLogEntry), oldest first',
    'text/csv':
      'RFC 4180 with a header row: audit_id, org_id, actor_type, actor_id, actor_label, action, target_type, target_id, before, after, reason, request_id, created_at',
  },
  async handle(call) {
    const { format = 'jsonl', ...filter } = call.query as AuditFilter & { format?: 'jsonl' | 'csv' };
    const batches = await call.services.audit.exportBatches(call.orgId, filter);
    const stamp = new Date()
      .toISOString()
      .replace(/[-:]/g, '')
      .replace(/\.\d+Z$/, 'Z');
    const filename = `audit-logs-${call.orgId}-${stamp}.${format}`;
    if (format === 'csv') {
      const rows = async function* () {
        yield auditCsvHeader();
        for await (const batch of batches) yield batch.map(auditCsvRow).join('');
      };
      return streamResponse(call, rows(), 'text/csv; charset=utf-8; header=present', filename);
    }
    const lines = async function* () {
      for await (const batch of batches) yield batch.map((row) => `${JSON.stringify(auditEntryOf(row))}\n`).join('');
    };
    return streamResponse(call, lines(), 'application/x-ndjson; charset=utf-8', filename);
  },
};

/** The operations of this file, in the order the OpenAPI document lists their routes. */
export const auditOperations = [auditLogsQuery];

/** The routes that stream their answer. */
export const auditStreams = [exportAuditStream];
