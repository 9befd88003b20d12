import type { Deps } from '../../deps.js';
import { AppError, FieldErrors, conflict, forbidden, isUniqueViolation, notFound } from '../../errors.js';
import type { Agent, Prisma } from '../../generated/prisma/client.js';
import { likeLiteral } from '../../lib/like-literal.js';
import { limitOffset, type ListPage } from '../../lib/list-page.js';
import { actorOf } from '../audit/audit-events.js';
import { recordAudit } from '../audit/audit.service.js';
import { bumpConfigVersion } from '../../lib/config-cache.js';
import { agentScope, outOfScope, principalName, type Principal } from '../../authz/authz.js';
import { agentIdPattern } from '../manifest/manifest-document.js';
import {
  deactivateAgent,
  ensureAgentRow,
  findAgent,
  findAgentGate,
  findAgentOrThrow,
  findAgentSummary,
  insertAgent,
  listAgents,
  reactivateAgent,
  touchLastSeen,
  type AgentState,
} from './agent.store.js';

/**
 * Agents (docs/decisions/0020-agents.md): the identity behind a svc_id across its manifest versions, its
 * owner and labels, and whether the gateway serves it. Registering a manifest for a new id creates
 * the agent in the manifest's transaction (`ensureAgentForManifest`). Deactivating denies the
 * agent everywhere within a poll of the config caches, denies its pending approvals and revokes
 * its capability tokens and its MCP clients' OAuth grants, in one transaction.
 */

export const agentStatuses = ['active', 'deactivated'] as const;
export type AgentStatus = (typeof agentStatuses)[number];

const DEFAULT_PAGE = 50;
const MAX_PAGE = 200;
const MAX_LABELS = 20;
const MAX_NAME = 200;
const MAX_DESCRIPTION = 2000;
const MAX_REASON = 1000;
const labelKeyPattern = /^[a-z0-9]([a-z0-9._/-]{0,61}[a-z0-9])?$/;
const MAX_LABEL_VALUE = 256;
const emailPattern = /^[^\s@]+@[^\s@]+\.[^\s@]+$/;
/** last_seen_at is written at most this often per agent and process (never once per request). */
const LAST_SEEN_INTERVAL_MS = 60_000;

export interface AgentInput {
  agent_id?: string | null;
  name?: string | null;
  description?: string | null;
  team?: string | null;
  owner_email?: string | null;
  labels?: unknown;
}

export interface AgentFilter {
  status?: string | null;
  team?: string | null;
  label?: string | null;
  q?: string | null;
  limit?: number | null;
  offset?: number | null;
}

/** What the gateway needs of an agent: whether it may act, and why not. */
export interface AgentGate {
  status: AgentStatus;
  deactivationReason: string | null;
}

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

export const labelsOf = (agent: AgentState) => agent.labels as Record<string, string>;

const snapshot = (agent: AgentState) => ({
  name: agent.name,
  team: agent.team,
  owner_email: agent.ownerEmail,
  labels: labelsOf(agent),
  status: agent.status,
});

/** Who did something, as agents show it: a user's email or an API key's id (as manifests do). */
const nameOf = principalName;
/** The default owner: the user who registers, when a user does. */
const ownerOf = (principal: Principal) => (principal.type === 'user' ? principal.email : null);
const agentNotFound = () => notFound('Agent');

/**
 * Creates the agent of a manifest's agent id when it has none, and answers 409 when it is
 * deactivated; in the manifest's transaction, holding the agent's row until it commits, so a
 * deactivation cannot slip between the check and the new manifest.
 */
export async function ensureAgentForManifest(
  tx: Prisma.TransactionClient,
  orgId: string,
  agent: { id: string; name: string; description?: string; team?: string },
  manifestId: string,
  principal: Principal,
): Promise<void> {
  const actor = actorOf(principal);
  const { created, row } = await ensureAgentRow(tx, {
    orgId,
    id: agent.id,
    name: agent.name,
    description: agent.description ?? '',
    team: agent.team ?? null,
    ownerEmail: ownerOf(principal),
    createdBy: nameOf(principal),
  });
  if (row.status === 'deactivated') {
    throw conflict(`Agent "${agent.id}" is deactivated; reactivate it before registering a manifest`, {
      agent_id: agent.id,
      status: 'deactivated',
    });
  }
  if (created) {
    await recordAudit(tx, orgId, actor, {
      action: 'agent.created',
      targetType: 'agent',
      targetId: agent.id,
      after: { ...snapshot(row), from_manifest: manifestId },
    });
    await bumpConfigVersion(tx);
  }
}

function checkLabels(raw: unknown, errors: FieldErrors): Record<string, string> {
  if (raw === undefined || raw === null) return {};
  if (!isObject(raw)) {
    errors.add('labels', 'must be an object of string values');
    return {};
  }
  const entries = Object.entries(raw);
  if (entries.length > MAX_LABELS) errors.add('labels', `must have at most ${MAX_LABELS} entries`);
  for (const [key, value] of entries) {
    if (!labelKeyPattern.test(key))
      errors.add(
        `labels.${key}`,
        'the key must be 1–63 of lowercase letters, digits, ".", "_", "-", "/", starting and ending alphanumeric',
      );
    else if (typeof value !== 'string' || value.length > MAX_LABEL_VALUE)
      errors.add(`labels.${key}`, `must be a string of at most ${MAX_LABEL_VALUE} characters`);
  }
  return raw as Record<string, string>;
}

function optionalText(
  value: string | null | undefined,
  field: string,
  max: number,
  errors: FieldErrors,
): string | null {
  const text = value?.trim() || null;
  if (text && text.length > max) errors.add(field, `must be at most ${max} characters`);
  return text;
}

export function createAgentService(
  { db, cache, logger }: Deps,
  modules: {
    approvals: {
      denyPendingOfAgent(
        tx: Prisma.TransactionClient,
        orgId: string,
        svcId: string,
        reason: string,
        decidedBy: string,
      ): Promise<number>;
    };
    tokens: { revokeAllOfAgent(tx: Prisma.TransactionClient, orgId: string, svcId: string): Promise<number> };
    /** OAuth grants of MCP clients (src/modules/oauth/). */
    grants: {
      revokeAllOfAgent(
        tx: Prisma.TransactionClient,
        orgId: string,
        svcId: string,
        actor: Principal,
        reason: string,
      ): Promise<number>;
    };
  },
) {
  async function register(orgId: string, input: AgentInput, principal: Principal): Promise<Agent> {
    const errors = new FieldErrors();
    const id = input.agent_id ?? '';
    if (!agentIdPattern.test(id)) {
      errors.add(
        'agent_id',
        `must be lowercase letters, digits and hyphens, not starting or ending with a hyphen (${agentIdPattern.source})`,
      );
    }
    const name = input.name?.trim() ?? '';
    if (!name || name.length > MAX_NAME) errors.add('name', `must be 1 to ${MAX_NAME} characters`);
    const description = optionalText(input.description, 'description', MAX_DESCRIPTION, errors) ?? '';
    const team = optionalText(input.team, 'team', MAX_NAME, errors);
    const ownerEmail =
      input.owner_email === undefined || input.owner_email === null
        ? ownerOf(principal)
        : input.owner_email.trim().toLowerCase();
    if (ownerEmail !== null && (!emailPattern.test(ownerEmail) || ownerEmail.length > 254))
      errors.add('owner_email', 'must be an email address');
    const labels = checkLabels(input.labels, errors);
    errors.throwIfAny();
    if (outOfScope(principal, id))
      throw forbidden(`This API key is limited to the agent ids ${agentScope(principal)!.join(', ')}`);
    const actor = actorOf(principal);
    try {
      return await db.prisma.$transaction(async (tx) => {
        const agent = await insertAgent(tx, {
          orgId,
          id,
          name,
          description,
          team,
          ownerEmail,
          labels,
          createdBy: nameOf(principal),
        });
        await recordAudit(tx, orgId, actor, {
          action: 'agent.created',
          targetType: 'agent',
          targetId: id,
          after: { ...snapshot(agent), from_manifest: null },
        });
        await bumpConfigVersion(tx);
        return agent;
      });
    } catch (error) {
      if (isUniqueViolation(error)) throw conflict(`Agent "${id}" exists`, { field: 'agent_id' });
      throw error;
    }
  }

  async function get(orgId: string, agentId: string, principal?: Principal): Promise<Agent> {
    if (outOfScope(principal, agentId)) throw agentNotFound();
    const agent = await findAgent(db.prisma, orgId, agentId);
    if (!agent) throw agentNotFound();
    return agent;
  }

  /** The agent's id, name and status, or null when the org has none by that id (the OAuth consent page shows it). */
  async function summary(
    orgId: string,
    agentId: string,
  ): Promise<{ agent_id: string; name: string; status: string } | null> {
    const agent = await findAgentSummary(db.prisma, orgId, agentId);
    return agent && { agent_id: agent.id, name: agent.name, status: agent.status };
  }

  async function list(orgId: string, filter: AgentFilter, principal?: Principal): Promise<ListPage<Agent>> {
    const errors = new FieldErrors();
    const { limit, offset } = limitOffset(filter, { limit: DEFAULT_PAGE, max: MAX_PAGE }, errors);
    if (filter.status && !agentStatuses.includes(filter.status as AgentStatus))
      errors.add('status', `must be one of ${agentStatuses.join(', ')}`);
    let label: [string, string] | null = null;
    if (filter.label) {
      const cut = filter.label.indexOf(':');
      if (cut < 1) errors.add('label', 'must be key:value');
      else label = [filter.label.slice(0, cut), filter.label.slice(cut + 1)];
    }
    errors.throwIfAny();
    const scope = agentScope(principal);
    const search = filter.q?.trim();
    const q = search ? likeLiteral(search) : undefined;
    return listAgents(
      db.prisma,
      { orgId, ids: scope ?? undefined, status: filter.status, team: filter.team, label, prefix: q },
      { take: limit, skip: offset },
    );
  }

  /**
   * Deactivates: the gateway denies the agent (AGENT_DEACTIVATED) on every process within a poll of
   * the config caches (the audit entry bumps their version), its pending approvals become denied
   * ("agent deactivated"), its capability tokens and OAuth grants are revoked, all in one transaction. Records and
   * history stay. Deactivating a deactivated agent changes nothing.
   */
  async function deactivate(
    orgId: string,
    agentId: string,
    reason: string | null | undefined,
    principal: Principal,
  ): Promise<void> {
    const errors = new FieldErrors();
    const why = optionalText(reason, 'reason', MAX_REASON, errors);
    errors.throwIfAny();
    const actor = actorOf(principal);
    const by = nameOf(principal);
    await db.prisma.$transaction(async (tx) => {
      const before = await findAgent(tx, orgId, agentId);
      if (!before || outOfScope(principal, agentId)) throw agentNotFound();
      if (!(await deactivateAgent(tx, orgId, agentId, { by, reason: why }))) return;
      const approvalsDenied = await modules.approvals.denyPendingOfAgent(tx, orgId, agentId, 'agent deactivated', by);
      const tokensRevoked = await modules.tokens.revokeAllOfAgent(tx, orgId, agentId);
      const grantsRevoked = await modules.grants.revokeAllOfAgent(tx, orgId, agentId, principal, 'agent deactivated');
      const after = await findAgentOrThrow(tx, orgId, agentId);
      await recordAudit(tx, orgId, actor, {
        action: 'agent.deactivated',
        targetType: 'agent',
        targetId: agentId,
        before: snapshot(before),
        after: {
          ...snapshot(after),
          approvals_denied: approvalsDenied,
          capability_tokens_revoked: tokensRevoked,
          oauth_grants_revoked: grantsRevoked,
        },
        reason: why ?? undefined,
      });
      await bumpConfigVersion(tx);
    });
  }

  /** Gateway access comes back; revoked tokens and denied approvals stay as they are. */
  async function reactivate(orgId: string, agentId: string, principal: Principal): Promise<Agent> {
    return db.prisma.$transaction(async (tx) => {
      const before = await findAgent(tx, orgId, agentId);
      if (!before) throw agentNotFound();
      if (!(await reactivateAgent(tx, orgId, agentId))) {
        throw new AppError('INVALID_STATE_TRANSITION', `Agent "${agentId}" is not deactivated`, {
          details: { from: before.status, to: 'active' },
        });
      }
      const after = await findAgentOrThrow(tx, orgId, agentId);
      await recordAudit(tx, orgId, actorOf(principal), {
        action: 'agent.reactivated',
        targetType: 'agent',
        targetId: agentId,
        before: snapshot(before),
        after: snapshot(after),
      });
      await bumpConfigVersion(tx);
      return after;
    });
  }

  /**
   * Whether the gateway serves the agent; null when the org has no such agent. Cached per
   * process: a deactivation is audited, which empties the caches on every process within a poll.
   */
  function gate(orgId: string, agentId: string): Promise<AgentGate | null> {
    return cache.get(`agent:${orgId}:${agentId}`, async () => {
      const agent = await findAgentGate(db.prisma, orgId, agentId);
      return agent && { status: agent.status as AgentStatus, deactivationReason: agent.deactivationReason };
    });
  }

  // When this process last wrote last_seen_at, per agent: at most one write a minute each.
  const lastSeenWritten = new Map<string, number>();

  /** Notes that the agent called the gateway; a write at most once a minute, never awaited by the call. */
  function seen(orgId: string, agentId: string, now = Date.now()): void {
    const key = `${orgId}:${agentId}`;
    const written = lastSeenWritten.get(key);
    if (written !== undefined && now - written < LAST_SEEN_INTERVAL_MS) return;
    if (lastSeenWritten.size >= 100_000) {
      for (const [k, at] of lastSeenWritten) if (now - at >= LAST_SEEN_INTERVAL_MS) lastSeenWritten.delete(k);
    }
    lastSeenWritten.set(key, now);
    touchLastSeen(db.sql, orgId, agentId, LAST_SEEN_INTERVAL_MS / 1000).catch((error: unknown) => {
      lastSeenWritten.delete(key);
      logger.warn({ err: error, org_id: orgId, agent_id: agentId }, 'last_seen_at not written');
    });
  }

  return { register, get, summary, list, deactivate, reactivate, gate, seen };
}

export type AgentService = ReturnType<typeof createAgentService>;
