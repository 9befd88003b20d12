import { sqlConnectionOf } from '../../db/prisma-sql.js';
import type { Deps } from '../../deps.js';
import { conflict, FieldErrors, validationError } from '../../errors.js';
import type { Prisma, Tool } from '../../generated/prisma/client.js';
import { randomId } from '../../lib/ids.js';
import type { Actor } from '../audit/audit-events.js';
import { recordAudit } from '../audit/audit.service.js';
import { bumpConfigVersion } from '../../lib/config-cache.js';
import type { WebhookWake } from '../webhook/webhook.service.js';
import { enqueueWebhookEvent } from '../webhook/webhook.service.js';
import type { ToolCredentials } from './connectors.js';
import type { McpToolConfig } from './mcp-connector-config.js';
import { listUpstreamTools, type McpUpstreamPool } from './mcp-connector.js';
import type { UpstreamGrants } from './upstream-grant.js';
import { connectionScopeOf, withConnection, type ConnectionAccess } from './connection-access.js';
import {
  definitionDiff,
  listProblem,
  planAccept,
  planRefresh,
  statusOf,
  type Acceptance,
  type DefinitionChange,
  type KeptDefinition,
} from './tool-definitions.js';
import { claimDueTools, lockTool, markRead, replaceDefinitions, selectDefinitions } from './tool-definitions.store.js';
import { findToolById } from './tool.store.js';

/**
 * Reads, keeps and pins an mcp tool's upstream definitions (docs/decisions/0050-upstream-tool-definitions.md):
 * after a save, on request and periodically. The upstream is read outside any transaction; what
 * was read is then planned against the kept definitions with the tool's row locked, so reads of
 * one tool take turns and a change is reported once.
 */

/** A tool's definitions as the gateway holds calls to them: whether they were pinned, and each by name. */
export interface DefinitionState {
  pinned: boolean;
  definitions: ReadonlyMap<string, KeptDefinition>;
}

/** A kept definition as the API shows it (its diff is worked out only when asked for). */
export interface DefinitionView extends KeptDefinition {
  status: ReturnType<typeof statusOf>;
}

/**
 * An audit entry and a webhook payload carry at most this much of a diff: a definition may take
 * up to a MiB, and the tool itself shows the whole diff.
 */
const MAX_REPORTED_DIFF = 16 * 1024;
const boundedDiff = (diff: string | null) =>
  diff !== null && diff.length > MAX_REPORTED_DIFF
    ? `${diff.slice(0, MAX_REPORTED_DIFF)}\n… (cut at ${MAX_REPORTED_DIFF} characters: the tool shows the whole diff)\n`
    : diff;

/** How many due tools one sweep claims, and how many it reads at once. */
const SWEEP_BATCH = 20;
const SWEEP_CONCURRENCY = 4;
const SYSTEM: Actor = { type: 'system', id: null, label: 'tool definitions refresh' };

interface Collaborators {
  /** The tool's write-only values opened, or null when this service's key cannot open them. */
  credentialsOf(tool: Tool): ToolCredentials | null;
  /** What a request to the upstream carries when the tool holds a grant (upstream-grant.ts). */
  grants: UpstreamGrants;
  /**
   * For a tool with an OAuth connection, the token its definitions are read with (the acting
   * user's connection when they have one): connection-tokens.ts.
   */
  definitionsAccessFor(tool: Tool, preferredUserId: string | null): Promise<ConnectionAccess>;
  /** The mcp tools' upstream clients: a read uses the tool's when it has one (docs/decisions/0049-mcp-upstream-pool.md). */
  upstreams: McpUpstreamPool;
  /** The app's webhook dispatcher, woken once a change's events are committed. */
  webhooks: WebhookWake;
}

export function createToolDefinitions(
  { db, env, logger }: Deps,
  { credentialsOf, grants, definitionsAccessFor, upstreams, webhooks }: Collaborators,
) {
  async function state(toolId: string, pinned: boolean): Promise<DefinitionState> {
    const kept = pinned ? await selectDefinitions(db.sql, toolId) : [];
    return { pinned, definitions: new Map(kept.map((definition) => [definition.name, definition])) };
  }

  async function views(toolId: string): Promise<DefinitionView[]> {
    const kept = await selectDefinitions(db.sql, toolId);
    return kept.map((definition) => ({ ...definition, status: statusOf(definition) }));
  }

  /** What the upstream lists now, or why it could not be read. */
  async function readUpstream(
    tool: Tool,
    actor: Actor,
  ): Promise<{ ok: true; tools: Parameters<typeof planRefresh>[1] } | { ok: false; error: string }> {
    const credentials = credentialsOf(tool);
    if (!credentials)
      return {
        ok: false,
        error: 'The tool’s header values cannot be decrypted with the configured KEY_ENCRYPTION_KEY',
      };
    const authorized =
      connectionScopeOf(tool) === undefined
        ? await grants.credentialsFor(tool, credentials)
        : withConnection(credentials, await definitionsAccessFor(tool, actor.type === 'user' ? actor.id : null));
    if (!authorized.ok)
      return { ok: false, error: `${authorized.failure.error.code}: ${authorized.failure.error.message}` };
    const upstream = {
      toolId: tool.id,
      config: tool.config as unknown as McpToolConfig,
      credentials: authorized.credentials,
      privateNetworks: env.outboundPrivateNetworks,
    };
    const listed = await listUpstreamTools(upstreams, upstream, { interactionId: randomId('defs') });
    if (!listed.ok) return { ok: false, error: `${listed.error.code}: ${listed.error.message}` };
    const problem = listProblem(listed.tools);
    return problem ? { ok: false, error: problem } : { ok: true, tools: listed.tools };
  }

  /**
   * Reads the tool's upstream definitions and keeps them: the first successful read pins them, a
   * later one reports what moved away from its pin (audit and webhook `tool.definition_changed`).
   * A failed read is kept as the tool's `definitions_error`, and pins stay as they are. A read of
   * a tool changed or deleted meanwhile is dropped. Never throws for the upstream's sake.
   */
  async function read(tool: Tool, actor: Actor = SYSTEM): Promise<void> {
    if (tool.connector !== 'mcp') return;
    const upstream = await readUpstream(tool, actor);
    const changes = await db.prisma.$transaction(async (tx) => {
      const sql = sqlConnectionOf(tx);
      const locked = await lockTool(sql, tool.id);
      if (!locked || locked.updated_at.getTime() !== tool.updatedAt.getTime()) return [];
      if (!upstream.ok) {
        await markRead(sql, tool.id, { error: upstream.error });
        return [];
      }
      const plan = planRefresh(await selectDefinitions(sql, tool.id), upstream.tools, {
        alreadyPinned: locked.definitions_pinned,
        only: (tool.config as unknown as McpToolConfig).tool,
        now: new Date(),
      });
      await replaceDefinitions(sql, tool.id, plan.kept);
      await markRead(sql, tool.id, { pinned: true, error: null });
      if (plan.pinnedNow) {
        await recordAudit(tx, tool.orgId, actor, {
          action: 'tool.definitions_pinned',
          targetType: 'tool',
          targetId: tool.id,
          after: { definitions: plan.kept.map((d) => ({ name: d.name, pinned_hash: d.pinnedHash! })) },
        });
        await bumpConfigVersion(tx);
      }
      for (const change of plan.changes) await reportChange(tx, tool, actor, change, plan.kept);
      return plan.changes;
    });
    if (changes.length) {
      webhooks.wake();
      logger.warn({ tool_id: tool.id, org_id: tool.orgId, changes }, 'upstream MCP tool definitions changed');
    }
  }

  async function reportChange(
    tx: Prisma.TransactionClient,
    tool: Tool,
    actor: Actor,
    change: DefinitionChange,
    kept: readonly KeptDefinition[],
  ) {
    const definition = kept.find((d) => d.name === change.name);
    const diff = definition ? boundedDiff(definitionDiff(definition)) : null;
    const data = { tool_id: tool.id, action_type: tool.actionType, ...change, diff };
    await recordAudit(tx, tool.orgId, actor, {
      action: 'tool.definition_changed',
      targetType: 'tool',
      targetId: tool.id,
      after: data,
    });
    await bumpConfigVersion(tx);
    await enqueueWebhookEvent(sqlConnectionOf(tx), tool.orgId, 'tool.definition_changed', data);
  }

  /**
   * Pins what the upstream shows now (docs/decisions/0050-upstream-tool-definitions.md): every
   * definition that differs from its pin, or the ones named, each optionally with the current
   * hash the operator reviewed. 422 for a name that is not kept or does not differ from its pin;
   * 409 when the upstream moved again after the operator looked.
   */
  async function accept(tool: Tool, acceptances: readonly Acceptance[] | null, actor: Actor): Promise<void> {
    if (tool.connector !== 'mcp') throw notMcp();
    await db.prisma.$transaction(async (tx) => {
      const sql = sqlConnectionOf(tx);
      await lockTool(sql, tool.id);
      const plan = planAccept(await selectDefinitions(sql, tool.id), acceptances, new Date());
      if (!plan.ok) {
        if (plan.problem === 'moved') {
          throw conflict(
            `The upstream's definition of "${plan.name}" changed again after it was reviewed: read the tool and accept what it shows now`,
            {
              tool: plan.name,
            },
          );
        }
        const errors = new FieldErrors();
        const why =
          plan.problem === 'unknown'
            ? 'is not a definition this tool keeps'
            : 'does not differ from its pinned definition';
        errors.add('definitions', `"${plan.name}" ${why}`);
        errors.throwIfAny();
        return;
      }
      if (plan.accepted.length === 0) return;
      await replaceDefinitions(sql, tool.id, plan.kept);
      await recordAudit(tx, tool.orgId, actor, {
        action: 'tool.definitions_accepted',
        targetType: 'tool',
        targetId: tool.id,
        after: { accepted: plan.accepted },
      });
      await bumpConfigVersion(tx);
    });
  }

  /** Reads the definitions of the mcp tools due for it (MCP_UPSTREAM_REFRESH_SECONDS), a few at a time. */
  async function sweep(): Promise<number> {
    const due = await claimDueTools(db.sql, env.mcpUpstreamRefreshSeconds, SWEEP_BATCH);
    const queue = [...due];
    const worker = async () => {
      for (let next = queue.shift(); next; next = queue.shift()) {
        const tool = await findToolById(db.prisma, next.id);
        if (tool) await read(tool);
      }
    };
    await Promise.all(Array.from({ length: SWEEP_CONCURRENCY }, worker));
    return due.length;
  }

  return { state, views, read, accept, sweep };
}

export const notMcp = () =>
  validationError([{ field: 'tool_id', message: 'is not an mcp tool: only mcp tools have upstream definitions' }]);

export type ToolDefinitions = ReturnType<typeof createToolDefinitions>;
