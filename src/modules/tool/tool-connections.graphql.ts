import { builder } from '../../api/builder.js';
import { closedValues } from '../../api/closed-values.js';
import { principalOf } from '../../api/context.js';
import { listType } from '../../api/list.js';
import { mutation, query } from '../../api/operations.js';
import {
  type ConnectionStart,
  connectionScopes,
  connectionStatuses,
  type ToolConnectionView,
} from './tool-connections.service.js';

/** A tool's OAuth connections (docs/decisions/0068-upstream-connections.md): their routes and types. */

const ToolConnectionRef = builder.objectRef<ToolConnectionView>('ToolConnection').implement({
  description:
    "A tool's OAuth connection to its upstream: the organization's (`scope` org) or one user's. The tokens are never shown.",
  fields: (t) => ({
    connection_id: t.exposeID('connection_id'),
    tool_id: t.exposeID('tool_id'),
    scope: t.string({
      description: '`org`: one account for the whole organization. `user`: the account of `user_id`.',
      ...closedValues(connectionScopes),
      resolve: (connection) => connection.scope,
    }),
    user_id: t.exposeID('user_id', { nullable: true, description: 'Null for the organization’s connection.' }),
    status: t.string({
      description:
        '`pending`: authorization started, never completed. `connected`: tokens held. `reauthorization_required`: the upstream ' +
        'refused the grant (expired or revoked there); connect again. `revoked`: revoked here.',
      ...closedValues(connectionStatuses),
      resolve: (connection) => connection.status,
    }),
    subject: t.exposeString('subject', {
      nullable: true,
      description: 'The upstream account, when its access tokens say (a JWT access token’s `sub`).',
    }),
    scopes: t.exposeStringList('scopes', { description: 'The scopes granted.' }),
    connected_at: t.expose('connected_at', { type: 'Timestamp', nullable: true }),
    expires_at: t.expose('expires_at', {
      type: 'Timestamp',
      nullable: true,
      description: 'When the access token held expires; it is refreshed ahead of that.',
    }),
    last_refreshed_at: t.expose('last_refreshed_at', { type: 'Timestamp', nullable: true }),
    last_used_at: t.expose('last_used_at', {
      type: 'Timestamp',
      nullable: true,
      description: 'When a call last used it (written every 30 seconds by each process).',
    }),
    error: t.exposeString('error', {
      nullable: true,
      description: 'Why the last authorization or refresh failed; null once one succeeds.',
    }),
  }),
});

const ToolConnectionStartRef = builder.objectRef<ConnectionStart>('ToolConnectionStart').implement({
  description: 'An authorization under way: open `authorization_url` in a browser before `expires_at`.',
  fields: (t) => ({
    connection_id: t.exposeID('connection_id'),
    authorization_url: t.exposeString('authorization_url', {
      description:
        'The gateway’s `/oauth/upstream/start` page: it binds the authorization to the browser that opens it (once) and sends it ' +
        "to the upstream's authorization server, which sends it back to the console's tool page.",
    }),
    expires_at: t.expose('expires_at', { type: 'Timestamp' }),
  }),
});

const ToolConnectionList = listType('ToolConnectionList', ToolConnectionRef);
const connectionsPath = '/orgs/:org_id/tools/:tool_id/connections';
const tag = 'Tools';

const toolConnectionsQuery = query('tool_connections', {
  field: (t) =>
    t.field({
      type: ToolConnectionList,
      description: 'Admins and operators see every connection of the tool; other users their own.',
      args: { org_id: t.arg.id({ required: true }), tool_id: t.arg.id({ required: true }) },
      authScopes: (_, args) => ({ org: { orgId: String(args.org_id), action: 'tool_connection:read' } }),
      resolve: (_, args, ctx) =>
        ctx.services.tools.connections(String(args.org_id), String(args.tool_id), principalOf(ctx)),
    }),
  rest: { method: 'GET', path: connectionsPath, tag, summary: "List a tool's OAuth connections", auth: ['bearer'] },
});

const toolConnectionQuery = query('tool_connection', {
  field: (t) =>
    t.field({
      type: ToolConnectionRef,
      args: {
        org_id: t.arg.id({ required: true }),
        tool_id: t.arg.id({ required: true }),
        connection_id: t.arg.id({ required: true }),
      },
      authScopes: (_, args) => ({ org: { orgId: String(args.org_id), action: 'tool_connection:read' } }),
      resolve: (_, args, ctx) =>
        ctx.services.tools.connection(
          String(args.org_id),
          String(args.tool_id),
          String(args.connection_id),
          principalOf(ctx),
        ),
    }),
  rest: {
    method: 'GET',
    path: `${connectionsPath}/:connection_id`,
    tag,
    summary: "Read a tool's OAuth connection",
    auth: ['bearer'],
    errorNotes: { '403': "another user's connection, or the organization's, read by a viewer" },
  },
});

const connectToolMutation = mutation('connect_tool', {
  field: (t) =>
    t.field({
      type: ToolConnectionStartRef,
      description:
        'Starts the OAuth authorization of a tool whose `config.auth` is `{"type": "oauth"}`: the organization\'s connection ' +
        '(`connection` "org": admins and operators) or the caller’s own ("user": any signed-in user). The upstream’s ' +
        'authorization server is discovered (RFC 9728, RFC 8414) and the gateway registered there (the tool’s `client_id`, else ' +
        'its Client ID Metadata Document, else RFC 7591) before answering. Open `authorization_url` in a browser within 10 ' +
        'minutes; a connection that exists keeps its tokens until the new authorization succeeds.',
      args: { org_id: t.arg.id({ required: true }), tool_id: t.arg.id({ required: true }) },
      authScopes: (_, args) => ({ org: { orgId: String(args.org_id), action: 'tool_connection:connect' } }),
      resolve: (_, args, ctx) =>
        ctx.services.tools.connect(String(args.org_id), String(args.tool_id), principalOf(ctx)),
    }),
  rest: {
    method: 'POST',
    path: connectionsPath,
    status: 201,
    tag,
    summary: 'Connect a tool to its upstream with OAuth',
    auth: ['bearer'],
    extraErrors: ['409'],
    errorNotes: {
      '403': "the organization's connection, asked by a viewer",
      '409': 'the tool does not authenticate with an OAuth connection (`config.auth`)',
      '422': "the upstream's authorization server cannot be used (details name `tool_id`, the message says why)",
    },
  },
});

const revokeToolConnectionMutation = mutation('revoke_tool_connection', {
  field: (t) =>
    t.boolean({
      description:
        'Revokes the connection: its tokens are forgotten (status `revoked`), then revoked at the upstream’s authorization server ' +
        'when it offers RFC 7009. Users revoke their own; admins and operators any.',
      args: {
        org_id: t.arg.id({ required: true }),
        tool_id: t.arg.id({ required: true }),
        connection_id: t.arg.id({ required: true }),
      },
      authScopes: (_, args) => ({ org: { orgId: String(args.org_id), action: 'tool_connection:revoke' } }),
      resolve: async (_, args, ctx) => {
        await ctx.services.tools.revokeConnection(
          String(args.org_id),
          String(args.tool_id),
          String(args.connection_id),
          principalOf(ctx),
        );
        return true;
      },
    }),
  rest: {
    method: 'DELETE',
    path: `${connectionsPath}/:connection_id`,
    status: 204,
    tag,
    summary: "Revoke a tool's OAuth connection",
    auth: ['bearer'],
    errorNotes: { '403': "another user's connection, or the organization's, revoked by a viewer" },
  },
});

/** The operations of this file, in the order the OpenAPI document lists their routes. */
export const toolConnectionOperations = [
  toolConnectionsQuery,
  toolConnectionQuery,
  connectToolMutation,
  revokeToolConnectionMutation,
];
