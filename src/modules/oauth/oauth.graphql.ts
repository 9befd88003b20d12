import { builder } from '../../api/builder.js';
import { principalOf, userOf } from '../../api/context.js';
import { listType } from '../../api/list.js';
import { mutation, query } from '../../api/operations.js';
import type { AuthorizationParams } from './authorization-request.js';
import type { ConsentAgent, ConsentAnswer, ConsentView } from './consent.js';

/**
 * OAuth grants of MCP clients and the console's consent page (docs/decisions/0047-mcp-oauth.md).
 * Grants are listed and revoked per agent, over REST and GraphQL; the consent fields are the
 * console's (GraphQL only, a signed-in operator only).
 */

const OAuthGrantRef = builder.prismaObject('OAuthGrant', {
  description: 'An MCP client an operator allowed to call one agent’s tools with OAuth access tokens.',
  fields: (t) => ({
    grant_id: t.exposeID('id'),
    agent_id: t.exposeString('svcId', { description: 'The agent (svc_id) whose MCP endpoint the tokens are for.' }),
    client_id: t.exposeString('clientId', {
      description: 'A registered client id (`agc_…`) or a Client ID Metadata Document URL.',
    }),
    client_name: t.exposeString('clientName', {
      nullable: true,
      description: 'The client’s name as the operator saw it when allowing it.',
    }),
    redirect_uri: t.exposeString('redirectUri'),
    scope: t.exposeString('scope'),
    approved_by: t.exposeString('approvedBy', { description: 'The email of the operator who allowed it.' }),
    created_at: t.expose('createdAt', { type: 'Timestamp' }),
    last_used_at: t.expose('lastUsedAt', {
      type: 'Timestamp',
      nullable: true,
      description: 'Its last token or call, to the minute; null before its first token.',
    }),
  }),
});

const OAuthGrantList = listType('OAuthGrantList', OAuthGrantRef);
const tag = 'Agents';

const agentGrantsQuery = query('agent_grants', {
  field: (t) =>
    t.field({
      type: OAuthGrantList,
      description: 'The MCP clients allowed to call the agent’s tools with OAuth (standing grants, newest first).',
      args: { agent_id: t.arg.id({ required: true }) },
      authScopes: { own: 'oauth_grant:read' },
      resolve: async (_, args, ctx) => {
        const { orgId } = principalOf(ctx);
        const agent = await ctx.services.agents.get(orgId, String(args.agent_id), principalOf(ctx));
        const items = await ctx.services.oauth.listGrants(orgId, agent.id);
        return { items, total: items.length };
      },
    }),
  rest: {
    method: 'GET',
    path: '/agents/:agent_id/grants',
    tag,
    summary: 'List the OAuth grants of an agent’s MCP clients',
    auth: ['bearer'],
  },
});

const revokeAgentGrantMutation = mutation('revoke_agent_grant', {
  field: (t) =>
    t.boolean({
      description:
        'Revokes an OAuth grant: its refresh tokens stop rotating and its access tokens stop working at the agent’s MCP endpoint ' +
        'on every process within a second. Audited as `oauth.grant_revoked`.',
      args: { agent_id: t.arg.id({ required: true }), grant_id: t.arg.id({ required: true }) },
      authScopes: { own: 'oauth_grant:revoke' },
      resolve: async (_, args, ctx) => {
        const { orgId } = principalOf(ctx);
        await ctx.services.oauth.revokeGrant(orgId, String(args.agent_id), String(args.grant_id), principalOf(ctx));
        return true;
      },
    }),
  rest: {
    method: 'DELETE',
    path: '/agents/:agent_id/grants/:grant_id',
    status: 204,
    tag,
    summary: 'Revoke an OAuth grant of an agent’s MCP client',
    auth: ['bearer'],
  },
});

// ---- The consent page (GraphQL only: the console) ----

const authorizationArgs = builder.args((t) => ({
  response_type: t.string(),
  client_id: t.string(),
  redirect_uri: t.string(),
  code_challenge: t.string(),
  code_challenge_method: t.string(),
  state: t.string(),
  resource: t.string(),
  scope: t.string(),
}));

/** GraphQL's nulls as absent parameters. */
const paramsOf = (args: Record<string, string | null | undefined>): AuthorizationParams =>
  Object.fromEntries(
    Object.entries(args).filter(([, value]) => value !== null && value !== undefined),
  ) as AuthorizationParams;

const ConsentClientRef = builder.objectRef<ConsentView['client']>('OAuthConsentClient').implement({
  fields: (t) => ({
    client_id: t.exposeString('client_id'),
    name: t.exposeString('name', { nullable: true }),
    kind: t.exposeString('kind', {
      description: '`registered` here, or `metadata_document` (its client_id is the URL of its description).',
    }),
    client_uri: t.exposeString('client_uri', { nullable: true }),
    redirect_uri: t.exposeString('redirect_uri'),
    redirect_host: t.exposeString('redirect_host', { description: 'Where the browser goes after the answer.' }),
  }),
});

const ConsentAgentRef = builder.objectRef<ConsentAgent>('OAuthConsentAgent').implement({
  fields: (t) => ({
    agent_id: t.exposeString('agent_id'),
    name: t.exposeString('name'),
    status: t.exposeString('status'),
  }),
});

const ConsentViewRef = builder.objectRef<ConsentView>('OAuthAuthorizationRequest').implement({
  description: 'An MCP client asks to call an agent’s tools: what the consent page shows.',
  fields: (t) => ({
    client: t.field({ type: ConsentClientRef, resolve: (v) => v.client }),
    agent: t.field({
      type: ConsentAgentRef,
      nullable: true,
      description: 'Null when the caller’s organization has no agent by that id.',
      resolve: (v) => v.agent,
    }),
    agent_id: t.exposeString('agent_id'),
    resource: t.exposeString('resource'),
    scope: t.exposeString('scope'),
    can_allow: t.exposeBoolean('can_allow'),
    refusal: t.exposeString('refusal', {
      nullable: true,
      description: 'Why the caller cannot allow, when they cannot.',
    }),
  }),
});

const ConsentAnswerRef = builder.objectRef<ConsentAnswer>('OAuthAuthorizationAnswer').implement({
  fields: (t) => ({
    redirect_to: t.exposeString('redirect_to', {
      description: 'Where to send the browser: the client’s redirect URI with the code, or with the error.',
    }),
  }),
});

const oauthAuthorizationRequestQuery = query('oauth_authorization_request', {
  field: (t) =>
    t.field({
      type: ConsentViewRef,
      description: 'The consent page: the client, the agent and the scope of an authorization request, checked again.',
      args: authorizationArgs,
      authScopes: { session: true },
      resolve: (_, args, ctx) =>
        ctx.services.oauth.describeAuthorization(paramsOf(args), userOf(ctx), ctx.state.clientAddress),
    }),
});

const decideOauthAuthorizationMutation = mutation('decide_oauth_authorization', {
  field: (t) =>
    t.field({
      type: ConsentAnswerRef,
      description:
        'The operator’s answer on the consent page. Allow (an admin or operator, for an active agent of their organization) ' +
        'makes a grant and a single-use code; deny sends the client `access_denied`.',
      args: { ...authorizationArgs, allow: t.arg.boolean({ required: true }) },
      authScopes: { session: true },
      resolve: (_, { allow, ...args }, ctx) =>
        ctx.services.oauth.decideAuthorization(paramsOf(args), userOf(ctx), allow, ctx.state.clientAddress),
    }),
});

/** The operations of this file, in the order the OpenAPI document lists their routes. */
export const oauthOperations = [
  agentGrantsQuery,
  revokeAgentGrantMutation,
  oauthAuthorizationRequestQuery,
  decideOauthAuthorizationMutation,
];
