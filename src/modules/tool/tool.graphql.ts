import { builder } from '../../api/builder.js';
import { closedValues } from '../../api/closed-values.js';
import { shapedJsonScalar } from '../../api/scalars.js';
import { toolConfigInputSchema, toolConfigSchema } from './tool-config.json-schema.js';
import { connectors } from './tool.service.js';
import { principalOf } from '../../api/context.js';
import { listType } from '../../api/list.js';
import { mutation, query } from '../../api/operations.js';
import { publicConfig } from './tool.service.js';
import { definitionDiff, definitionStatuses } from './tool-definitions.js';
import type { DefinitionView } from './tool-definitions.service.js';

const ToolDefinitionRef = builder.objectRef<DefinitionView>('ToolDefinition').implement({
  description:
    "An upstream MCP tool's definition (name, title, description, inputSchema, outputSchema, annotations) as pinned by an " +
    'operator and as the upstream shows it now, each with the SHA-256 (hex) of its RFC 8785 canonical JSON.',
  fields: (t) => ({
    name: t.exposeString('name', { description: 'The upstream tool.' }),
    status: t.string({
      description:
        '`pinned`: the upstream shows the pinned definition. `changed`: it shows another; calls are denied (`TOOL_DEFINITION_CHANGED`) until ' +
        'accepted. `new`: listed after the first read, never accepted (denied likewise). `removed`: no longer listed (`TOOL_NOT_FOUND_UPSTREAM`).',
      ...closedValues(definitionStatuses),
      resolve: (definition) => definition.status,
    }),
    pinned_hash: t.exposeString('pinnedHash', { nullable: true }),
    current_hash: t.exposeString('currentHash', {
      nullable: true,
      description: 'Null when the upstream no longer lists the tool.',
    }),
    pinned_at: t.expose('pinnedAt', { type: 'Timestamp', nullable: true }),
    changed_at: t.expose('changedAt', {
      type: 'Timestamp',
      nullable: true,
      description: 'When the upstream first showed something else than the pin; null while it shows the pin.',
    }),
    pinned: t.expose('pinned', {
      type: 'JSON',
      nullable: true,
      description: 'What the agents’ tools/list shows (unless the tool’s config sets its own).',
    }),
    current: t.expose('current', { type: 'JSON', nullable: true }),
    diff: t.string({
      nullable: true,
      description: 'A unified diff from the pinned definition to the current one; null while they are the same.',
      resolve: (definition) => definitionDiff(definition),
    }),
  }),
});

const ToolDefinitionAcceptance = builder.inputType('ToolDefinitionAcceptance', {
  fields: (t) => ({
    name: t.string({ required: true, description: 'The upstream tool.' }),
    current_hash: t.string({
      description:
        'The current hash that was reviewed (null: reviewed as removed): when the upstream moved on since, nothing is accepted (409).',
    }),
  }),
});

const ToolConfig = shapedJsonScalar(
  'ToolConfig',
  'A tool\'s connector settings as read, one shape per connector (`http`, `mcp`, `mock`); write-only values read as "[redacted]".',
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
    definitions: t.field({
      type: [ToolDefinitionRef],
      description:
        'An mcp tool’s upstream tool definitions, by name (empty for other connectors, and until the upstream was first read).',
      resolve: (tool, _, ctx) => (tool.connector === 'mcp' ? ctx.services.tools.definitionViews(tool.id) : []),
    }),
    definitions_checked_at: t.expose('definitionsCheckedAt', {
      type: 'Timestamp',
      nullable: true,
      description: 'When an mcp tool last read its upstream’s definitions (or tried to).',
    }),
    definitions_error: t.exposeString('definitionsError', {
      nullable: true,
      description:
        'Why the last read of the upstream’s definitions failed; null when it did not. Pins stay as they were.',
    }),
    created_at: t.expose('createdAt', { type: 'Timestamp' }),
    updated_at: t.expose('updatedAt', { type: 'Timestamp' }),
  }),
});

const ToolList = listType('ToolList', ToolRef);
const toolsPath = '/orgs/:org_id/tools';
const tag = 'Tools';

const toolsQuery = query('tools', {
  field: (t) =>
    t.field({
      type: ToolList,
      args: { org_id: t.arg.id({ required: true }) },
      authScopes: (_, args) => ({ org: { orgId: String(args.org_id), action: 'tool:manage' } }),
      resolve: (_, args, ctx) => ctx.services.tools.list(String(args.org_id)),
    }),
  rest: { method: 'GET', path: toolsPath, tag, summary: 'List tool connectors', auth: ['bearer'] },
});

const toolQuery = query('tool', {
  field: (t) =>
    t.field({
      type: ToolRef,
      args: { org_id: t.arg.id({ required: true }), tool_id: t.arg.id({ required: true }) },
      authScopes: (_, args) => ({ org: { orgId: String(args.org_id), action: 'tool:manage' } }),
      resolve: (_, args, ctx) => ctx.services.tools.get(String(args.org_id), String(args.tool_id)),
    }),
  rest: {
    method: 'GET',
    path: `${toolsPath}/:tool_id`,
    tag,
    summary: 'Read a tool connector',
    auth: ['bearer'],
  },
});

// Also 503 (every route has it): a kept "[redacted]" value that this service's KEY_ENCRYPTION_KEY cannot open.
const toolWriteErrors = ['409'] as const;

const createToolMutation = mutation('create_tool', {
  field: (t) =>
    t.field({
      type: ToolRef,
      description:
        'One connector per action type: `http` {url, timeout_ms, headers, secret, allow_private_network}, ' +
        '`mcp` {url, timeout_ms, headers, tool, allow_private_network} (a `tools/call` to an MCP server over Streamable HTTP, ' +
        "calling `tool`, else the action's `<action>` part) or `mock` {response}. Any of them may add `description` and " +
        '`input_schema` (a JSON Schema of type object): how MCP clients of the gateway see its tools. ' +
        'Header values and `secret` are write-only; a private or loopback `url` needs `allow_private_network` and ' +
        "its range in the deployment's `OUTBOUND_PRIVATE_NETWORKS` (link-local addresses never).",
      args: {
        org_id: t.arg.id({ required: true }),
        action_type: t.arg.string({ required: true }),
        connector: t.arg.string({ required: true, ...closedValues(connectors) }),
        config: t.arg({ type: ToolConfigInput }),
      },
      authScopes: (_, args) => ({ org: { orgId: String(args.org_id), action: 'tool:manage' } }),
      resolve: (_, args, ctx) => ctx.services.tools.create(String(args.org_id), args, principalOf(ctx)),
    }),
  rest: {
    method: 'POST',
    path: toolsPath,
    status: 201,
    tag,
    summary: 'Configure a tool connector',
    auth: ['bearer'],
    extraErrors: toolWriteErrors,
  },
});

const updateToolMutation = mutation('update_tool', {
  field: (t) =>
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
      resolve: (_, args, ctx) =>
        ctx.services.tools.update(String(args.org_id), String(args.tool_id), args, principalOf(ctx)),
    }),
  rest: {
    method: 'PATCH',
    path: `${toolsPath}/:tool_id`,
    tag,
    summary: 'Change a tool connector',
    auth: ['bearer'],
    extraErrors: toolWriteErrors,
  },
});

const deleteToolMutation = mutation('delete_tool', {
  field: (t) =>
    t.boolean({
      args: { org_id: t.arg.id({ required: true }), tool_id: t.arg.id({ required: true }) },
      authScopes: (_, args) => ({ org: { orgId: String(args.org_id), action: 'tool:manage' } }),
      resolve: async (_, args, ctx) => {
        await ctx.services.tools.remove(String(args.org_id), String(args.tool_id), principalOf(ctx));
        return true;
      },
    }),
  rest: {
    method: 'DELETE',
    path: `${toolsPath}/:tool_id`,
    status: 204,
    tag,
    summary: 'Remove a tool connector',
    auth: ['bearer'],
  },
});

const refreshToolDefinitionsMutation = mutation('refresh_tool_definitions', {
  field: (t) =>
    t.field({
      type: ToolRef,
      description:
        'Reads the mcp tool’s upstream definitions (`tools/list`) now, as every MCP_UPSTREAM_REFRESH_SECONDS does. The first read pins them; ' +
        'later differences are shown as `changed`, `new` or `removed` (audit and webhook `tool.definition_changed`). ' +
        'An upstream that cannot be read leaves the pins as they are and shows why in `definitions_error`.',
      args: { org_id: t.arg.id({ required: true }), tool_id: t.arg.id({ required: true }) },
      authScopes: (_, args) => ({ org: { orgId: String(args.org_id), action: 'tool:manage' } }),
      resolve: (_, args, ctx) =>
        ctx.services.tools.refreshDefinitions(String(args.org_id), String(args.tool_id), principalOf(ctx)),
    }),
  rest: {
    method: 'POST',
    path: `${toolsPath}/:tool_id/refresh`,
    tag,
    summary: 'Read an mcp tool’s upstream definitions now',
    auth: ['bearer'],
  },
});

const acceptToolDefinitionsMutation = mutation('accept_tool_definitions', {
  field: (t) =>
    t.field({
      type: ToolRef,
      description:
        'Pins what the upstream shows now: every definition that is `changed`, `new` or `removed` (forgotten), or the ones listed. ' +
        'A listed `current_hash` must still be the current one (409 otherwise); a listed name that is `pinned` or unknown is a 422.',
      args: {
        org_id: t.arg.id({ required: true }),
        tool_id: t.arg.id({ required: true }),
        definitions: t.arg({
          type: [ToolDefinitionAcceptance],
          description: 'Default: every definition that differs from its pin.',
        }),
      },
      authScopes: (_, args) => ({ org: { orgId: String(args.org_id), action: 'tool:manage' } }),
      resolve: (_, args, ctx) =>
        ctx.services.tools.acceptDefinitions(
          String(args.org_id),
          String(args.tool_id),
          args.definitions ?? null,
          principalOf(ctx),
        ),
    }),
  rest: {
    method: 'POST',
    path: `${toolsPath}/:tool_id/accept-definitions`,
    tag,
    summary: 'Accept an mcp tool’s changed upstream definitions',
    auth: ['bearer'],
    extraErrors: ['409'],
  },
});

/** The operations of this file, in the order the OpenAPI document lists their routes. */
export const toolOperations = [
  toolsQuery,
  toolQuery,
  createToolMutation,
  updateToolMutation,
  deleteToolMutation,
  refreshToolDefinitionsMutation,
  acceptToolDefinitionsMutation,
];
