import type { Agent } from '../../generated/prisma/client.js';
import { builder } from '../../api/builder.js';
import { graphqlOnly } from '../../api/closed-values.js';
import { principalOf } from '../../api/context.js';
import { listType } from '../../api/list.js';
import type { RestRoute } from '../../api/rest-routes.js';
import { mutation, query } from '../../api/operations.js';
import type { AgentUsage, UsageWindow } from '../gateway/gateway.service.js';
import { AgentManifestRef } from '../manifest/manifest.graphql.js';
import { PolicyRef } from '../policy/policy.graphql.js';
import { agentStatuses, labelsOf } from './agent.service.js';

const AgentStatusEnum = builder.enumType('AgentStatus', { values: agentStatuses });

const UsageWindowRef = builder.objectRef<UsageWindow>('AgentUsageWindow').implement({
  fields: (t) => ({
    count: t.exposeInt('count', { description: 'Allowed actions counted in the current window.' }),
    limit: t.exposeInt('limit', {
      nullable: true,
      description: "The current manifest's limit; null without a manifest.",
    }),
    resets_at: t.exposeString('resets_at', { description: 'When the window ends (UTC hour or day).' }),
  }),
});

const AgentUsageRef = builder.objectRef<AgentUsage>('AgentUsage').implement({
  fields: (t) => ({
    hour: t.field({ type: UsageWindowRef, resolve: (u) => u.hour }),
    day: t.field({ type: UsageWindowRef, resolve: (u) => u.day }),
  }),
});

const agentKey = (agent: Agent) => ({ orgId: agent.orgId, svcId: agent.id });

export const AgentRef = builder.prismaObject('Agent', {
  description: 'The identity behind a svc_id across all its manifest versions.',
  fields: (t) => ({
    agent_id: t.exposeID('id', { description: 'The svc_id (a manifest’s agent.id).' }),
    name: t.exposeString('name'),
    description: t.exposeString('description'),
    team: t.exposeString('team', { nullable: true }),
    owner_email: t.exposeString('ownerEmail', { nullable: true }),
    labels: t.field({ type: 'JSON', description: 'String keys and values, at most 20.', resolve: (a) => labelsOf(a) }),
    status: t.field({ type: AgentStatusEnum, resolve: (a) => a.status as (typeof agentStatuses)[number] }),
    current_manifest: t.field({
      type: AgentManifestRef,
      nullable: true,
      description: 'The active or suspended manifest, else the newest; null before the first.',
      resolve: (agent, _, ctx) => ctx.loaders.currentManifest.load(agentKey(agent)),
    }),
    usage: t.field({
      type: AgentUsageRef,
      description: "Allowed actions in the current UTC hour and day against the current manifest's limits.",
      resolve: (agent, _, ctx) => ctx.loaders.agentUsage.load(agentKey(agent)),
    }),
    policies: t.field({
      type: [PolicyRef],
      extensions: graphqlOnly,
      description: 'The policies that target this agent (enabled or not), in priority order.',
      // Policies are bearer-only (docs/decisions/0019-policy-management.md): agent:read lets API keys this far, not further.
      authScopes: (agent) => ({ org: { orgId: agent.orgId, action: 'policy:read' } }),
      resolve: (agent, _, ctx) => ctx.loaders.agentPolicies.load(agentKey(agent)),
    }),
    last_seen_at: t.expose('lastSeenAt', {
      type: 'Timestamp',
      nullable: true,
      description: 'Its last gateway request, to the minute (written at most once a minute).',
    }),
    created_at: t.expose('createdAt', { type: 'Timestamp' }),
    created_by: t.exposeString('createdBy', { description: 'User email or API key id.' }),
    deactivated_at: t.expose('deactivatedAt', { type: 'Timestamp', nullable: true }),
    deactivated_by: t.exposeString('deactivatedBy', { nullable: true }),
    deactivation_reason: t.exposeString('deactivationReason', { nullable: true }),
  }),
});

const AgentList = listType('AgentList', AgentRef);
const tag = 'Agents';
const readers: RestRoute['auth'] = ['bearer', 'apiKey'];

const filterArgs = builder.args((t) => ({
  status: t.field({ type: AgentStatusEnum }),
  team: t.string(),
  label: t.string({ description: '`key:value`: agents with that label.' }),
  q: t.string({ description: 'Prefix of the agent id or name (the name case-insensitively).' }),
  limit: t.int({ description: 'Default 50, at most 200.' }),
  offset: t.int({ description: 'Default 0.' }),
}));

const agentsQuery = query('agents', {
  field: (t) =>
    t.field({
      type: AgentList,
      description: 'Agents of the caller’s organization, newest first; a key limited to agent ids sees only those.',
      args: filterArgs,
      authScopes: { own: 'agent:read' },
      resolve: (_, args, ctx) => ctx.services.agents.list(principalOf(ctx).orgId, args, principalOf(ctx)),
    }),
  rest: { method: 'GET', path: '/agents', tag, summary: 'List agents', auth: readers },
});

builder.prismaObjectField('Organization', 'agents', (t) =>
  t.field({
    type: AgentList,
    extensions: graphqlOnly,
    args: filterArgs,
    authScopes: (org) => ({ org: { orgId: org.id, action: 'agent:read' } }),
    resolve: (org, args, ctx) => ctx.services.agents.list(org.id, args, principalOf(ctx)),
  }),
);

const agentQuery = query('agent', {
  field: (t) =>
    t.field({
      type: AgentRef,
      args: { agent_id: t.arg.id({ required: true }) },
      authScopes: { own: 'agent:read' },
      resolve: (_, args, ctx) =>
        ctx.services.agents.get(principalOf(ctx).orgId, String(args.agent_id), principalOf(ctx)),
    }),
  rest: {
    method: 'GET',
    path: '/agents/:agent_id',
    tag,
    summary: 'Read an agent with its current manifest and usage',
    auth: readers,
  },
});

const registerAgentMutation = mutation('register_agent', {
  field: (t) =>
    t.field({
      type: AgentRef,
      description:
        'Registers an agent before (or without) its first manifest; registering a manifest for a new id does it too.',
      args: {
        agent_id: t.arg.string({
          required: true,
          description: "A manifest's agent.id: lowercase letters, digits and hyphens.",
        }),
        name: t.arg.string({ required: true }),
        description: t.arg.string(),
        team: t.arg.string(),
        owner_email: t.arg.string({ description: 'Default: the registering user’s email.' }),
        labels: t.arg({ type: 'JSON', description: 'At most 20 `key: value` strings.' }),
      },
      authScopes: { own: 'agent:register' },
      resolve: (_, args, ctx) => ctx.services.agents.register(principalOf(ctx).orgId, args, principalOf(ctx)),
    }),
  rest: {
    method: 'POST',
    path: '/agents',
    status: 201,
    tag,
    summary: 'Register an agent',
    auth: readers,
    extraErrors: ['409'],
  },
});

const deactivateAgentMutation = mutation('deactivate_agent', {
  field: (t) =>
    t.boolean({
      description:
        'Denies every gateway request of the agent (AGENT_DEACTIVATED) on every process within a second, denies its pending ' +
        'approvals ("agent deactivated"), revokes its capability tokens and refuses new manifests (409). Records and history stay.',
      args: {
        agent_id: t.arg.id({ required: true }),
        reason: t.arg.string({ description: 'Shown in the denials; at most 1000 characters.' }),
      },
      authScopes: { own: 'agent:deactivate' },
      resolve: async (_, args, ctx) => {
        await ctx.services.agents.deactivate(
          principalOf(ctx).orgId,
          String(args.agent_id),
          args.reason,
          principalOf(ctx),
        );
        return true;
      },
    }),
  rest: {
    method: 'DELETE',
    path: '/agents/:agent_id',
    status: 204,
    tag,
    summary: 'Deactivate an agent (`?reason=`)',
    auth: ['bearer'],
    queryArgs: ['reason'],
  },
});

const reactivateAgentMutation = mutation('reactivate_agent', {
  field: (t) =>
    t.field({
      type: AgentRef,
      description: 'Gateway access comes back; capability tokens revoked by the deactivation stay revoked.',
      args: { agent_id: t.arg.id({ required: true }) },
      authScopes: { own: 'agent:reactivate' },
      resolve: (_, args, ctx) =>
        ctx.services.agents.reactivate(principalOf(ctx).orgId, String(args.agent_id), principalOf(ctx)),
    }),
  rest: {
    method: 'POST',
    path: '/agents/:agent_id/reactivate',
    tag,
    summary: 'Reactivate an agent',
    auth: ['bearer'],
    extraErrors: ['409'],
  },
});

/** The operations of this file, in the order the OpenAPI document lists their routes. */
export const agentOperations = [
  agentsQuery,
  agentQuery,
  registerAgentMutation,
  deactivateAgentMutation,
  reactivateAgentMutation,
];
