import { builder } from '../../graphql/builder.js';
import { principalOf } from '../../graphql/context.js';
import { listType } from '../../graphql/list.js';
import { restRoute } from '../../http/rest-routes.js';

const RecordStatusEnum = builder.enumType('RecordStatus', { values: ['approved', 'denied'] as const });

const RecordAction = builder
  .objectRef<{ type: string; tool: string; params: unknown }>('RecordAction')
  .implement({
    fields: (t) => ({
      type: t.exposeString('type'),
      tool: t.exposeString('tool'),
      params: t.field({ type: 'JSON', nullable: true, description: 'Null when the org does not keep params.', resolve: (a) => a.params }),
    }),
  });

export const RecordRef = builder.prismaObject('InteractionRecord', {
  name: 'InteractionRecord',
  fields: (t) => ({
    record_id: t.exposeID('id'),
    org_id: t.exposeID('orgId'),
    seq: t.int({ description: 'Position in the org chain, from 1.', resolve: (r) => Number(r.seq) }),
    svc_id: t.exposeString('svcId'),
    agent_id: t.exposeString('agentId'),
    action: t.field({ type: RecordAction, resolve: (r) => ({ type: r.actionType, tool: r.tool, params: r.params ?? null }) }),
    capability: t.exposeString('capability'),
    params_hash: t.exposeString('paramsHash'),
    decision: t.string({ resolve: (r) => (r.status === 'approved' ? 'allow' : 'deny') }),
    status: t.expose('status', { type: RecordStatusEnum }),
    executed: t.exposeBoolean('executed'),
    reasons: t.field({ type: 'JSON', resolve: (r) => r.reasons }),
    result_hash: t.exposeString('resultHash', { nullable: true }),
    approval_id: t.exposeString('approvalId', { nullable: true }),
    prev_hash: t.exposeString('prevHash'),
    record_hash: t.exposeString('recordHash'),
    signature: t.exposeString('signature', { description: 'Ed25519 over record_hash, base64url; key in /.well-known/jwks.json.' }),
    key_id: t.exposeString('keyId'),
    created_at: t.expose('createdAt', { type: 'Timestamp' }),
  }),
});

const RecordList = listType('RecordList', RecordRef);

const RecordChecks = builder
  .objectRef<{ hash: boolean; signature: boolean; chain: boolean }>('RecordChecks')
  .implement({
    fields: (t) => ({ hash: t.exposeBoolean('hash'), signature: t.exposeBoolean('signature'), chain: t.exposeBoolean('chain') }),
  });

const RecordVerification = builder
  .objectRef<{ record_id: string; valid: boolean; checks: { hash: boolean; signature: boolean; chain: boolean } }>('RecordVerification')
  .implement({
    fields: (t) => ({
      record_id: t.exposeID('record_id'),
      valid: t.exposeBoolean('valid'),
      checks: t.field({ type: RecordChecks, resolve: (v) => v.checks }),
    }),
  });

const tag = 'Records';

builder.queryField('records', (t) =>
  t.field({
    type: RecordList,
    description: "Interaction records of the caller's organization, newest first.",
    args: {
      agent_id: t.arg.string(),
      action: t.arg.string({ description: '`type` or `type:tool`.' }),
      status: t.arg({ type: RecordStatusEnum }),
      from: t.arg({ type: 'Timestamp' }),
      to: t.arg({ type: 'Timestamp' }),
      limit: t.arg.int({ description: 'Default 100, at most 1000.' }),
      offset: t.arg.int(),
    },
    authScopes: { own: 'log:read' },
    resolve: (_, args, ctx) => ctx.services.records.list(principalOf(ctx).orgId, args),
  }),
);
restRoute('Query.records', { method: 'GET', path: '/records', tag, summary: 'List interaction records', auth: ['bearer', 'apiKey'] });

builder.queryField('record', (t) =>
  t.field({
    type: RecordRef,
    args: { record_id: t.arg.id({ required: true }) },
    authScopes: { own: 'log:read' },
    resolve: (_, args, ctx) => ctx.services.records.get(principalOf(ctx).orgId, String(args.record_id)),
  }),
);
restRoute('Query.record', { method: 'GET', path: '/records/:record_id', tag, summary: 'Read one record', auth: ['bearer', 'apiKey'] });

builder.queryField('verify_record', (t) =>
  t.field({
    type: RecordVerification,
    args: { record_id: t.arg.id({ required: true }) },
    authScopes: { own: 'log:read' },
    resolve: (_, args, ctx) => ctx.services.records.verify(principalOf(ctx).orgId, String(args.record_id)),
  }),
);
restRoute('Query.verify_record', {
  method: 'GET',
  path: '/records/:record_id/verify',
  tag,
  summary: 'Verify a record: hash, signature and link to the previous record',
  auth: ['bearer', 'apiKey'],
});
