import type { Deps } from '../../deps.js';
import { FieldErrors, conflict, isUniqueViolation, notFound, notFoundIfGone } from '../../errors.js';
import type { Prisma, Tool } from '../../generated/prisma/client.js';
import { actorOf } from '../audit/audit-events.js';
import { recordAudit } from '../audit/audit.service.js';
import type { Principal } from '../auth/authz.js';
import { runHttp, runMock, type HttpToolConfig, type ToolCall, type ToolResult } from './connectors.js';
import { randomId } from '../../lib/ids.js';
import { outboundUrlError } from '../../lib/outbound-http.js';

export const connectors = ['http', 'mock'] as const;
export type ConnectorKind = (typeof connectors)[number];

export interface ToolInput {
  action_type?: string | null;
  connector?: string | null;
  config?: unknown;
}

const actionTypePattern = /^[a-z0-9_.-]+$/;
const DEFAULT_TIMEOUT_MS = 10_000;
const MAX_TIMEOUT_MS = 60_000;
const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Splits a submitted config into what is stored in `config` and the write-only secret. */
function parseConfig(connector: ConnectorKind, raw: unknown, errors: FieldErrors) {
  const config = raw ?? {};
  if (!isObject(config)) {
    errors.add('config', 'must be an object');
    return undefined;
  }
  if (connector === 'mock') {
    for (const key of Object.keys(config)) if (key !== 'response') errors.add(`config.${key}`, 'unknown field for a mock tool');
    return { stored: config.response === undefined ? {} : { response: config.response }, secret: null, allowPrivate: false };
  }
  const known = ['url', 'timeout_ms', 'headers', 'secret', 'allow_private_network'];
  for (const key of Object.keys(config)) if (!known.includes(key)) errors.add(`config.${key}`, 'unknown field for an http tool');
  const timeout = config.timeout_ms ?? DEFAULT_TIMEOUT_MS;
  if (typeof timeout !== 'number' || !Number.isInteger(timeout) || timeout < 1 || timeout > MAX_TIMEOUT_MS) {
    errors.add('config.timeout_ms', `must be an integer from 1 to ${MAX_TIMEOUT_MS}`);
  }
  const headers = config.headers ?? {};
  if (!isObject(headers) || Object.values(headers).some((v) => typeof v !== 'string')) {
    errors.add('config.headers', 'must be an object of string values');
  }
  if (config.secret !== undefined && (typeof config.secret !== 'string' || config.secret.length < 16)) {
    errors.add('config.secret', 'must be a string of at least 16 characters');
  }
  const allowPrivate = config.allow_private_network ?? false;
  if (typeof allowPrivate !== 'boolean') errors.add('config.allow_private_network', 'must be a boolean');
  // The webhooks' rule: what is known to be private without DNS is refused when saving.
  const urlError = outboundUrlError(config.url, allowPrivate === true);
  if (urlError) errors.add('config.url', urlError.message);
  const stored: HttpToolConfig = {
    url: String(config.url),
    timeout_ms: timeout as number,
    headers: headers as Record<string, string>,
    allow_private_network: allowPrivate === true,
  };
  return { stored, secret: (config.secret as string | undefined) ?? null, allowPrivate: allowPrivate === true };
}

/** A stored tool's config as it would have been submitted (the http secret put back). */
const storedInput = (tool: Tool) =>
  tool.connector === 'http' && tool.secret ? { ...(tool.config as object), secret: tool.secret } : tool.config;

const newToolId = () => randomId('tool');

/** The tool as the API shows it: the secret never leaves, only whether one is set. */
export function publicConfig(tool: Tool): Record<string, unknown> {
  const config = tool.config as Record<string, unknown>;
  return tool.connector === 'http' ? { ...config, secret: tool.secret ? '[redacted]' : null } : config;
}

export function createToolService({ db }: Deps) {
  /** The stored columns of a validated tool, shared by create and update. */
  function columns(input: ToolInput, existing?: Tool) {
    const { actionType, connector, config } = validate(input, existing);
    return {
      actionType,
      connector,
      config: config.stored as Prisma.InputJsonValue,
      secret: config.secret,
      allowPrivateNetwork: config.allowPrivate,
    };
  }

  function validate(input: ToolInput, existing?: Tool) {
    const errors = new FieldErrors();
    const actionType = input.action_type ?? existing?.actionType;
    if (!actionType || !actionTypePattern.test(actionType)) {
      errors.add('action_type', 'must be lowercase letters, digits, "_", "." or "-" (the <domain> of a capability)');
    }
    const connector = (input.connector ?? existing?.connector) as ConnectorKind | undefined;
    if (!connector || !connectors.includes(connector)) errors.add('connector', `must be one of ${connectors.join(', ')}`);
    const config =
      connector && connectors.includes(connector)
        ? parseConfig(connector, input.config === undefined ? existing && storedInput(existing) : input.config, errors)
        : undefined;
    errors.throwIfAny();
    return { actionType: actionType!, connector: connector!, config: config! };
  }

  async function create(orgId: string, input: ToolInput, actor: Principal) {
    const data = columns(input);
    const { actionType, connector } = data;
    try {
      return await db.prisma.$transaction(async (tx) => {
        const tool = await tx.tool.create({ data: { id: newToolId(), orgId, ...data } });
        await recordAudit(tx, orgId, actorOf(actor), {
          action: 'tool.created',
          targetType: 'tool',
          targetId: tool.id,
          after: { action_type: actionType, connector, config: publicConfig(tool) },
        });
        return tool;
      });
    } catch (error) {
      if (isUniqueViolation(error)) throw conflict(`A tool for action type "${actionType}" exists`, { field: 'action_type' });
      throw error;
    }
  }

  async function get(orgId: string, toolId: string) {
    const tool = await db.prisma.tool.findFirst({ where: { id: toolId, orgId } });
    if (!tool) throw notFound('Tool');
    return tool;
  }

  async function list(orgId: string) {
    const items = await db.prisma.tool.findMany({ where: { orgId }, orderBy: [{ actionType: 'asc' }] });
    return { items, total: items.length };
  }

  async function update(orgId: string, toolId: string, input: ToolInput, actor: Principal) {
    const existing = await get(orgId, toolId);
    const data = columns(input, existing);
    const { actionType } = data;
    try {
      return await notFoundIfGone('Tool', db.prisma.$transaction(async (tx) => {
        const tool = await tx.tool.update({ where: { id: existing.id, orgId }, data });
        await recordAudit(tx, orgId, actorOf(actor), {
          action: 'tool.updated',
          targetType: 'tool',
          targetId: tool.id,
          before: { action_type: existing.actionType, connector: existing.connector, config: publicConfig(existing) },
          after: { action_type: tool.actionType, connector: tool.connector, config: publicConfig(tool) },
        });
        return tool;
      }));
    } catch (error) {
      if (isUniqueViolation(error)) throw conflict(`A tool for action type "${actionType}" exists`, { field: 'action_type' });
      throw error;
    }
  }

  /** One statement deletes and returns the row, so of concurrent deletes one wins and the rest are 404. */
  async function remove(orgId: string, toolId: string, actor: Principal) {
    await notFoundIfGone(
      'Tool',
      db.prisma.$transaction(async (tx) => {
        const deleted = await tx.tool.delete({ where: { id: toolId, orgId } });
        await recordAudit(tx, orgId, actorOf(actor), {
          action: 'tool.deleted',
          targetType: 'tool',
          targetId: deleted.id,
          before: { action_type: deleted.actionType, connector: deleted.connector, config: publicConfig(deleted) },
        });
      }),
    );
  }

  /** The org's connector for an action type, or undefined (TOOL_NOT_CONFIGURED). */
  const forAction = (orgId: string, actionType: string) =>
    db.prisma.tool.findUnique({ where: { orgId_actionType: { orgId, actionType } } });

  function execute(tool: Tool, call: ToolCall): Promise<ToolResult> {
    if (tool.connector === 'mock') return Promise.resolve(runMock(tool.config as { response?: unknown }, call));
    return runHttp(tool.config as unknown as HttpToolConfig, tool.secret, call);
  }

  return { create, get, list, update, remove, forAction, execute };
}

export type ToolService = ReturnType<typeof createToolService>;
