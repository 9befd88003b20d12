import { builder } from '../../graphql/builder.js';
import { closedValues } from '../../graphql/closed-values.js';
import { shapedJsonScalar } from '../../graphql/scalars.js';
import { toolConfigInputSchema, toolConfigSchema } from './tool-config.schema.js';
import { connectors } from './tool.service.js';
import { principalOf } from '../../graphql/context.js';
import { listType } from '../../graphql/list.js';
import { restRoute } from '../../http/rest-routes.js';
import { publicConfig } from './tool.service.js';

const ToolConfig = shapedJsonScalar(
  'ToolConfig',
  "A tool's connector settings as read, one shape per connector (`http`, `mcp`, `mock`); write-only values read as \"[redacted]\".",
  toolConfigSchema,
);
const ToolConfigInput = shapedJsonScalar(
  'ToolConfigInput',
  "A tool's connector settings as written: the shape of the `connector` given beside it (`http`, `mcp` or `mock`).",
  toolConfigInputSchema,
);

export const ToolRef = builder.prismaObject('Tool', {
  fields: (t) => ({
    tool_id: t.exposeID('id'),
    action_type: t.exposeString('actionType'),
    connector: t.exposeString('connector', { description: '`http`, `mcp` or `mock`.', ...closedValues(connectors) }),
    config: t.field({
      type: ToolConfig,
      description: 'Header values and the secret are write-only: shown as "[redacted]" when set.',
      resolve: (tool) => publicConfig(tool),
    }),
    created_at: t.expose('createdAt', { type: 'Timestamp' }),
    updated_at: t.expose('updatedAt', { type: 'Timestamp' }),
  }),
});

const ToolList = listType('ToolList', ToolRef);
const toolsPath = '/orgs/:org_id/tools';
const tag = 'Tools';

builder.queryField('tools', (t) =>
  t.field({
    type: ToolList,
    args: { org_id: t.arg.id({ required: true }) },
    authScopes: (_, args) => ({ org: { orgId: String(args.org_id), action: 'tool:manage' } }),
    resolve: (_, args, ctx) => ctx.services.tools.list(String(args.org_id)),
  }),
);
restRoute('Query.tools', { method: 'GET', path: toolsPath, tag, summary: 'List tool connectors', auth: ['bearer'] });

builder.queryField('tool', (t) =>
  t.field({
    type: ToolRef,
    args: { org_id: t.arg.id({ required: true }), tool_id: t.arg.id({ required: true }) },
    authScopes: (_, args) => ({ org: { orgId: String(args.org_id), action: 'tool:manage' } }),
    resolve: (_, args, ctx) => ctx.services.tools.get(String(args.org_id), String(args.tool_id)),
  }),
);
restRoute('Query.tool', { method: 'GET', path: `${toolsPath}/:tool_id`, tag, summary: 'Read a tool connector', auth: ['bearer'] });

builder.mutationField('create_tool', (t) =>
  t.field({
    type: ToolRef,
    description:
      'One connector per action type: `http` {url, timeout_ms, headers, secret, allow_private_network}, ' +
      '`mcp` {url, timeout_ms, headers, tool, allow_private_network} (a `tools/call` to an MCP server over Streamable HTTP, ' +
      'calling `tool`, else the action\'s `<action>` part) or `mock` {response}. Any of them may add `description` and ' +
      '`input_schema` (a JSON Schema of type object): how MCP clients of the gateway see its tools. ' +
      'Header values and `secret` are write-only; a private or loopback `url` needs `allow_private_network`.',
    args: {
      org_id: t.arg.id({ required: true }),
      action_type: t.arg.string({ required: true }),
      connector: t.arg.string({ required: true, ...closedValues(connectors) }),
      config: t.arg({ type: ToolConfigInput }),
    },
    authScopes: (_, args) => ({ org: { orgId: String(args.org_id), action: 'tool:manage' } }),
    resolve: (_, args, ctx) => ctx.services.tools.create(String(args.org_id), args, principalOf(ctx)),
  }),
);
// Also 503 (every route has it): a kept "[redacted]" value that this service's KEY_ENCRYPTION_KEY cannot open.
const toolWriteErrors = ['409'] as const;
restRoute('Mutation.create_tool', {
  method: 'POST',
  path: toolsPath,
  status: 201,
  tag,
  summary: 'Configure a tool connector',
  auth: ['bearer'],
  extraErrors: toolWriteErrors,
});

builder.mutationField('update_tool', (t) =>
  t.field({
    type: ToolRef,
    description:
      'Replaces the fields given; `config` is replaced whole, except that a header value or `secret` given as "[redacted]" ' +
      '(as read) keeps the stored one.',
    args: {
      org_id: t.arg.id({ required: true }),
      tool_id: t.arg.id({ required: true }),
      action_type: t.arg.string(),
      connector: t.arg.string(closedValues(connectors)),
      config: t.arg({ type: ToolConfigInput }),
    },
    authScopes: (_, args) => ({ org: { orgId: String(args.org_id), action: 'tool:manage' } }),
    resolve: (_, args, ctx) => ctx.services.tools.update(String(args.org_id), String(args.tool_id), args, principalOf(ctx)),
  }),
);
restRoute('Mutation.update_tool', {
  method: 'PATCH',
  path: `${toolsPath}/:tool_id`,
  tag,
  summary: 'Change a tool connector',
  auth: ['bearer'],
  extraErrors: toolWriteErrors,
});

builder.mutationField('delete_tool', (t) =>
  t.boolean({
    args: { org_id: t.arg.id({ required: true }), tool_id: t.arg.id({ required: true }) },
    authScopes: (_, args) => ({ org: { orgId: String(args.org_id), action: 'tool:manage' } }),
    resolve: async (_, args, ctx) => {
      await ctx.services.tools.remove(String(args.org_id), String(args.tool_id), principalOf(ctx));
      return true;
    },
  }),
);
restRoute('Mutation.delete_tool', { method: 'DELETE', path: `${toolsPath}/:tool_id`, status: 204, tag, summary: 'Remove a tool connector', auth: ['bearer'] });
