import type { Deps } from '../../deps.js';
import { isUuid } from '../../lib/ids.js';
import { limitOffset } from '../../lib/list-page.js';
import {
  AppError,
  FieldErrors,
  conflict,
  forbidden,
  isUniqueViolation,
  notFound,
  validationError,
} from '../../errors.js';
import type { Manifest, ManifestStatus, Prisma } from '../../generated/prisma/client.js';
import { actorOf } from '../audit/audit-events.js';
import { recordAudit } from '../audit/audit.service.js';
import { bumpConfigVersion } from '../../lib/config-cache.js';
import { ensureAgentForManifest } from '../agent/agent.service.js';
import { agentScope, outOfScope, principalName, type Principal } from '../../authz/authz.js';
import { checkManifest, effectiveLimits, type ManifestDocument } from './manifest-document.js';
import {
  eventsOfAgents,
  findJudgedManifest,
  findLiveManifest,
  findManifest,
  findManifestOfOrg,
  findManifestOrThrow,
  findNewestManifest,
  insertManifestEvent,
  insertPendingManifest,
  listManifests,
  lockOtherLiveManifests,
  manifestsOfAgents,
  markSuperseded,
  updateManifestFrom,
  type ManifestQuery,
  approvedManifestsOfAgents,
} from './manifest.store.js';

type Tx = Prisma.TransactionClient;

export type TransitionName = 'approve' | 'reject' | 'suspend' | 'reactivate' | 'revoke';

/** docs/decisions/0016-manifests.md: every other transition is 409 INVALID_STATE_TRANSITION. */
export const transitions: Record<TransitionName, { from: readonly ManifestStatus[]; to: ManifestStatus }> = {
  approve: { from: ['pending'], to: 'active' },
  reject: { from: ['pending'], to: 'rejected' },
  suspend: { from: ['active'], to: 'suspended' },
  reactivate: { from: ['suspended'], to: 'active' },
  revoke: { from: ['pending', 'active', 'suspended'], to: 'revoked' },
};

export interface TransitionInput {
  reason?: string | null;
  notes?: string | null;
  approved_capabilities?: string[] | null;
}

export interface ManifestFilter {
  status?: ManifestStatus | null;
  team?: string | null;
  limit?: number | null;
  offset?: number | null;
}

export const DEFAULT_PAGE_SIZE = 50;
export const MAX_PAGE_SIZE = 200;

const manifestNotFound = () => notFound('Manifest');

/** The one-pending-per-agent rule (a unique index) as the 409 it is; any other error unchanged. */
export function pendingConflict(error: unknown, agentId: string): unknown {
  return isUniqueViolation(error)
    ? conflict(`Agent "${agentId}" already has a pending manifest`, { svc_id: agentId })
    : error;
}

/** Who changed something, as history shows it: a user's email or an API key's id. */
const changedBy = principalName;

export const documentOf = (manifest: Pick<Manifest, 'document'>) => manifest.document as unknown as ManifestDocument;

async function appendHistory(tx: Tx, manifest: Manifest, status: ManifestStatus, by: string, changes: string[]) {
  await insertManifestEvent(tx, {
    orgId: manifest.orgId,
    svcId: manifest.svcId,
    manifestId: manifest.id,
    version: manifest.version,
    agentVersion: documentOf(manifest).agent.version,
    manifestHash: manifest.manifestHash,
    status,
    changedBy: by,
    changes,
  });
}

/** An agent's current manifest as the gateway judges requests by it. */
export interface CurrentManifest {
  id: string;
  status: ManifestStatus;
  /** `agent.id` of the document (equals the svc_id). */
  agentId: string;
  /** The document's `agent` block as policy conditions see it (`team` "" when absent). */
  agent: { name: string; version: string; team: string };
  approvedCapabilities: readonly string[];
  requireHumanApproval: readonly string[];
  limits: { maxActionsPerHour: number; maxActionsPerDay: number };
}

export function createManifestService({ db, cache }: Deps) {
  const validate = (payload: unknown) => checkManifest(payload);

  /**
   * The manifest the gateway judges an agent by: its active or suspended version, else its newest
   * (pending, rejected or revoked: a denial then names that status). Cached per process; every
   * manifest write bumps the config version, which empties the cache on every process.
   */
  function current(orgId: string, svcId: string): Promise<CurrentManifest | null> {
    return cache.get(`manifest:${orgId}:${svcId}`, async () => {
      const manifest = await findJudgedManifest(db.prisma, orgId, svcId);
      if (!manifest) return null;
      const document = documentOf(manifest);
      return {
        id: manifest.id,
        status: manifest.status,
        agentId: document.agent.id,
        agent: { name: document.agent.name, version: document.agent.version, team: document.agent.team ?? '' },
        approvedCapabilities: manifest.approvedCapabilities,
        requireHumanApproval: document.constraints?.require_human_approval ?? [],
        limits: effectiveLimits(document),
      };
    });
  }

  async function register(orgId: string, payload: unknown, actor: Principal, query: ManifestQuery = {}) {
    const check = checkManifest(payload);
    if (!check.document) throw validationError(check.errors);
    const document = check.document;
    if (outOfScope(actor, document.agent.id)) {
      throw forbidden(`This API key is limited to the agent ids ${agentScope(actor)!.join(', ')}`);
    }
    try {
      const id = await db.prisma.$transaction((tx) => registerChecked(tx, orgId, document, check.manifestHash!, actor));
      return findManifestOrThrow(db.prisma, id, query);
    } catch (error) {
      throw pendingConflict(error, document.agent.id);
    }
  }

  /**
   * Registers a manifest as pending inside the caller's transaction (a marketplace purchase
   * registers the template it sells this way): the same validation, agent creation, history and
   * audit as `register`. Its one-pending-per-agent rule surfaces as a unique violation that ends
   * the transaction; `pendingConflict` turns it into the 409.
   */
  async function registerIn(
    tx: Prisma.TransactionClient,
    orgId: string,
    payload: unknown,
    actor: Principal,
  ): Promise<string> {
    const check = checkManifest(payload);
    if (!check.document) throw validationError(check.errors);
    return registerChecked(tx, orgId, check.document, check.manifestHash!, actor);
  }

  async function registerChecked(
    tx: Prisma.TransactionClient,
    orgId: string,
    document: ManifestDocument,
    manifestHash: string,
    actor: Principal,
  ) {
    const by = changedBy(actor);
    const created = await insertPendingManifest(tx, {
      orgId,
      svcId: document.agent.id,
      version: document.version,
      manifestHash,
      document: document as unknown as Prisma.InputJsonValue,
      team: document.agent.team ?? null,
      requestedCapabilities: document.capabilities.requested,
      createdBy: by,
    });
    await ensureAgentForManifest(tx, orgId, document.agent, created.id, actor);
    const current = await findLiveManifest(tx, orgId, created.svcId);
    const changes = [
      `registered agent version ${document.agent.version} requesting ${document.capabilities.requested.length} capabilities`,
    ];
    if (current)
      changes.push(
        `agent version ${documentOf(current).agent.version} stays ${current.status} until this one is approved`,
      );
    await appendHistory(tx, created, 'pending', by, changes);
    await recordAudit(tx, orgId, actorOf(actor), {
      action: 'manifest.registered',
      targetType: 'manifest',
      targetId: created.id,
      after: { status: 'pending', svc_id: created.svcId, manifest_hash: created.manifestHash },
    });
    await bumpConfigVersion(tx);
    return created.id;
  }

  async function get(orgId: string, manifestId: string, query: ManifestQuery = {}, caller?: Principal) {
    if (!isUuid(manifestId)) throw manifestNotFound();
    const manifest = await findManifestOfOrg(db.prisma, orgId, manifestId, query);
    if (!manifest || outOfScope(caller, manifest.svcId)) throw manifestNotFound();
    return manifest;
  }

  /** The agent's current manifest: active or suspended, else the newest of any status. */
  async function bySvc(orgId: string, svcId: string, query: ManifestQuery = {}, caller?: Principal) {
    if (outOfScope(caller, svcId)) throw manifestNotFound();
    const current = await findLiveManifest(db.prisma, orgId, svcId, query);
    if (current) return current;
    const newest = await findNewestManifest(db.prisma, orgId, svcId, query);
    if (!newest) throw manifestNotFound();
    return newest;
  }

  function page(filter: ManifestFilter) {
    const errors = new FieldErrors();
    const { limit, offset } = limitOffset(filter, { limit: DEFAULT_PAGE_SIZE, max: MAX_PAGE_SIZE }, errors);
    errors.throwIfAny();
    return { take: limit, skip: offset };
  }

  async function list(orgId: string, filter: ManifestFilter, query: ManifestQuery = {}, caller?: Principal) {
    const scope = agentScope(caller);
    return listManifests(
      db.prisma,
      { orgId, svcIds: scope ?? undefined, status: filter.status, team: filter.team },
      page(filter),
      query,
    );
  }

  /** Every registration and status change of the manifest's agent id, newest first. */
  async function history(orgId: string, manifestId: string, caller?: Principal) {
    const manifest = await get(orgId, manifestId, {}, caller);
    return historyOf([{ orgId, svcId: manifest.svcId }]).then(
      (byKey) => byKey.get(historyKey(orgId, manifest.svcId)) ?? [],
    );
  }

  /**
   * The current manifest of several agents in one query (agents' `current_manifest`): the active
   * or suspended version, else the newest, as `current` and `bySvc` choose; keyed by historyKey.
   */
  async function currentOf(agents: readonly { orgId: string; svcId: string }[]) {
    const manifests = await manifestsOfAgents(db.prisma, agents);
    const byKey = new Map<string, Manifest>();
    for (const manifest of manifests) {
      const key = historyKey(manifest.orgId, manifest.svcId);
      const chosen = byKey.get(key);
      const live = (m: Manifest) => m.status === 'active' || m.status === 'suspended';
      if (!chosen || (live(manifest) && !live(chosen))) byKey.set(key, manifest);
    }
    return byKey;
  }

  /** History of several agents in one query (the dashboards' dataloader). */
  async function historyOf(agents: readonly { orgId: string; svcId: string }[]) {
    const events = await eventsOfAgents(db.prisma, agents);
    const byKey = new Map<string, typeof events>();
    for (const event of events) {
      const key = historyKey(event.orgId, event.svcId);
      if (!byKey.has(key)) byKey.set(key, []);
      byKey.get(key)!.push(event);
    }
    return byKey;
  }

  /** Approved versions of several agents' manifests in one query, oldest approval first, by historyKey. */
  async function approvedOf(agents: readonly { orgId: string; svcId: string }[]) {
    const manifests = await approvedManifestsOfAgents(db.prisma, agents);
    const byKey = new Map<string, Manifest[]>();
    for (const manifest of manifests) {
      const key = historyKey(manifest.orgId, manifest.svcId);
      byKey.set(key, [...(byKey.get(key) ?? []), manifest]);
    }
    return byKey;
  }

  async function transition(
    orgId: string,
    manifestId: string,
    name: TransitionName,
    input: TransitionInput,
    actor: Principal,
    query: ManifestQuery = {},
  ) {
    const { from, to } = transitions[name];
    const current = await get(orgId, manifestId);
    const reason = input.reason?.trim() || null;
    const notes = input.notes ?? null;
    if ((name === 'reject' || name === 'suspend' || name === 'revoke') && !reason) {
      throw validationError([{ field: 'reason', message: 'must not be empty' }]);
    }
    const approved = name === 'approve' ? approvedSubset(current, input.approved_capabilities) : undefined;
    const by = changedBy(actor);
    const now = new Date();
    const refused = (status: ManifestStatus) =>
      new AppError('INVALID_STATE_TRANSITION', `Cannot ${name} a manifest that is ${status}`, {
        details: { from: status, to },
      });
    if (!from.includes(current.status)) throw refused(current.status);

    const data: Prisma.ManifestUncheckedUpdateManyInput = { status: to, notes };
    if (name === 'approve') {
      Object.assign(data, {
        approvedCapabilities: approved,
        approvedAt: now,
        approvedBy: by,
        approvedById: actor.type === 'user' ? actor.userId : null,
      });
    }
    if (name === 'suspend') Object.assign(data, { suspendedBy: by, suspendedAt: now, reason });
    if (name === 'reject') Object.assign(data, { rejectedBy: by, rejectedAt: now, reason });
    if (name === 'revoke') Object.assign(data, { revokedBy: by, revokedAt: now, reason });

    try {
      await db.prisma.$transaction(async (tx) => {
        if (name === 'approve') {
          // The version this one replaces steps aside first (the partial unique index allows one
          // active-or-suspended manifest per agent id). Its row is locked, so a concurrent suspend
          // or reactivate of it either finished first and is seen here, or waits and finds it superseded.
          const previous = await lockOtherLiveManifests(tx, orgId, current.svcId, current.id);
          for (const old of previous) {
            await markSuperseded(tx, old.id);
            await appendHistory(tx, old, 'superseded', by, [
              `superseded by agent version ${documentOf(current).agent.version} (${current.id})`,
            ]);
            await recordAudit(tx, orgId, actorOf(actor), {
              action: 'manifest.superseded',
              targetType: 'manifest',
              targetId: old.id,
              before: { status: old.status },
              after: { status: 'superseded', superseded_by: current.id },
            });
            await bumpConfigVersion(tx);
          }
        }
        // Conditional on the status read above: of two concurrent transitions, one updates nothing.
        if (!(await updateManifestFrom(tx, { id: current.id, orgId, from: current.status }, data))) {
          const now = await findManifest(tx, current.id);
          throw refused(now?.status ?? current.status);
        }
        await appendHistory(tx, current, to, by, describe(name, current, approved, reason));
        await recordAudit(tx, orgId, actorOf(actor), {
          action: `manifest.${pastTense[name]}`,
          targetType: 'manifest',
          targetId: current.id,
          before: { status: current.status },
          after: { status: to, ...(approved ? { approved_capabilities: approved } : {}) },
          ...(reason ? { reason } : {}),
        });
        await bumpConfigVersion(tx);
      });
    } catch (error) {
      // The partial unique indexes are the last line: a race the locks did not foresee is a
      // conflict for the caller to retry, never a 500.
      if (isUniqueViolation(error))
        throw conflict("Another change to this agent's manifests happened at the same time; retry");
      throw error;
    }
    return findManifestOrThrow(db.prisma, current.id, query);
  }

  return {
    validate,
    register,
    registerIn,
    get,
    bySvc,
    list,
    history,
    historyOf,
    currentOf,
    approvedOf,
    transition,
    current,
    limitsOf: (manifest: Manifest) => effectiveLimits(documentOf(manifest)),
  };
}

export const historyKey = (orgId: string, svcId: string) => `${orgId}\u0000${svcId}`;

const pastTense = {
  approve: 'approved',
  reject: 'rejected',
  suspend: 'suspended',
  reactivate: 'reactivated',
  revoke: 'revoked',
} as const satisfies Record<TransitionName, string>;

function approvedSubset(manifest: Manifest, requested: string[] | null | undefined): string[] {
  if (requested == null) return manifest.requestedCapabilities;
  const errors = new FieldErrors();
  if (requested.length === 0)
    errors.add('approved_capabilities', 'must approve at least one capability; reject the manifest instead');
  requested.forEach((capability, i) => {
    if (!manifest.requestedCapabilities.includes(capability)) {
      errors.add(`approved_capabilities[${i}]`, `"${capability}" was not requested`);
    }
  });
  if (new Set(requested).size !== requested.length) errors.add('approved_capabilities', 'must not repeat a capability');
  errors.throwIfAny();
  return requested;
}

function describe(
  name: TransitionName,
  manifest: Manifest,
  approved: string[] | undefined,
  reason: string | null,
): string[] {
  switch (name) {
    case 'approve': {
      const requested = manifest.requestedCapabilities;
      const changes = [`approved ${approved!.length} of ${requested.length} capabilities`];
      const left = requested.filter((c) => !approved!.includes(c));
      if (left.length) changes.push(`not approved: ${left.join(', ')}`);
      return changes;
    }
    case 'reactivate':
      return ['reactivated'];
    default:
      return [`${pastTense[name]}: ${reason}`];
  }
}

export type ManifestService = ReturnType<typeof createManifestService>;
