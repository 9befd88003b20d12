import type { SqlConnection } from '../../db/sql.js';
import type { Deps } from '../../deps.js';
import { AppError, FieldErrors, conflict, isUniqueViolation, notFound, notFoundIfGone } from '../../errors.js';
import { Prisma, type Tool } from '../../generated/prisma/client.js';
import { actorOf } from '../audit/audit-events.js';
import { recordAudit } from '../audit/audit.service.js';
import { bumpConfigVersion } from '../../lib/config-cache.js';
import type { Principal } from '../../authz/authz.js';
import {
  failure,
  refusedCredentials,
  runHttp,
  runMock,
  type HttpToolConfig,
  type ToolCall,
  type ToolCredentials,
  type ToolResult,
} from './connectors.js';
import type { McpToolConfig } from './mcp-connector-config.js';
import { createMcpUpstreamPool, runMcp } from './mcp-connector.js';
import { definitionHold, type Acceptance, type DefinitionHold } from './tool-definitions.js';
import { createToolDefinitions, notMcp, type DefinitionState } from './tool-definitions.service.js';
import { forgetDefinitions } from './tool-definitions.store.js';
import { parseToolAuth, publicAuth } from './tool-auth.js';
import { createUpstreamGrants } from './upstream-grant.js';
import {
  accessForCall,
  connectionAccess,
  connectionScopeOf,
  withConnection,
  type ConnectionAccess,
  type ConnectionCredentials,
} from './connection-access.js';
import {
  deleteTool,
  findTool,
  findToolForAction,
  insertTool,
  lockToolSecrets,
  toolsOfOrg,
  updateTool,
  updateToolSecrets,
} from './tool.store.js';
import type { WebhookWake } from '../webhook/webhook.service.js';
import type { UserService } from '../user/user.service.js';
import { createToolConnections } from './tool-connections.service.js';
import { sqlConnectionOf } from '../../db/prisma-sql.js';
import { randomId } from '../../lib/ids.js';
import type { PrivateNetworks } from '../../lib/address-policy.js';
import { outboundUrlError } from '../../lib/outbound-http.js';
import { mapValues, SecretUnavailableError, type SecretBox } from '../../lib/secret-box.js';
import { nestsDeeperThan } from '../../lib/storable-input.js';
import {
  ATTR_GEN_AI_OPERATION_NAME,
  ATTR_GEN_AI_TOOL_NAME,
  ATTR_MCP_METHOD_NAME,
  ATTR_MCP_PROTOCOL_VERSION,
  GEN_AI_OPERATION_NAME_VALUE_EXECUTE_TOOL,
} from '../../observability/semantic-conventions.js';
import { ATTR_ERROR_TYPE } from '@opentelemetry/semantic-conventions';
import { secondsSince, SpanKind, SpanStatusCode } from '../../observability/telemetry.js';

export type { ConnectionAccess, UsedConnection } from './connection-access.js';
export { usedConnectionOf } from './connection-access.js';

export const connectors = ['http', 'mock', 'mcp'] as const;
export type ConnectorKind = (typeof connectors)[number];

/** The connectors with write-only values (header values, http's secret), sealed at rest. */
const hasCredentials = (connector: string) => connector === 'http' || connector === 'mcp';

export interface ToolInput {
  action_type?: string | null;
  connector?: string | null;
  config?: unknown;
}

const actionTypePattern = /^[a-z0-9_.-]+$/;
/** The tool names MCP servers use (the MCP specification's recommendation; SDKs warn on others). */
const mcpToolNamePattern = /^[A-Za-z0-9_.-]{1,128}$/;
const DEFAULT_TIMEOUT_MS = 10_000;
const MAX_TIMEOUT_MS = 60_000;
const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** What the API shows for a write-only value that is set; given back on a write, it keeps the value. */
export const REDACTED = '[redacted]';
const MIN_SECRET_LENGTH = 16;
// RFC 9110 field names (tokens) and values (no control characters but tab): what Node will send.
const headerNamePattern = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
const headerValuePattern = /^[\t\x20-\x7e\x80-\xff]*$/;

/** A tool with its write-only values opened: what the gateway caches (per process) and executes. */
export type ConfiguredTool = Tool & {
  /** Null when they do not open with the configured keys: the tool's calls then fail. */
  credentials: ToolCredentials | null;
  /** An mcp tool's upstream definitions, which hold its calls (null for other connectors). */
  definitions: DefinitionState | null;
};

const noCredentials = (): ToolCredentials => ({ secret: null, headers: {}, clientSecret: null });

/**
 * Checks submitted header values into `credentials`; one given as "[redacted]" keeps the stored
 * value (`kept`). Returns the names of the headers whose value this write sets.
 */
function parseHeaders(
  headers: unknown,
  errors: FieldErrors,
  kept: () => ToolCredentials,
  credentials: ToolCredentials,
): string[] {
  if (!isObject(headers) || Object.values(headers).some((v) => typeof v !== 'string')) {
    errors.add('config.headers', 'must be an object of string values');
    return [];
  }
  const names = Object.keys(headers);
  if (new Set(names.map((name) => name.toLowerCase())).size !== names.length) {
    errors.add('config.headers', 'must not name a header twice (names are case-insensitive)');
  }
  const set: string[] = [];
  for (const [name, value] of Object.entries(headers as Record<string, string>)) {
    if (!headerNamePattern.test(name)) {
      errors.add(`config.headers.${name}`, "must be an HTTP header name (letters, digits and !#$%&'*+.^_`|~-)");
    } else if (value === REDACTED) {
      const stored = kept().headers[name];
      if (stored === undefined)
        errors.add(
          `config.headers.${name}`,
          `"${REDACTED}" keeps a stored value, but the tool has no header "${name}"`,
        );
      else credentials.headers[name] = stored;
    } else if (!headerValuePattern.test(value)) {
      errors.add(`config.headers.${name}`, 'must not contain control characters (line breaks included)');
    } else {
      credentials.headers[name] = value;
      set.push(name);
    }
  }
  return set;
}

/** A submitted config split into what is stored in `config` and the write-only credentials. */
interface ParsedConfig {
  stored: (HttpToolConfig | McpToolConfig | { response?: unknown }) & {
    description?: string;
    input_schema?: Record<string, unknown>;
  };
  /** Null for a connector without write-only values (mock). */
  credentials: ToolCredentials | null;
  /** The write-only values this write sets rather than keeps ("headers.<name>", "secret"). */
  set: string[];
  allowPrivate: boolean;
}

/** How one connector kind reads its config: the fields it knows, and what it makes of them. */
interface ConfigParser {
  label: string;
  fields: readonly string[];
  parse(config: Record<string, unknown>, errors: FieldErrors, context: ParseContext): ParsedConfig;
}

/** What parsing a config needs besides it: the stored write-only values (opened only when kept), the deployment's networks. */
interface ParseContext {
  kept: () => ToolCredentials;
  privateNetworks: PrivateNetworks;
}

/** An upstream's endpoint (http and mcp tools): where, how long to wait, the headers sent, the address policy. */
const endpointFields = ['url', 'timeout_ms', 'headers', 'allow_private_network', 'auth'] as const;

function parseEndpoint(config: Record<string, unknown>, errors: FieldErrors, { kept, privateNetworks }: ParseContext) {
  const timeout = config.timeout_ms ?? DEFAULT_TIMEOUT_MS;
  if (typeof timeout !== 'number' || !Number.isInteger(timeout) || timeout < 1 || timeout > MAX_TIMEOUT_MS) {
    errors.add('config.timeout_ms', `must be an integer from 1 to ${MAX_TIMEOUT_MS}`);
  }
  const credentials = noCredentials();
  const set = parseHeaders(config.headers ?? {}, errors, kept, credentials).map((name) => `headers.${name}`);
  const allowPrivate = config.allow_private_network ?? false;
  if (typeof allowPrivate !== 'boolean') errors.add('config.allow_private_network', 'must be a boolean');
  // The webhooks' rule: what the address policy refuses without DNS is refused when saving.
  const access = { privateNetworks, allowPrivateNetwork: allowPrivate === true };
  const urlError = outboundUrlError(config.url, access);
  if (urlError) errors.add('config.url', urlError.message);
  const headerNames = isObject(config.headers) ? Object.keys(config.headers) : [];
  const { auth, clientSecret, secretSet } = parseToolAuth(config.auth, headerNames, errors, {
    keptSecret: () => kept().clientSecret,
    access,
  });
  credentials.clientSecret = clientSecret;
  if (secretSet) set.push('auth.client_secret');
  const stored: HttpToolConfig = {
    url: String(config.url),
    timeout_ms: timeout as number,
    allow_private_network: allowPrivate === true,
    // The static headers are the default, and a tool saved before `auth` existed stores none.
    ...(auth.type === 'headers' ? {} : { auth }),
  };
  return { stored, credentials, set, allowPrivate: allowPrivate === true };
}

const configParsers: Record<ConnectorKind, ConfigParser> = {
  mock: {
    label: 'a mock tool',
    fields: ['response'],
    parse: (config) => ({
      stored: config.response === undefined ? {} : { response: config.response },
      credentials: null,
      set: [],
      allowPrivate: false,
    }),
  },
  http: {
    label: 'an http tool',
    fields: [...endpointFields, 'secret'],
    parse(config, errors, context) {
      const endpoint = parseEndpoint(config, errors, context);
      const { credentials, set } = endpoint;
      if (config.secret === REDACTED) {
        credentials.secret = context.kept().secret;
        if (credentials.secret === null)
          errors.add('config.secret', `"${REDACTED}" keeps the stored secret, but the tool has none`);
      } else if (config.secret != null) {
        if (typeof config.secret !== 'string' || config.secret.length < MIN_SECRET_LENGTH) {
          errors.add('config.secret', `must be a string of at least ${MIN_SECRET_LENGTH} characters`);
        } else {
          credentials.secret = config.secret;
          set.push('secret');
        }
      }
      return endpoint;
    },
  },
  mcp: {
    label: 'an mcp tool',
    // No `secret`: MCP servers authenticate by header (a bearer token or an API key), not by a body signature.
    fields: [...endpointFields, 'tool'],
    parse(config, errors, context) {
      const endpoint = parseEndpoint(config, errors, context);
      const tool = config.tool ?? null;
      if (tool !== null && (typeof tool !== 'string' || !mcpToolNamePattern.test(tool))) {
        errors.add('config.tool', 'must be an MCP tool name: 1 to 128 letters, digits, "_", "." or "-"');
      }
      const stored: McpToolConfig = { ...endpoint.stored, tool: typeof tool === 'string' ? tool : null };
      return { ...endpoint, stored };
    },
  },
};

/**
 * Splits a submitted config into what is stored in `config` (shown by the API, recorded by the
 * audit log) and the write-only credentials (the secret and the header values). A write-only value
 * given as "[redacted]" (as GET shows it) keeps the stored one, so a tool read, edited and written
 * back keeps its credentials; `kept` opens them only then. What every connector shares (the config
 * is an object of known fields) is checked here; each kind's own fields by its parser.
 */
function parseConfig(
  connector: ConnectorKind,
  raw: unknown,
  errors: FieldErrors,
  context: ParseContext,
): ParsedConfig | undefined {
  const config = raw ?? {};
  if (!isObject(config)) {
    errors.add('config', 'must be an object');
    return undefined;
  }
  const parser = configParsers[connector];
  for (const key of Object.keys(config)) {
    if (!parser.fields.includes(key) && !(toolDescriptionFields as readonly string[]).includes(key)) {
      errors.add(`config.${key}`, `unknown field for ${parser.label}`);
    }
  }
  const parsed = parser.parse(config, errors, context);
  return { ...parsed, stored: { ...parsed.stored, ...parseToolDescription(config, errors) } };
}

/** Fields of every connector kind that describe its tools to agents (MCP's tools/list). */
const toolDescriptionFields = ['description', 'input_schema'] as const;
const MAX_DESCRIPTION_LENGTH = 1024;
const MAX_INPUT_SCHEMA_BYTES = 16 * 1024;
const MAX_INPUT_SCHEMA_DEPTH = 16;

/**
 * `description` (what the tools do, for a model) and `input_schema` (the JSON Schema of an
 * action's params: an object schema, as MCP requires of a tool's input). Stored only when given.
 */
function parseToolDescription(config: Record<string, unknown>, errors: FieldErrors) {
  const described: { description?: string; input_schema?: Record<string, unknown> } = {};
  const { description, input_schema: schema } = config;
  if (description != null) {
    if (typeof description !== 'string' || !description.trim() || description.length > MAX_DESCRIPTION_LENGTH) {
      errors.add('config.description', `must be a non-empty string of at most ${MAX_DESCRIPTION_LENGTH} characters`);
    } else {
      described.description = description;
    }
  }
  if (schema != null) {
    if (!isObject(schema) || schema.type !== 'object') {
      errors.add(
        'config.input_schema',
        'must be a JSON Schema object with "type": "object" (the params of an action are an object)',
      );
    } else if (
      nestsDeeperThan(schema, MAX_INPUT_SCHEMA_DEPTH) ||
      Buffer.byteLength(JSON.stringify(schema)) > MAX_INPUT_SCHEMA_BYTES
    ) {
      errors.add(
        'config.input_schema',
        `must nest at most ${MAX_INPUT_SCHEMA_DEPTH} levels and take at most ${MAX_INPUT_SCHEMA_BYTES} bytes as JSON`,
      );
    } else {
      described.input_schema = schema;
    }
  }
  return described;
}

const newToolId = () => randomId('tool');

/** The tool as the API shows it and the audit log records it: header names, never a write-only value. */
export function publicConfig(tool: Tool): Record<string, unknown> {
  const config = tool.config as Record<string, unknown>;
  if (!hasCredentials(tool.connector)) return config;
  const headerNames = Object.keys((tool.secretHeaders ?? {}) as Record<string, string>);
  const shown = {
    ...config,
    headers: Object.fromEntries(headerNames.map((name) => [name, REDACTED])),
    auth: publicAuth(config.auth, tool.authClientSecret !== null),
  };
  return tool.connector === 'http' ? { ...shown, secret: tool.secret ? REDACTED : null } : shown;
}

/** What a tool's pins were read from: its connector, endpoint and upstream tool. */
const upstreamOf = (tool: { connector: string; config: unknown }) => {
  const config = tool.config as { url?: string; tool?: string | null };
  return JSON.stringify([tool.connector, config.url ?? null, config.tool ?? null]);
};

const snapshot = (tool: Tool) => ({
  action_type: tool.actionType,
  connector: tool.connector,
  config: publicConfig(tool),
});

/**
 * Seals every tool secret and header value not yet sealed with the current key (`agent-gateway
 * reencrypt`, in the caller's transaction); returns how many tools it rewrote.
 */
export async function reencryptToolSecrets(conn: SqlConnection, secrets: SecretBox): Promise<number> {
  const rows = await lockToolSecrets(conn);
  const stale = rows.filter((row) =>
    [row.secret, row.auth_client_secret, ...Object.values(row.secret_headers ?? {})].some(
      (value) => value !== null && !secrets.isCurrent(value),
    ),
  );
  for (const row of stale) {
    await updateToolSecrets(conn, {
      id: row.id,
      secret: row.secret === null ? null : secrets.reseal(row.secret),
      secret_headers:
        row.secret_headers === null ? null : mapValues(row.secret_headers, (value) => secrets.reseal(value)),
      auth_client_secret: row.auth_client_secret === null ? null : secrets.reseal(row.auth_client_secret),
    });
  }
  return stale.length;
}

export function createToolService(
  deps: Deps,
  { webhooks, users }: { webhooks: WebhookWake; users: Pick<UserService, 'byIds'> },
) {
  const { env, db, cache, logger, secrets, telemetry } = deps;
  /** The mcp tools' upstream clients, reused across calls; closed by `close()` (the app's stop). */
  const mcpUpstreams = createMcpUpstreamPool({
    maxClients: env.mcpUpstreamPoolSize,
    idleMs: env.mcpUpstreamIdleSeconds * 1000,
  });
  /** Tokens of the tools' grants, held for their calls and definition reads. */
  const grants = createUpstreamGrants({ privateNetworks: env.outboundPrivateNetworks });

  function openCredentials(tool: Tool): ToolCredentials {
    return {
      secret: tool.secret === null ? null : secrets.open(tool.secret),
      headers: mapValues((tool.secretHeaders ?? {}) as Record<string, string>, (value) => secrets.open(value)),
      clientSecret: tool.authClientSecret === null ? null : secrets.open(tool.authClientSecret),
    };
  }

  /** The tool's credentials for reading its upstream; null (and logged) when they do not open. */
  function credentialsOf(tool: Tool): ToolCredentials | null {
    try {
      return openCredentials(tool);
    } catch (error) {
      if (!(error instanceof SecretUnavailableError)) throw error;
      logger.error(
        { tool_id: tool.id, org_id: tool.orgId, reason: error.message },
        'a tool’s secrets do not open; its calls fail',
      );
      return null;
    }
  }
  /** The tools' OAuth connections to their upstreams (docs/decisions/0068-upstream-connections.md). */
  const connections = createToolConnections(deps, {
    webhooks,
    users,
    // An mcp tool with an OAuth connection could not read its definitions before its first connection.
    connected: (tool, actor) => {
      if (tool.connector !== 'mcp' || tool.definitionsPinned) return;
      const read = definitions
        .read(tool, actor)
        .catch((error) => logger.warn({ err: error, tool_id: tool.id }, 'reading a tool’s definitions failed'))
        .finally(() => readsAfterConnecting.delete(read));
      readsAfterConnecting.add(read);
    },
  });
  /** Those reads, not awaited by the callback that starts them: `close` waits for them before closing the pool. */
  const readsAfterConnecting = new Set<Promise<void>>();
  const definitions = createToolDefinitions(deps, {
    credentialsOf,
    grants,
    definitionsAccessFor: (tool, preferredUserId) =>
      connectionAccess(() => connections.definitionsAccessFor(tool, preferredUserId), null),
    upstreams: mcpUpstreams,
    webhooks,
  });

  /**
   * Reads a saved mcp tool's upstream definitions (the first read pins them). A save stands
   * whatever the read meets: an unreachable upstream is the tool's `definitions_error`, and a
   * failure here (the database) is logged, the periodic refresh reads it again.
   */
  async function readAfterSave(tool: Tool, actor: Principal): Promise<void> {
    if (tool.connector !== 'mcp') return;
    await definitions
      .read(tool, actorOf(actor))
      .catch((error) => logger.warn({ err: error, tool_id: tool.id }, 'reading upstream tool definitions failed'));
  }

  /** A stored tool's credentials, when a write keeps them ("[redacted]"). */
  function storedCredentials(tool: Tool | undefined): ToolCredentials {
    if (!tool || !hasCredentials(tool.connector)) return noCredentials();
    try {
      return openCredentials(tool);
    } catch (error) {
      if (!(error instanceof SecretUnavailableError)) throw error;
      logger.error({ tool_id: tool.id, org_id: tool.orgId, reason: error.message }, 'a tool’s secrets do not open');
      throw new AppError(
        'SERVICE_UNAVAILABLE',
        `The tool's stored secret or header values cannot be decrypted with this service's KEY_ENCRYPTION_KEY; give them in full instead of "${REDACTED}"`,
      );
    }
  }

  /** The stored columns of a validated tool, shared by create and update, and the write-only values it sets. */
  function columns(input: ToolInput, existing?: Tool) {
    const { actionType, connector, config } = validate(input, existing);
    const credentials = config.credentials;
    return {
      data: {
        actionType,
        connector,
        config: config.stored as Prisma.InputJsonValue,
        secret: credentials?.secret == null ? null : secrets.seal(credentials.secret),
        secretHeaders: credentials ? mapValues(credentials.headers, (value) => secrets.seal(value)) : Prisma.DbNull,
        authClientSecret: credentials?.clientSecret == null ? null : secrets.seal(credentials.clientSecret),
        allowPrivateNetwork: config.allowPrivate,
      },
      secretsSet: config.set,
    };
  }

  function validate(input: ToolInput, existing?: Tool) {
    const errors = new FieldErrors();
    const actionType = input.action_type ?? existing?.actionType;
    if (!actionType || !actionTypePattern.test(actionType)) {
      errors.add('action_type', 'must be lowercase letters, digits, "_", "." or "-" (the <domain> of a capability)');
    }
    const connector = (input.connector ?? existing?.connector) as ConnectorKind | undefined;
    if (!connector || !connectors.includes(connector))
      errors.add('connector', `must be one of ${connectors.join(', ')}`);
    let stored: ToolCredentials | undefined;
    // Without `config` the stored one is kept: as shown, its write-only values "[redacted]".
    const config =
      connector && connectors.includes(connector)
        ? parseConfig(
            connector,
            input.config === undefined ? existing && publicConfig(existing) : input.config,
            errors,
            {
              kept: () => (stored ??= storedCredentials(existing)),
              privateNetworks: env.outboundPrivateNetworks,
            },
          )
        : undefined;
    errors.throwIfAny();
    return { actionType: actionType!, connector: connector!, config: config! };
  }

  async function create(orgId: string, input: ToolInput, actor: Principal) {
    const { data } = columns(input);
    const { actionType } = data;
    try {
      const created = await db.prisma.$transaction(async (tx) => {
        const tool = await insertTool(tx, { id: newToolId(), orgId, ...data });
        await recordAudit(tx, orgId, actorOf(actor), {
          action: 'tool.created',
          targetType: 'tool',
          targetId: tool.id,
          after: snapshot(tool),
        });
        await bumpConfigVersion(tx);
        return tool;
      });
      await readAfterSave(created, actor);
      return await get(orgId, created.id);
    } catch (error) {
      if (isUniqueViolation(error))
        throw conflict(`A tool for action type "${actionType}" exists`, { field: 'action_type' });
      throw error;
    }
  }

  async function get(orgId: string, toolId: string) {
    const tool = await findTool(db.prisma, orgId, toolId);
    if (!tool) throw notFound('Tool');
    return tool;
  }

  async function list(orgId: string) {
    const items = await toolsOfOrg(db.prisma, orgId);
    return { items, total: items.length };
  }

  async function update(orgId: string, toolId: string, input: ToolInput, actor: Principal) {
    const existing = await get(orgId, toolId);
    const { data, secretsSet } = columns(input, existing);
    const { actionType } = data;
    try {
      const updated = await notFoundIfGone(
        'Tool',
        db.prisma.$transaction(async (tx) => {
          // Another upstream (or another of its tools) has nothing of the old one's pins.
          if (upstreamOf(data) !== upstreamOf(existing)) await forgetDefinitions(sqlConnectionOf(tx), existing.id);
          const tool = await updateTool(tx, orgId, existing.id, data);
          await recordAudit(tx, orgId, actorOf(actor), {
            action: 'tool.updated',
            targetType: 'tool',
            targetId: tool.id,
            before: snapshot(existing),
            after: { ...snapshot(tool), secrets_set: secretsSet },
          });
          await bumpConfigVersion(tx);
          return tool;
        }),
      );
      await readAfterSave(updated, actor);
      return await get(orgId, updated.id);
    } catch (error) {
      if (isUniqueViolation(error))
        throw conflict(`A tool for action type "${actionType}" exists`, { field: 'action_type' });
      throw error;
    }
  }

  /**
   * One statement deletes and returns the row, so of concurrent deletes one wins and the rest are
   * 404. Its OAuth connections go first, in the same transaction; their tokens are revoked at the
   * upstream after the commit.
   */
  async function remove(orgId: string, toolId: string, actor: Principal) {
    const revokeConnections = await notFoundIfGone(
      'Tool',
      db.prisma.$transaction(async (tx) => {
        const tool = await findTool(tx, orgId, toolId);
        const afterCommit = tool ? await connections.removeAllOfTool(tx, tool, actorOf(actor)) : () => undefined;
        const deleted = await deleteTool(tx, orgId, toolId);
        await recordAudit(tx, orgId, actorOf(actor), {
          action: 'tool.deleted',
          targetType: 'tool',
          targetId: deleted.id,
          before: snapshot(deleted),
        });
        await bumpConfigVersion(tx);
        return afterCommit;
      }),
    );
    revokeConnections();
  }

  /**
   * The org's connector for an action type with its credentials opened, or null
   * (TOOL_NOT_CONFIGURED). Cached per process, so credentials are opened once, not per call; tool
   * writes are audited, which empties the cache on every process.
   */
  function forAction(orgId: string, actionType: string): Promise<ConfiguredTool | null> {
    return cache.get(`tool:${orgId}:${actionType}`, async () => {
      const tool = await findToolForAction(db.prisma, orgId, actionType);
      if (!tool) return null;
      const held = tool.connector === 'mcp' ? await definitions.state(tool.id, tool.definitionsPinned) : null;
      return { ...tool, credentials: hasCredentials(tool.connector) ? credentialsOf(tool) : null, definitions: held };
    });
  }

  /**
   * Why a call of `action` (the capability's `<action>`) may not go to the upstream tool it
   * names (an mcp tool's `tool`, else the action) as its definitions stand; undefined when it may.
   */
  function definitionHoldOf(tool: ConfiguredTool, action: string): DefinitionHold | undefined {
    if (!tool.definitions) return undefined;
    return definitionHold(tool.definitions, (tool.config as unknown as McpToolConfig).tool ?? action);
  }

  /** Reads the tool's upstream definitions now (`…/refresh`); the tool as it then is. */
  async function refreshDefinitions(orgId: string, toolId: string, actor: Principal) {
    const tool = await get(orgId, toolId);
    if (tool.connector !== 'mcp') throw notMcp();
    await definitions.read(tool, actorOf(actor));
    return get(orgId, toolId);
  }

  /** Pins what the upstream shows now (`…/accept-definitions`); the tool as it then is. */
  async function acceptDefinitions(
    orgId: string,
    toolId: string,
    acceptances: readonly Acceptance[] | null,
    actor: Principal,
  ) {
    await definitions.accept(await get(orgId, toolId), acceptances, actorOf(actor));
    return get(orgId, toolId);
  }

  /**
   * Runs the connector in a span (GenAI's `execute_tool {capability}`; for an mcp tool MCP's
   * client span `tools/call {upstream tool}`) whose trace context goes out with http and mcp calls,
   * and times it by connector and outcome. `access`: for a tool with an OAuth connection, what
   * the decision found (`upstreamAccessFor`). Never throws: whatever fails is a failed result, so
   * the call still gets its record.
   */
  function execute(tool: ConfiguredTool, call: ToolCall, access?: ConnectionAccess): Promise<ToolResult> {
    const upstreamTool =
      tool.connector === 'mcp' ? ((tool.config as unknown as McpToolConfig).tool ?? call.action.tool) : null;
    const capability = `${call.action.type}:${call.action.tool}`;
    const started = performance.now();
    return telemetry.withSpan(
      upstreamTool === null
        ? `${GEN_AI_OPERATION_NAME_VALUE_EXECUTE_TOOL} ${capability}`
        : `tools/call ${upstreamTool}`,
      {
        kind: tool.connector === 'mock' ? SpanKind.INTERNAL : SpanKind.CLIENT,
        attributes: {
          [ATTR_GEN_AI_OPERATION_NAME]: GEN_AI_OPERATION_NAME_VALUE_EXECUTE_TOOL,
          [ATTR_GEN_AI_TOOL_NAME]: upstreamTool ?? capability,
          ...(upstreamTool === null ? {} : { [ATTR_MCP_METHOD_NAME]: 'tools/call' }),
          'agw.connector': tool.connector,
          'agw.interaction_id': call.interaction_id,
        },
      },
      async (span) => {
        const result = await run(tool, call, access, (version) =>
          span.setAttribute(ATTR_MCP_PROTOCOL_VERSION, version),
        );
        const outcome = result.success ? 'success' : result.error.code;
        telemetry.toolCall(tool.connector, outcome, secondsSince(started));
        if (!result.success)
          span
            .setAttribute(ATTR_ERROR_TYPE, outcome)
            .setStatus({ code: SpanStatusCode.ERROR, message: result.error.message });
        return result;
      },
    );
  }

  async function run(
    tool: ConfiguredTool,
    call: ToolCall,
    access: ConnectionAccess | undefined,
    negotiated: (protocolVersion: string) => void,
  ): Promise<ToolResult> {
    try {
      if (tool.connector === 'mock') return runMock(tool.config as { response?: unknown }, call);
      if (!tool.credentials) {
        return failure(
          'TOOL_CONFIG_INVALID',
          'The tool’s secret or header values cannot be decrypted with the configured KEY_ENCRYPTION_KEY',
        );
      }
      const traceHeaders = telemetry.traceHeaders();
      const send = (credentials: ToolCredentials) =>
        tool.connector === 'mcp'
          ? runMcp(
              mcpUpstreams,
              {
                toolId: tool.id,
                config: tool.config as unknown as McpToolConfig,
                credentials,
                privateNetworks: env.outboundPrivateNetworks,
              },
              call,
              { traceHeaders, negotiated },
            )
          : runHttp(
              tool.config as unknown as HttpToolConfig,
              credentials,
              call,
              env.outboundPrivateNetworks,
              traceHeaders,
            );
      const credentials = tool.credentials;
      const authorize = (renew: boolean): Promise<ConnectionCredentials> =>
        connectionScopeOf(tool) === undefined
          ? grants.credentialsFor(tool, credentials, { renew })
          : renew && access && 'token' in access
            ? connectionAccess(
                () => connections.afterUnauthorized(access.connectionId, access.version),
                access.userId,
              ).then((renewed) => withConnection(credentials, renewed))
            : Promise.resolve(withConnection(credentials, access));
      const first = await authorize(false);
      if (!first.ok) return first.failure;
      const result = await send(first.credentials);
      if (!refusedCredentials(result) || !grants.renewable(tool)) return result;
      // The upstream refused the token (revoked, or expired early): one new token, one more try.
      const renewed = await authorize(true);
      return renewed.ok ? await send(renewed.credentials) : renewed.failure;
    } catch (error) {
      logger.error({ err: error, tool_id: tool.id, interaction_id: call.interaction_id }, 'tool connector failed');
      return failure('TOOL_FAILED', 'The tool connector failed');
    }
  }

  /**
   * For a tool whose calls go with an OAuth connection: the token of the connection a call by
   * `userId` uses (the user behind the API key, the OAuth grant or the session), or where that
   * user connects; undefined for a tool without one. Read before the decision: a call that
   * cannot go is denied, not executed.
   */
  function upstreamAccessFor(tool: Tool, userId: string | null): Promise<ConnectionAccess> | undefined {
    return connectionScopeOf(tool) === undefined ? undefined : accessForCall(connections, tool, userId);
  }

  return {
    create,
    get,
    list,
    update,
    remove,
    forAction,
    definitionHoldOf,
    execute,
    refreshDefinitions,
    acceptDefinitions,
    definitionViews: definitions.views,
    sweepDefinitions: definitions.sweep,
    upstreamAccessFor,
    /** Beneath `upstreamAccessFor`: the token for a tool's upstream, or where to connect (connection-tokens.ts). */
    accessTokenFor: connections.accessTokenFor,
    afterUnauthorized: connections.afterUnauthorized,
    connect: connections.connect,
    connections: connections.list,
    connection: connections.get,
    revokeConnection: connections.revoke,
    startUpstreamAuthorization: connections.start,
    finishUpstreamAuthorization: connections.callback,
    removeConnectionsOfUser: connections.removeAllOfUser,
    flushConnectionUsage: connections.flushUsage,
    pruneConnectionAuthorizations: connections.prune,
    upstreamRedirectUri: connections.redirectUri,
    close: async () => {
      await Promise.all(readsAfterConnecting);
      await Promise.all([mcpUpstreams.close(), connections.close()]);
    },
  };
}

export type ToolService = ReturnType<typeof createToolService>;
