import type { Approval } from '../../generated/prisma/client.js';
import { builder } from '../../api/builder.js';
import { ManifestStatus } from '../../generated/prisma/enums.js';
import { closedValues, graphqlOnly } from '../../api/closed-values.js';
import { REASON_CODES } from '../gateway/decision.js';
import { principalOf } from '../../api/context.js';
import type { RestRoute } from '../../api/rest-routes.js';
import { mutation, query } from '../../api/operations.js';
import { documentOf } from '../manifest/manifest.service.js';
import { ManifestRef } from '../manifest/manifest.graphql.js';
import { UserRef } from '../user/user.graphql.js';

const statuses = ['pending', 'approved', 'denied', 'expired', 'consumed'] as const;
const ApprovalStatusEnum = builder.enumType('ApprovalStatus', {
  values: statuses,
  description: 'pending → approved → consumed (used once), pending → denied, pending or approved → expired.',
});

const ApprovalAction = builder.objectRef<{ type: string; tool: string; params: unknown }>('ApprovalAction').implement({
  fields: (t) => ({
    type: t.exposeString('type'),
    tool: t.exposeString('tool'),
    params: t.field({ type: 'JSON', resolve: (a) => a.params ?? {} }),
  }),
});

const ApprovalReason = builder.objectRef<{ code: string; message: string }>('ApprovalReason').implement({
  fields: (t) => ({ code: t.exposeString('code', closedValues(REASON_CODES)), message: t.exposeString('message') }),
});

const ApprovalAgent = builder.objectRef<{ svc_id: string; agent_id: string; name: string }>('ApprovalAgent').implement({
  fields: (t) => ({
    svc_id: t.exposeString('svc_id'),
    agent_id: t.exposeString('agent_id'),
    name: t.exposeString('name', { description: "The agent's name in the manifest that asked." }),
  }),
});

const ApprovalManifestVersion = builder
  .objectRef<{ manifest_id: string; agent_version: string; manifest_hash: string; status: string }>(
    'ApprovalManifestVersion',
  )
  .implement({
    description: 'The manifest the agent ran under when it asked.',
    fields: (t) => ({
      manifest_id: t.exposeID('manifest_id'),
      agent_version: t.exposeString('agent_version'),
      manifest_hash: t.exposeString('manifest_hash'),
      status: t.exposeString('status', {
        description: 'The status of that manifest now.',
        ...closedValues(Object.values(ManifestStatus)),
      }),
    }),
  });

export const ApprovalRef = builder.prismaObject('Approval', {
  fields: (t) => ({
    approval_id: t.exposeID('id'),
    status: t.expose('status', { type: ApprovalStatusEnum }),
    svc_id: t.exposeString('svcId'),
    agent_id: t.exposeString('agentId'),
    capability: t.exposeString('capability'),
    action: t.field({
      type: ApprovalAction,
      resolve: (a) => a.action as { type: string; tool: string; params: unknown },
    }),
    action_hash: t.exposeString('actionHash', { description: 'SHA-256 of the canonical {svc_id, agent_id, action}.' }),
    reasons: t.field({
      type: [ApprovalReason],
      description: 'Why a human is needed (the capability is in the manifest’s require_human_approval).',
      resolve: (a) => a.reasons as { code: string; message: string }[],
    }),
    agent: t.field({
      type: ApprovalAgent,
      select: { manifest: true },
      resolve: (a) => ({ svc_id: a.svcId, agent_id: a.agentId, name: documentOf(a.manifest).agent.name }),
    }),
    manifest: t.field({
      type: ApprovalManifestVersion,
      select: { manifest: true },
      resolve: ({ manifest }) => ({
        manifest_id: manifest.id,
        agent_version: documentOf(manifest).agent.version,
        manifest_hash: manifest.manifestHash,
        status: manifest.status,
      }),
    }),
    requested_by: t.exposeString('requestedBy', {
      description: 'The API key id, OAuth grant id (an MCP client) or operator email of the asking call.',
    }),
    requested_at: t.expose('requestedAt', { type: 'Timestamp' }),
    expires_at: t.expose('expiresAt', { type: 'Timestamp' }),
    decided_by: t.exposeString('decidedBy', {
      nullable: true,
      description: 'Email of the deciding user, or the deciding API key id.',
    }),
    decided_at: t.expose('decidedAt', { type: 'Timestamp', nullable: true }),
    notes: t.exposeString('notes', { nullable: true }),
    reason: t.exposeString('reason', { nullable: true, description: 'Why it was denied.' }),
    consumed_at: t.expose('consumedAt', { type: 'Timestamp', nullable: true }),
    manifest_detail: t.relation('manifest', { type: ManifestRef, extensions: graphqlOnly }),
    decided_by_user: t.relation('decider', { type: UserRef, nullable: true, extensions: graphqlOnly }),
  }),
});

const ApprovalList = builder
  .objectRef<{ items: Approval[]; total: number; pending_count: number }>('ApprovalList')
  .implement({
    fields: (t) => ({
      items: t.field({ type: [ApprovalRef], resolve: (page) => page.items }),
      total: t.exposeInt('total', { description: 'Approvals matching the filters.' }),
      pending_count: t.exposeInt('pending_count', {
        description: 'Pending approvals of the org (visible to the caller), whatever the filters.',
      }),
    }),
  });

/** What the asking agent sees while it waits. */
const ApprovalPoll = builder.prismaObject('Approval', {
  variant: 'ApprovalStatusForAgent',
  fields: (t) => ({
    approval_id: t.exposeID('id'),
    status: t.expose('status', { type: ApprovalStatusEnum }),
    svc_id: t.exposeString('svcId'),
    action_hash: t.exposeString('actionHash'),
    expires_at: t.expose('expiresAt', { type: 'Timestamp' }),
    decided_at: t.expose('decidedAt', { type: 'Timestamp', nullable: true }),
    reason: t.exposeString('reason', { nullable: true, description: 'Why it was denied.' }),
    notes: t.exposeString('notes', { nullable: true }),
  }),
});

const tag = 'Approvals';
const approvalsPath = '/orgs/:org_id/approvals';
const bearerOrKey: RestRoute['auth'] = ['bearer', 'apiKey'];

const filterArgs = builder.args((t) => ({
  status: t.field({ type: ApprovalStatusEnum }),
  svc_id: t.string(),
  limit: t.int({ description: 'Default 50, at most 200.' }),
  offset: t.int({ description: 'Default 0.' }),
}));

const approvalsQuery = query('approvals', {
  field: (t) =>
    t.field({
      type: ApprovalList,
      description: 'Approvals of the organization, newest first.',
      args: { org_id: t.arg.id({ required: true }), ...filterArgs },
      authScopes: (_, args) => ({ org: { orgId: String(args.org_id), action: 'approval:read' } }),
      resolve: (_, args, ctx) => ctx.services.approvals.list(String(args.org_id), args, principalOf(ctx)),
    }),
  rest: { method: 'GET', path: approvalsPath, tag, summary: 'List approvals', auth: bearerOrKey },
});

builder.prismaObjectField('Organization', 'approvals', (t) =>
  t.field({
    type: ApprovalList,
    extensions: graphqlOnly,
    args: filterArgs,
    authScopes: (org) => ({ org: { orgId: org.id, action: 'approval:read' } }),
    resolve: (org, args, ctx) => ctx.services.approvals.list(org.id, args, principalOf(ctx)),
  }),
);

const approvalQuery = query('approval', {
  field: (t) =>
    t.prismaField({
      type: ApprovalRef,
      description: 'One approval with its action, the agent, the manifest it ran under and why it needed a human.',
      args: { org_id: t.arg.id({ required: true }), approval_id: t.arg.id({ required: true }) },
      authScopes: (_, args) => ({ org: { orgId: String(args.org_id), action: 'approval:read' } }),
      resolve: (query, _, args, ctx) =>
        ctx.services.approvals.get(String(args.org_id), String(args.approval_id), principalOf(ctx), query),
    }),
  rest: {
    method: 'GET',
    path: `${approvalsPath}/:approval_id`,
    tag,
    summary: 'Read one approval',
    auth: bearerOrKey,
  },
});

const gatewayApprovalQuery = query('gateway_approval', {
  field: (t) =>
    t.prismaField({
      type: ApprovalPoll,
      description:
        'The asking agent polls its approval with its API key; then re-sends the identical action with `approval_id`.',
      args: { approval_id: t.arg.id({ required: true }) },
      authScopes: { own: 'approval:poll' },
      resolve: (query, _, args, ctx) => {
        const principal = principalOf(ctx);
        return ctx.services.approvals.get(principal.orgId, String(args.approval_id), principal, query);
      },
    }),
  rest: {
    method: 'GET',
    path: '/gateway/approvals/:approval_id',
    tag: 'Gateway',
    summary: 'Poll an approval the agent asked for',
    auth: ['apiKey'],
  },
});

const approveApprovalMutation = mutation('approve_approval', {
  field: (t) =>
    t.prismaField({
      type: ApprovalRef,
      description: 'Approve once; the agent may then run the identical action once, until the approval expires.',
      args: { org_id: t.arg.id({ required: true }), approval_id: t.arg.id({ required: true }), notes: t.arg.string() },
      authScopes: (_, args) => ({ org: { orgId: String(args.org_id), action: 'approval:decide' } }),
      resolve: (query, _, args, ctx) =>
        ctx.services.approvals.decide(
          String(args.org_id),
          String(args.approval_id),
          principalOf(ctx),
          'approved',
          { notes: args.notes },
          query,
        ),
    }),
  rest: {
    extraErrors: ['409'],
    method: 'POST',
    path: `${approvalsPath}/:approval_id/approve`,
    tag,
    summary: 'Approve a pending approval',
    auth: bearerOrKey,
  },
});

const denyApprovalMutation = mutation('deny_approval', {
  field: (t) =>
    t.prismaField({
      type: ApprovalRef,
      description: 'Deny once, with a reason the agent sees.',
      args: {
        org_id: t.arg.id({ required: true }),
        approval_id: t.arg.id({ required: true }),
        reason: t.arg.string({ required: true }),
        notes: t.arg.string(),
      },
      authScopes: (_, args) => ({ org: { orgId: String(args.org_id), action: 'approval:decide' } }),
      resolve: (query, _, args, ctx) =>
        ctx.services.approvals.decide(
          String(args.org_id),
          String(args.approval_id),
          principalOf(ctx),
          'denied',
          { reason: args.reason, notes: args.notes },
          query,
        ),
    }),
  rest: {
    extraErrors: ['409'],
    method: 'POST',
    path: `${approvalsPath}/:approval_id/deny`,
    tag,
    summary: 'Deny a pending approval',
    auth: bearerOrKey,
  },
});

/** The operations of this file, in the order the OpenAPI document lists their routes. */
export const approvalOperations = [
  approvalsQuery,
  approvalQuery,
  gatewayApprovalQuery,
  approveApprovalMutation,
  denyApprovalMutation,
];
