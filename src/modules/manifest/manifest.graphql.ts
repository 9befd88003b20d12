import type { FieldError } from '../../errors.js';
import type { ManifestEvent } from '../../generated/prisma/client.js';
import { builder } from '../../api/builder.js';
import { graphqlOnly } from '../../api/closed-values.js';
import { principalOf } from '../../api/context.js';
import { listType } from '../../api/list.js';
import { shapedJsonScalar } from '../../api/scalars.js';
import type { RestRoute } from '../../api/rest-routes.js';
import { mutation, query } from '../../api/operations.js';
import type { ManifestDocument } from './manifest-document.js';
import { manifestPayloadSchema } from './manifest-payload.json-schema.js';
import { documentOf, type TransitionName } from './manifest.service.js';

const statuses = ['pending', 'active', 'suspended', 'revoked', 'rejected', 'superseded'] as const;
export const ManifestStatusEnum = builder.enumType('ManifestStatus', { values: statuses });

const ManifestAgent = builder.objectRef<ManifestDocument['agent']>('ManifestAgent').implement({
  fields: (t) => ({
    id: t.exposeString('id'),
    name: t.exposeString('name'),
    version: t.exposeString('version'),
    description: t.exposeString('description', { nullable: true }),
    organization: t.exposeString('organization', { nullable: true }),
    team: t.exposeString('team', { nullable: true }),
  }),
});

const ManifestCapabilities = builder
  .objectRef<{ requested: string[]; approved: string[] }>('ManifestCapabilities')
  .implement({
    fields: (t) => ({
      requested: t.exposeStringList('requested'),
      approved: t.exposeStringList('approved', { description: 'Empty until approval.' }),
    }),
  });

const ManifestConstraints = builder
  .objectRef<NonNullable<ManifestDocument['constraints']>>('ManifestConstraints')
  .implement({
    description: 'As registered; absent limits default to 100 per hour and 1000 per day.',
    fields: (t) => ({
      max_actions_per_hour: t.exposeInt('max_actions_per_hour', { nullable: true }),
      max_actions_per_day: t.exposeInt('max_actions_per_day', { nullable: true }),
      require_human_approval: t.exposeStringList('require_human_approval', { nullable: true }),
    }),
  });

const ManifestMetadata = builder.objectRef<NonNullable<ManifestDocument['metadata']>>('ManifestMetadata').implement({
  fields: (t) => ({
    contact: t.exposeString('contact', { nullable: true }),
    documentation: t.exposeString('documentation', { nullable: true }),
  }),
});

export const ManifestHistoryEntry = builder.prismaObject('ManifestEvent', {
  name: 'ManifestHistoryEntry',
  fields: (t) => ({
    manifest_id: t.exposeID('manifestId'),
    version: t.exposeString('version', { description: 'Manifest format version of that manifest.' }),
    agent_version: t.exposeString('agentVersion'),
    manifest_hash: t.exposeString('manifestHash'),
    status: t.expose('status', { type: ManifestStatusEnum, description: 'The status this change led to.' }),
    changed_at: t.expose('changedAt', { type: 'Timestamp' }),
    changed_by: t.exposeString('changedBy', { description: 'User email or API key id.' }),
    changes: t.exposeStringList('changes'),
  }),
});

export const ManifestRef = builder.prismaObject('Manifest', {
  fields: (t) => ({
    manifest_id: t.exposeID('id'),
    svc_id: t.exposeString('svcId'),
    version: t.exposeString('version'),
    status: t.expose('status', { type: ManifestStatusEnum }),
    manifest_hash: t.exposeString('manifestHash'),
    agent: t.field({ type: ManifestAgent, resolve: (m) => documentOf(m).agent }),
    capabilities: t.field({
      type: ManifestCapabilities,
      resolve: (m) => ({ requested: m.requestedCapabilities, approved: m.approvedCapabilities }),
    }),
    constraints: t.field({ type: ManifestConstraints, nullable: true, resolve: (m) => documentOf(m).constraints }),
    metadata: t.field({ type: ManifestMetadata, nullable: true, resolve: (m) => documentOf(m).metadata }),
    approved_by: t.exposeString('approvedBy', { nullable: true, description: 'Email of the approving user.' }),
    approved_at: t.expose('approvedAt', { type: 'Timestamp', nullable: true }),
    suspended_by: t.exposeString('suspendedBy', { nullable: true }),
    suspended_at: t.expose('suspendedAt', { type: 'Timestamp', nullable: true }),
    rejected_by: t.exposeString('rejectedBy', { nullable: true }),
    rejected_at: t.expose('rejectedAt', { type: 'Timestamp', nullable: true }),
    revoked_by: t.exposeString('revokedBy', { nullable: true }),
    revoked_at: t.expose('revokedAt', { type: 'Timestamp', nullable: true }),
    reason: t.exposeString('reason', { nullable: true, description: 'Reason of the last reject, suspend or revoke.' }),
    notes: t.exposeString('notes', { nullable: true, description: 'Notes of the last transition.' }),
    created_by: t.exposeString('createdBy'),
    created_at: t.expose('createdAt', { type: 'Timestamp' }),
    updated_at: t.expose('updatedAt', { type: 'Timestamp' }),
  }),
});

const ManifestSummary = builder.prismaObject('Manifest', {
  variant: 'ManifestSummary',
  fields: (t) => ({
    manifest_id: t.exposeID('id'),
    svc_id: t.exposeString('svcId'),
    status: t.expose('status', { type: ManifestStatusEnum }),
    agent: t.field({ type: ManifestAgent, resolve: (m) => documentOf(m).agent }),
    capabilities_count: t.int({ resolve: (m) => m.requestedCapabilities.length }),
    created_at: t.expose('createdAt', { type: 'Timestamp' }),
    approved_at: t.expose('approvedAt', { type: 'Timestamp', nullable: true }),
    manifest: t.variant('Manifest', { extensions: graphqlOnly }),
  }),
});

/** An agent's current manifest, as docs/decisions/0020-agents.md shows it. */
export const AgentManifestRef = builder.prismaObject('Manifest', {
  variant: 'AgentCurrentManifest',
  fields: (t) => ({
    manifest_id: t.exposeID('id'),
    status: t.expose('status', { type: ManifestStatusEnum }),
    agent_version: t.string({ resolve: (m) => documentOf(m).agent.version }),
    manifest_hash: t.exposeString('manifestHash'),
    approved_at: t.expose('approvedAt', { type: 'Timestamp', nullable: true }),
    manifest: t.variant('Manifest', { extensions: graphqlOnly }),
  }),
});

/** Relations dashboards follow from a manifest, full, summary or an agent's; GraphQL only (see rest-schema.ts). */
for (const ref of [ManifestRef, ManifestSummary, AgentManifestRef] as const) {
  builder.prismaObjectFields(ref as typeof ManifestRef, (t) => ({
    history: t.field({
      type: [ManifestHistoryEntry],
      description: 'Every registration and status change of this agent id, newest first.',
      extensions: graphqlOnly,
      resolve: (manifest, _, ctx) => ctx.loaders.manifestHistory.load({ orgId: manifest.orgId, svcId: manifest.svcId }),
    }),
    approved_by_user: t.relation('approver', { nullable: true, extensions: graphqlOnly }),
  }));
}

const ManifestList = listType('ManifestList', ManifestSummary);

const ManifestHistory = builder.objectRef<{ items: ManifestEvent[] }>('ManifestHistory').implement({
  fields: (t) => ({ items: t.field({ type: [ManifestHistoryEntry], resolve: (h) => h.items }) }),
});

const FieldProblem = builder.objectRef<FieldError>('FieldProblem').implement({
  fields: (t) => ({ field: t.exposeString('field'), message: t.exposeString('message') }),
});

const ManifestValidation = builder
  .objectRef<{ valid: boolean; manifest_hash: string | null; errors: FieldError[]; warnings: FieldError[] }>(
    'ManifestValidation',
  )
  .implement({
    fields: (t) => ({
      valid: t.exposeBoolean('valid'),
      manifest_hash: t.exposeString('manifest_hash', { nullable: true, description: 'Set when valid.' }),
      errors: t.field({ type: [FieldProblem], resolve: (v) => v.errors }),
      warnings: t.field({ type: [FieldProblem], resolve: (v) => v.warnings }),
    }),
  });

const ManifestPayload = shapedJsonScalar(
  'ManifestPayload',
  'An agent manifest as an organization submits it: `version`, `agent` {id, name, version, description, organization, team}, ' +
    '`capabilities` {requested}, optional `constraints` {max_actions_per_hour, max_actions_per_day, require_human_approval} and `metadata`.',
  manifestPayloadSchema,
);

const manifestsPath = '/orgs/:org_id/manifests';
const tag = 'Manifests';
const bearerOrKey: RestRoute['auth'] = ['bearer', 'apiKey'];

const filterArgs = builder.args((t) => ({
  status: t.field({ type: ManifestStatusEnum }),
  team: t.string(),
  limit: t.int({ description: 'Default 50, at most 200.' }),
  offset: t.int({ description: 'Default 0.' }),
}));

const manifestsQuery = query('manifests', {
  field: (t) =>
    t.field({
      type: ManifestList,
      description: 'Manifests of the organization, newest first.',
      args: { org_id: t.arg.id({ required: true }), ...filterArgs },
      authScopes: (_, args) => ({ org: { orgId: String(args.org_id), action: 'manifest:read' } }),
      resolve: (_, args, ctx) => ctx.services.manifests.list(String(args.org_id), args, {}, principalOf(ctx)),
    }),
  rest: { method: 'GET', path: manifestsPath, tag, summary: 'List manifests', auth: bearerOrKey },
});

builder.prismaObjectField('Organization', 'manifests', (t) =>
  t.field({
    type: ManifestList,
    extensions: graphqlOnly,
    args: filterArgs,
    authScopes: (org) => ({ org: { orgId: org.id, action: 'manifest:read' } }),
    resolve: (org, args, ctx) => ctx.services.manifests.list(org.id, args, {}, principalOf(ctx)),
  }),
);

const validateManifestQuery = query('validate_manifest', {
  field: (t) =>
    t.field({
      type: ManifestValidation,
      description: 'Checks a manifest payload without registering it.',
      args: { org_id: t.arg.id({ required: true }), manifest: t.arg({ type: ManifestPayload, required: true }) },
      authScopes: (_, args) => ({ org: { orgId: String(args.org_id), action: 'manifest:write' } }),
      resolve: (_, args, ctx) => {
        const check = ctx.services.manifests.validate(args.manifest);
        return {
          valid: check.errors.length === 0,
          manifest_hash: check.manifestHash ?? null,
          errors: check.errors,
          warnings: check.warnings,
        };
      },
    }),
  rest: {
    method: 'POST',
    path: `${manifestsPath}/validate`,
    tag,
    summary: 'Validate a manifest payload (registers nothing)',
    auth: bearerOrKey,
    bodyArg: 'manifest',
  },
});

const manifestBySvcQuery = query('manifest_by_svc', {
  field: (t) =>
    t.prismaField({
      type: 'Manifest',
      description: "The agent's current manifest: active or suspended, else the newest.",
      args: { org_id: t.arg.id({ required: true }), svc_id: t.arg.string({ required: true }) },
      authScopes: (_, args) => ({ org: { orgId: String(args.org_id), action: 'manifest:read' } }),
      resolve: (query, _, args, ctx) =>
        ctx.services.manifests.bySvc(String(args.org_id), args.svc_id, query, principalOf(ctx)),
    }),
  rest: {
    method: 'GET',
    path: `${manifestsPath}/by-svc/:svc_id`,
    tag,
    summary: 'Look up the current manifest of an agent id',
    auth: bearerOrKey,
  },
});

const manifestQuery = query('manifest', {
  field: (t) =>
    t.prismaField({
      type: 'Manifest',
      args: { org_id: t.arg.id({ required: true }), manifest_id: t.arg.id({ required: true }) },
      authScopes: (_, args) => ({ org: { orgId: String(args.org_id), action: 'manifest:read' } }),
      resolve: (query, _, args, ctx) =>
        ctx.services.manifests.get(String(args.org_id), String(args.manifest_id), query, principalOf(ctx)),
    }),
  rest: {
    method: 'GET',
    path: `${manifestsPath}/:manifest_id`,
    tag,
    summary: 'Read a manifest',
    auth: bearerOrKey,
  },
});

const manifestHistoryQuery = query('manifest_history', {
  field: (t) =>
    t.field({
      type: ManifestHistory,
      args: { org_id: t.arg.id({ required: true }), manifest_id: t.arg.id({ required: true }) },
      authScopes: (_, args) => ({ org: { orgId: String(args.org_id), action: 'manifest:read' } }),
      resolve: async (_, args, ctx) => ({
        items: await ctx.services.manifests.history(String(args.org_id), String(args.manifest_id), principalOf(ctx)),
      }),
    }),
  rest: {
    method: 'GET',
    path: `${manifestsPath}/:manifest_id/history`,
    tag,
    summary: 'Every version and status change of the agent id, newest first',
    auth: bearerOrKey,
  },
});

const registerManifestMutation = mutation('register_manifest', {
  field: (t) =>
    t.prismaField({
      type: 'Manifest',
      description: 'Registers a manifest as pending.',
      args: { org_id: t.arg.id({ required: true }), manifest: t.arg({ type: ManifestPayload, required: true }) },
      authScopes: (_, args) => ({ org: { orgId: String(args.org_id), action: 'manifest:write' } }),
      resolve: (query, _, args, ctx) =>
        ctx.services.manifests.register(String(args.org_id), args.manifest, principalOf(ctx), query),
    }),
  rest: {
    // A pending manifest of the agent exists, or the agent is deactivated.
    extraErrors: ['409'],
    method: 'POST',
    path: manifestsPath,
    status: 201,
    tag,
    summary: 'Register an agent manifest (pending until approved)',
    auth: bearerOrKey,
    bodyArg: 'manifest',
  },
});

function transitionMutation(name: TransitionName, fieldArgs: 'approve' | 'reason' | 'notes', summary: string) {
  return mutation(`${name}_manifest`, {
    field: (t) =>
      t.prismaField({
        type: 'Manifest',
        description: summary,
        args: {
          org_id: t.arg.id({ required: true }),
          manifest_id: t.arg.id({ required: true }),
          ...(fieldArgs === 'approve'
            ? { approved_capabilities: t.arg.stringList({ description: 'A subset of requested; default all.' }) }
            : {}),
          ...(fieldArgs === 'reason' ? { reason: t.arg.string({ required: true }) } : {}),
          notes: t.arg.string(),
        },
        authScopes: (_, args) => ({ org: { orgId: String(args.org_id), action: 'manifest:transition' } }),
        resolve: (query, _, args, ctx) =>
          ctx.services.manifests.transition(
            String(args.org_id),
            String(args.manifest_id),
            name,
            args as { reason?: string; notes?: string | null; approved_capabilities?: string[] | null },
            principalOf(ctx),
            query,
          ),
      }),
    rest: {
      extraErrors: ['409'],
      method: 'POST',
      path: `${manifestsPath}/:manifest_id/${name}`,
      tag,
      summary,
      auth: ['bearer'],
    },
  });
}

/** The operations of this file, in the order the OpenAPI document lists their routes. */
export const manifestOperations = [
  manifestsQuery,
  validateManifestQuery,
  manifestBySvcQuery,
  manifestQuery,
  manifestHistoryQuery,
  registerManifestMutation,
  transitionMutation('approve', 'approve', 'Approve a pending manifest (all or a subset of its capabilities)'),
  transitionMutation('reject', 'reason', 'Reject a pending manifest'),
  transitionMutation('suspend', 'reason', 'Suspend an active manifest'),
  transitionMutation('reactivate', 'notes', 'Reactivate a suspended manifest'),
  transitionMutation('revoke', 'reason', 'Revoke a manifest for good'),
];
