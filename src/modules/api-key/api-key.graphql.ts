import { builder } from '../../api/builder.js';
import { closedValues } from '../../api/closed-values.js';
import { apiKeyScopes } from '../../authz/authz.js';
import { principalOf } from '../../api/context.js';
import { listType } from '../../api/list.js';
import { mutation, query } from '../../api/operations.js';
import type { ApiKey } from '../../generated/prisma/client.js';

export const ApiKeyRef = builder.prismaObject('ApiKey', {
  fields: (t) => ({
    key_id: t.exposeID('id'),
    name: t.exposeString('name'),
    description: t.exposeString('description'),
    key_prefix: t.exposeString('keyPrefix', { description: 'The first 12 characters of the key, for recognising it.' }),
    scopes: t.exposeStringList('scopes', closedValues(apiKeyScopes)),
    svc_ids: t.exposeStringList('svcIds', { description: 'Agent ids the key is limited to; empty: all agents.' }),
    user_id: t.exposeID('userId', {
      nullable: true,
      description: "The user the key acts for: tools with per-user connections use that user's.",
    }),
    last_used_at: t.expose('lastUsedAt', { type: 'Timestamp', nullable: true }),
    expires_at: t.expose('expiresAt', { type: 'Timestamp' }),
    created_at: t.expose('createdAt', { type: 'Timestamp' }),
  }),
});

const CreatedApiKey = builder.objectRef<ApiKey & { key: string }>('CreatedApiKey').implement({
  description: 'A new API key. `key` is the secret, shown in this response only.',
  fields: (t) => ({
    key_id: t.exposeID('id'),
    name: t.exposeString('name'),
    description: t.exposeString('description'),
    key: t.exposeString('key'),
    key_prefix: t.exposeString('keyPrefix'),
    scopes: t.exposeStringList('scopes', closedValues(apiKeyScopes)),
    svc_ids: t.exposeStringList('svcIds'),
    user_id: t.exposeID('userId', { nullable: true }),
    expires_at: t.expose('expiresAt', { type: 'Timestamp' }),
    created_at: t.expose('createdAt', { type: 'Timestamp' }),
  }),
});

const ApiKeyList = listType('ApiKeyList', ApiKeyRef);

const apiKeysQuery = query('api_keys', {
  field: (t) =>
    t.field({
      type: ApiKeyList,
      args: { org_id: t.arg.id({ required: true }) },
      authScopes: (_, args) => ({ org: { orgId: String(args.org_id), action: 'api_key:read' } }),
      resolve: (_, args, ctx) => ctx.services.apiKeys.list(String(args.org_id)),
    }),
  rest: {
    method: 'GET',
    path: '/orgs/:org_id/api-keys',
    tag: 'API keys',
    summary: 'List API keys (never their secrets)',
    auth: ['bearer'],
  },
});

const createApiKeyMutation = mutation('create_api_key', {
  field: (t) =>
    t.field({
      type: CreatedApiKey,
      args: {
        org_id: t.arg.id({ required: true }),
        name: t.arg.string({ required: true }),
        description: t.arg.string(),
        scopes: t.arg.stringList({ required: true }),
        expires_in_days: t.arg.int({ description: '1 to 3650; default 90.' }),
        svc_ids: t.arg.stringList({ description: 'Limit the key to these agent ids.' }),
        user_id: t.arg.id({
          description:
            "A user of the organization the key acts for: tools whose OAuth connections are per user use that user's. " +
            'Removing the user removes the key.',
        }),
      },
      authScopes: (_, args) => ({ org: { orgId: String(args.org_id), action: 'api_key:write' } }),
      resolve: (_, args, ctx) => ctx.services.apiKeys.create(String(args.org_id), args, principalOf(ctx)),
    }),
  rest: {
    method: 'POST',
    path: '/orgs/:org_id/api-keys',
    status: 201,
    tag: 'API keys',
    summary: 'Create an API key; the secret is returned once',
    auth: ['bearer'],
  },
});

const deleteApiKeyMutation = mutation('delete_api_key', {
  field: (t) =>
    t.boolean({
      args: { org_id: t.arg.id({ required: true }), key_id: t.arg.id({ required: true }) },
      authScopes: (_, args) => ({ org: { orgId: String(args.org_id), action: 'api_key:write' } }),
      resolve: async (_, args, ctx) => {
        await ctx.services.apiKeys.remove(String(args.org_id), String(args.key_id), principalOf(ctx));
        return true;
      },
    }),
  rest: {
    method: 'DELETE',
    path: '/orgs/:org_id/api-keys/:key_id',
    status: 204,
    tag: 'API keys',
    summary: 'Delete an API key for good',
    auth: ['bearer'],
  },
});

/** The operations of this file, in the order the OpenAPI document lists their routes. */
export const apiKeyOperations = [apiKeysQuery, createApiKeyMutation, deleteApiKeyMutation];
