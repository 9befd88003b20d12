import { builder } from '../../api/builder.js';
import { principalOf } from '../../api/context.js';
import { listType } from '../../api/list.js';
import { mutation, query } from '../../api/operations.js';
import type { CapabilityToken } from '../../generated/prisma/client.js';

const CapabilityTokenRef = builder.prismaObject('CapabilityToken', {
  fields: (t) => ({
    token_id: t.exposeID('id'),
    svc_id: t.exposeString('svcId'),
    capabilities: t.exposeStringList('capabilities'),
    max_uses: t.exposeInt('maxUses', { nullable: true }),
    uses: t.exposeInt('uses'),
    expires_at: t.expose('expiresAt', { type: 'Timestamp' }),
    revoked_at: t.expose('revokedAt', { type: 'Timestamp', nullable: true }),
    created_at: t.expose('createdAt', { type: 'Timestamp' }),
  }),
});

const IssuedCapabilityToken = builder
  .objectRef<CapabilityToken & { token: string }>('IssuedCapabilityToken')
  .implement({
    description: 'A new capability token; `token` (the JWT) is shown in this response only.',
    fields: (t) => ({
      token_id: t.exposeID('id'),
      token: t.exposeString('token'),
      svc_id: t.exposeString('svcId'),
      capabilities: t.exposeStringList('capabilities'),
      expires_at: t.expose('expiresAt', { type: 'Timestamp' }),
      max_uses: t.exposeInt('maxUses', { nullable: true }),
    }),
  });

const TokenList = listType('CapabilityTokenList', CapabilityTokenRef);
const path = '/orgs/:org_id/capability-tokens';
const tag = 'Capability tokens';

const issueCapabilityTokenMutation = mutation('issue_capability_token', {
  field: (t) =>
    t.field({
      type: IssuedCapabilityToken,
      args: {
        org_id: t.arg.id({ required: true }),
        svc_id: t.arg.string({ required: true }),
        capabilities: t.arg.stringList({
          required: true,
          description: "A subset of the agent's approved capabilities.",
        }),
        expires_in_seconds: t.arg.int({ required: true, description: '60 to 2592000.' }),
        max_uses: t.arg.int(),
      },
      authScopes: (_, args) => ({ org: { orgId: String(args.org_id), action: 'capability_token:manage' } }),
      resolve: (_, args, ctx) => ctx.services.tokens.issue(String(args.org_id), args, principalOf(ctx)),
    }),
  rest: {
    method: 'POST',
    path,
    status: 201,
    tag,
    summary: 'Issue a capability token',
    auth: ['bearer'],
  },
});

const capabilityTokensQuery = query('capability_tokens', {
  field: (t) =>
    t.field({
      type: TokenList,
      args: { org_id: t.arg.id({ required: true }) },
      authScopes: (_, args) => ({ org: { orgId: String(args.org_id), action: 'capability_token:manage' } }),
      resolve: (_, args, ctx) => ctx.services.tokens.list(String(args.org_id)),
    }),
  rest: {
    method: 'GET',
    path,
    tag,
    summary: 'List capability tokens (never their text)',
    auth: ['bearer'],
  },
});

const revokeCapabilityTokenMutation = mutation('revoke_capability_token', {
  field: (t) =>
    t.field({
      type: CapabilityTokenRef,
      args: { org_id: t.arg.id({ required: true }), token_id: t.arg.id({ required: true }) },
      authScopes: (_, args) => ({ org: { orgId: String(args.org_id), action: 'capability_token:manage' } }),
      resolve: (_, args, ctx) =>
        ctx.services.tokens.revoke(String(args.org_id), String(args.token_id), principalOf(ctx)),
    }),
  rest: {
    method: 'POST',
    path: `${path}/:token_id/revoke`,
    tag,
    summary: 'Revoke a capability token',
    auth: ['bearer'],
  },
});

/** The operations of this file, in the order the OpenAPI document lists their routes. */
export const capabilityTokenOperations = [
  issueCapabilityTokenMutation,
  capabilityTokensQuery,
  revokeCapabilityTokenMutation,
];
