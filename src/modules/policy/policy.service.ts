import type { Logger } from 'pino';
import type { Deps } from '../../deps.js';
import { conflict, FieldErrors, isUniqueViolation, notFound, notFoundIfGone, validationError } from '../../errors.js';
import { Prisma, type Policy } from '../../generated/prisma/client.js';
import { randomId } from '../../lib/ids.js';
import { limitOffset, type ListPage } from '../../lib/list-page.js';
import { actorOf, type PolicySnapshot } from '../audit/audit-events.js';
import { recordAudit } from '../audit/audit.service.js';
import { bumpConfigVersion } from '../../lib/config-cache.js';
import type { Principal } from '../../authz/authz.js';
import { agentIdPattern } from '../manifest/manifest-document.js';
import { DETECTORS, type Detector } from './content-detectors.js';
import { compileCondition, describePosition, type CompiledCondition, type CompileOptions } from './policy-condition.js';
import {
  byPriority,
  LABEL_RULE,
  labelPattern,
  policyEffects,
  policyModes,
  rateLimitScopes,
  resultEffects,
  type ActivePolicy,
  type PolicyEffect,
  type PolicyMode,
  type RateLimitScope,
} from './policy-rules.js';
import {
  deletePolicy,
  findPolicy,
  findPolicyOrThrow,
  insertPolicy,
  lockOrgAndCountPolicies,
  lockPolicy,
  policiesOfOrg,
  policiesOfOrgs,
  replacePolicy,
} from './policy.store.js';

/**
 * An org's policies (docs/guides/policies.md, docs/decisions/0019-policy-management.md):
 * validated writes, each audited in its transaction (which also empties every process's config
 * cache), and `active`, the enabled policies as the gateway applies them, cached per process with
 * their conditions compiled once per version.
 */

/** A create or a replace (PUT): every field; an absent optional one takes its default. */
export interface PolicyInput {
  name?: string | null;
  description?: string | null;
  enabled?: boolean | null;
  mode?: string | null;
  priority?: number | null;
  effect?: string | null;
  target?: unknown;
  condition?: string | null;
  rate_limit?: unknown;
  message?: string | null;
  labels?: unknown;
  history_window_seconds?: unknown;
  detectors?: unknown;
}

export interface PolicyFilter {
  enabled?: boolean | null;
  mode?: string | null;
  effect?: string | null;
  /** Policies that apply to this agent: those without `target.svc_ids`, and those naming it. */
  svc_id?: string | null;
  limit?: number | null;
  offset?: number | null;
}

// Type aliases rather than interfaces: Prisma takes them as JSON values as they are.

/** As stored in `policies.target` and shown by the API: an absent list matches everything. */
export type PolicyTarget = {
  svc_ids?: string[];
  capabilities?: string[];
};

/** As stored in `policies.rate_limit` and shown by the API. */
export type PolicyRateLimit = {
  limit: number;
  window_seconds: number;
  per: RateLimitScope;
};

export const MAX_POLICIES_PER_ORG = 200;
export const MAX_NAME_LENGTH = 100;
export const MAX_DESCRIPTION_LENGTH = 2000;
export const MAX_MESSAGE_LENGTH = 500;
export const MAX_PRIORITY = 1000;
export const DEFAULT_PRIORITY = 100;
export const MAX_TARGET_ENTRIES = 100;
export const MAX_RATE_LIMIT = 1_000_000;
export const MAX_WINDOW_SECONDS = 86_400;
export const MAX_HISTORY_WINDOW_SECONDS = 86_400;
export const MAX_LABELS = 10;

export const DEFAULT_PAGE_SIZE = 50;
export const MAX_PAGE_SIZE = 200;

/** `<domain>:<action>`, either part `*` or the manifest's capability characters. */
export const capabilityPatternRule = /^(\*|[a-z0-9_.-]+):(\*|[a-z0-9_.-]+)$/;

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const isOneOf = <T extends string>(values: readonly T[], value: unknown): value is T => values.includes(value as T);
const oneOf = (values: readonly string[]) => `must be one of ${values.join(', ')}`;
const isIntegerIn = (value: unknown, min: number, max: number): value is number =>
  Number.isInteger(value) && (value as number) >= min && (value as number) <= max;

export const targetOf = (policy: Policy): PolicyTarget => policy.target as PolicyTarget;
/** The target as the API shows it: both lists, null where absent (= every agent, every capability). */
export function publicTarget(policy: Policy): PolicySnapshot['target'] {
  const { svc_ids: svcIds = null, capabilities = null } = targetOf(policy);
  return { svc_ids: svcIds, capabilities };
}
export const rateLimitOf = (policy: Policy): PolicyRateLimit | null =>
  (policy.rateLimit as PolicyRateLimit | null) ?? null;

/** The policy as the audit log records it: its public fields without the timestamps. */
export function policySnapshot(policy: Policy): PolicySnapshot {
  return {
    policy_id: policy.id,
    name: policy.name,
    description: policy.description,
    enabled: policy.enabled,
    mode: policy.mode,
    priority: policy.priority,
    effect: policy.effect,
    target: publicTarget(policy),
    condition: policy.condition,
    rate_limit: rateLimitOf(policy),
    message: policy.message,
    labels: policy.effect === 'label' ? policy.labels : null,
    history_window_seconds: policy.historyWindowSeconds,
    detectors: policy.effect === 'redact' ? policy.detectors : null,
    version: policy.version,
    created_by: policy.createdBy,
    updated_by: policy.updatedBy,
  };
}

// ---------------------------------------------------------------------------------------------
// Validation: one function for create and replace, since a replace gives every field again.

/** A target list: absent (null) matches everything; given, it is 1..100 distinct valid entries. */
function checkTargetList(
  raw: unknown,
  field: string,
  entry: { pattern: RegExp; is: string },
  errors: FieldErrors,
): string[] | undefined {
  if (raw == null) return undefined;
  if (!Array.isArray(raw) || raw.length === 0 || raw.length > MAX_TARGET_ENTRIES) {
    errors.add(field, `must be a list of 1 to ${MAX_TARGET_ENTRIES} entries (omit it to match every one)`);
    return undefined;
  }
  const seen = new Set<unknown>();
  raw.forEach((item, i) => {
    if (typeof item !== 'string' || !entry.pattern.test(item)) errors.add(`${field}[${i}]`, `must be ${entry.is}`);
    else if (seen.has(item)) errors.add(`${field}[${i}]`, `repeats "${item}"`);
    seen.add(item);
  });
  return raw as string[];
}

const targetFields = ['svc_ids', 'capabilities'];

function checkTarget(raw: unknown, errors: FieldErrors): PolicyTarget {
  if (raw == null) return {};
  if (!isObject(raw)) {
    errors.add('target', 'must be an object {svc_ids?, capabilities?}');
    return {};
  }
  for (const key of Object.keys(raw)) {
    if (!targetFields.includes(key)) errors.add(`target.${key}`, `is not a target field (${targetFields.join(', ')})`);
  }
  const svcIds = checkTargetList(
    raw.svc_ids,
    'target.svc_ids',
    {
      pattern: agentIdPattern,
      is: 'an agent id: lowercase letters, digits and hyphens, not starting or ending with a hyphen',
    },
    errors,
  );
  const capabilities = checkTargetList(
    raw.capabilities,
    'target.capabilities',
    {
      pattern: capabilityPatternRule,
      is: 'a capability pattern <domain>:<action>, each part * or lowercase letters, digits, "_", "." or "-"',
    },
    errors,
  );
  return { ...(svcIds && { svc_ids: svcIds }), ...(capabilities && { capabilities }) };
}

/**
 * A condition must compile now, with `history` only when the policy has a window; a syntax
 * problem says where, in the message and as `position`.
 */
function checkCondition(raw: unknown, scope: CompileOptions, errors: FieldErrors): string | null {
  if (raw == null) return null;
  if (typeof raw !== 'string') {
    errors.add('condition', 'must be a CEL expression (a string)');
    return null;
  }
  const compiled = compileCondition(raw, scope);
  if (!compiled.ok) {
    const { message, position } = compiled.error;
    const where = describePosition(position);
    errors.add('condition', where ? `at ${where}: ${message}` : message, position ? { position } : {});
  }
  return raw;
}

const rateLimitFields = ['limit', 'window_seconds', 'per'];

function checkRateLimit(raw: unknown, effect: unknown, errors: FieldErrors): PolicyRateLimit | null {
  if (isOneOf(policyEffects, effect) && effect !== 'rate_limit') {
    if (raw != null)
      errors.add('rate_limit', `must be absent when effect is ${effect}: only rate_limit policies count actions`);
    return null;
  }
  if (raw == null) {
    // An unknown effect is reported on its own; a rate_limit policy without a limit is not complete.
    if (effect === 'rate_limit')
      errors.add('rate_limit', 'is required when effect is rate_limit: {limit, window_seconds, per}');
    return null;
  }
  if (!isObject(raw)) {
    errors.add('rate_limit', 'must be an object {limit, window_seconds, per}');
    return null;
  }
  for (const key of Object.keys(raw)) {
    if (!rateLimitFields.includes(key))
      errors.add(`rate_limit.${key}`, `is not a rate limit field (${rateLimitFields.join(', ')})`);
  }
  const { limit, window_seconds: windowSeconds, per } = raw;
  if (!isIntegerIn(limit, 1, MAX_RATE_LIMIT))
    errors.add('rate_limit.limit', `must be an integer from 1 to ${MAX_RATE_LIMIT}`);
  if (!isIntegerIn(windowSeconds, 1, MAX_WINDOW_SECONDS)) {
    errors.add('rate_limit.window_seconds', `must be an integer from 1 to ${MAX_WINDOW_SECONDS} (one day)`);
  }
  if (!isOneOf(rateLimitScopes, per)) errors.add('rate_limit.per', oneOf(rateLimitScopes));
  return { limit: limit as number, window_seconds: windowSeconds as number, per: per as RateLimitScope };
}

/** A `label` policy's labels: 1 to 10 distinct labels; every other effect has none. */
function checkLabels(raw: unknown, effect: unknown, errors: FieldErrors): string[] | null {
  if (effect !== 'label') {
    if (raw != null && isOneOf(policyEffects, effect))
      errors.add('labels', `must be absent when effect is ${effect}: only label policies add labels`);
    return null;
  }
  if (!Array.isArray(raw) || raw.length < 1 || raw.length > MAX_LABELS) {
    errors.add('labels', `is required when effect is label: 1 to ${MAX_LABELS} labels`);
    return null;
  }
  const seen = new Set<unknown>();
  raw.forEach((label, i) => {
    if (typeof label !== 'string' || !labelPattern.test(label)) errors.add(`labels[${i}]`, LABEL_RULE);
    else if (seen.has(label)) errors.add(`labels[${i}]`, `repeats "${label}"`);
    seen.add(label);
  });
  return raw as string[];
}

/** A `redact` policy's detectors: a non-empty subset of the three; every other effect has none. */
function checkDetectors(raw: unknown, effect: unknown, errors: FieldErrors): Detector[] | null {
  if (effect !== 'redact') {
    if (raw != null && isOneOf(policyEffects, effect))
      errors.add('detectors', `must be absent when effect is ${effect}: only redact policies redact`);
    return null;
  }
  if (!Array.isArray(raw) || raw.length < 1) {
    errors.add('detectors', `is required when effect is redact: a non-empty subset of ${DETECTORS.join(', ')}`);
    return null;
  }
  const seen = new Set<unknown>();
  raw.forEach((detector, i) => {
    if (!isOneOf(DETECTORS, detector)) errors.add(`detectors[${i}]`, oneOf(DETECTORS));
    else if (seen.has(detector)) errors.add(`detectors[${i}]`, `repeats "${detector}"`);
    seen.add(detector);
  });
  return raw as Detector[];
}

function checkHistoryWindow(raw: unknown, errors: FieldErrors): number | null {
  if (raw == null) return null;
  if (!isIntegerIn(raw, 1, MAX_HISTORY_WINDOW_SECONDS))
    errors.add('history_window_seconds', `must be an integer from 1 to ${MAX_HISTORY_WINDOW_SECONDS} (one day)`);
  return raw as number;
}

function checkOptionalText(raw: unknown, field: string, max: number, errors: FieldErrors): void {
  if (raw != null && (typeof raw !== 'string' || raw.length > max))
    errors.add(field, `must be a string of at most ${max} characters`);
}

/** The stored columns of a valid policy, or a 422 listing every problem. */
function validate(input: PolicyInput) {
  const errors = new FieldErrors();
  // Trimmed, so that "Block refunds" and "Block refunds " are not two policies.
  const name = typeof input.name === 'string' ? input.name.trim() : '';
  if (name.length < 1 || name.length > MAX_NAME_LENGTH)
    errors.add('name', `must be 1 to ${MAX_NAME_LENGTH} characters, not only spaces`);
  checkOptionalText(input.description, 'description', MAX_DESCRIPTION_LENGTH, errors);
  const enabled = input.enabled ?? true;
  if (typeof enabled !== 'boolean') errors.add('enabled', 'must be true or false');
  const mode = input.mode ?? 'enforce';
  if (!isOneOf(policyModes, mode)) errors.add('mode', oneOf(policyModes));
  const priority = input.priority ?? DEFAULT_PRIORITY;
  if (!isIntegerIn(priority, 0, MAX_PRIORITY))
    errors.add('priority', `must be an integer from 0 to ${MAX_PRIORITY} (lower applies first)`);
  if (!isOneOf(policyEffects, input.effect)) errors.add('effect', oneOf(policyEffects));
  const target = checkTarget(input.target, errors);
  const historyWindowSeconds = checkHistoryWindow(input.history_window_seconds, errors);
  const condition = checkCondition(
    input.condition,
    { history: input.history_window_seconds != null, result: isOneOf(resultEffects, input.effect) },
    errors,
  );
  const detectors = checkDetectors(input.detectors, input.effect, errors);
  const rateLimit = checkRateLimit(input.rate_limit, input.effect, errors);
  const labels = checkLabels(input.labels, input.effect, errors);
  checkOptionalText(input.message, 'message', MAX_MESSAGE_LENGTH, errors);
  errors.throwIfAny();
  return {
    name,
    description: input.description ?? '',
    enabled,
    mode: mode as PolicyMode,
    priority,
    effect: input.effect as PolicyEffect,
    target,
    condition,
    rateLimit: rateLimit ?? Prisma.DbNull,
    message: input.message ?? null,
    labels: labels ?? [],
    historyWindowSeconds,
    detectors: detectors ?? [],
  };
}

function checkFilter(filter: PolicyFilter) {
  const errors = new FieldErrors();
  const { limit, offset } = limitOffset(filter, { limit: DEFAULT_PAGE_SIZE, max: MAX_PAGE_SIZE }, errors);
  if (filter.mode != null && !isOneOf(policyModes, filter.mode)) errors.add('mode', oneOf(policyModes));
  if (filter.effect != null && !isOneOf(policyEffects, filter.effect)) errors.add('effect', oneOf(policyEffects));
  if (filter.svc_id != null && !agentIdPattern.test(filter.svc_id)) errors.add('svc_id', 'must be an agent id');
  errors.throwIfAny();
  return { limit, offset };
}

// ---------------------------------------------------------------------------------------------
// What the gateway applies.

/**
 * Compiled conditions of every org, by `<policy id>:<version>`: a version's text never changes, so
 * reloading the cached policies after an unrelated config change compiles nothing again. Bounded;
 * the oldest entry goes first (a Map keeps insertion order).
 */
const MAX_COMPILED_CONDITIONS = 10_000;
const compiledConditions = new Map<string, CompiledCondition>();

/**
 * A stored condition that no longer compiles (a library upgrade refusing what it once accepted)
 * must not silently stop the policy: its condition fails at every call, and a failing condition
 * matches (policies fail closed), with the reason reported by the decision.
 */
function compileStored(policy: Policy, condition: string, logger: Logger): CompiledCondition {
  const compiled = compileCondition(condition, {
    history: policy.historyWindowSeconds !== null,
    result: isOneOf(resultEffects, policy.effect),
  });
  if (compiled.ok) return compiled.condition;
  const reason = `the stored condition does not compile: ${compiled.error.message}`;
  logger.error(
    { policy_id: policy.id, org_id: policy.orgId, version: policy.version, reason },
    'a policy condition does not compile; the policy matches everything it targets',
  );
  return () => {
    throw new Error(reason);
  };
}

function conditionOf(policy: Policy, logger: Logger): CompiledCondition | null {
  if (policy.condition === null) return null;
  const key = `${policy.id}:${policy.version}`;
  let condition = compiledConditions.get(key);
  if (!condition) {
    condition = compileStored(policy, policy.condition, logger);
    if (compiledConditions.size >= MAX_COMPILED_CONDITIONS)
      compiledConditions.delete(compiledConditions.keys().next().value!);
    compiledConditions.set(key, condition);
  }
  return condition;
}

function activePolicy(policy: Policy, logger: Logger): ActivePolicy {
  const target = targetOf(policy);
  const rateLimit = rateLimitOf(policy);
  return {
    id: policy.id,
    name: policy.name,
    version: policy.version,
    mode: policy.mode as PolicyMode,
    priority: policy.priority,
    effect: policy.effect as PolicyEffect,
    svcIds: target.svc_ids ?? null,
    capabilities: target.capabilities ?? null,
    condition: conditionOf(policy, logger),
    rateLimit: rateLimit && { limit: rateLimit.limit, windowSeconds: rateLimit.window_seconds, per: rateLimit.per },
    message: policy.message,
    labels: [...(policy.labels ?? [])].sort(),
    historyWindowSeconds: policy.historyWindowSeconds,
    detectors: (policy.detectors ?? []) as Detector[],
  };
}

// ---------------------------------------------------------------------------------------------

const newPolicyId = () => randomId('pol');
const nameTaken = (name: string) => conflict(`A policy named "${name}" exists in this organization`, { field: 'name' });

export function createPolicyService({ db, cache, logger }: Deps) {
  async function create(orgId: string, input: PolicyInput, principal: Principal): Promise<Policy> {
    const data = validate(input);
    const actor = actorOf(principal);
    try {
      return await db.prisma.$transaction(async (tx) => {
        if ((await lockOrgAndCountPolicies(tx, orgId)) >= MAX_POLICIES_PER_ORG) {
          throw validationError([
            {
              field: 'policies',
              message: `An organization has at most ${MAX_POLICIES_PER_ORG} policies: delete one, or change an existing one`,
            },
          ]);
        }
        const policy = await insertPolicy(tx, {
          id: newPolicyId(),
          orgId,
          ...data,
          createdBy: actor.label,
          updatedBy: actor.label,
        });
        await recordAudit(tx, orgId, actor, {
          action: 'policy.created',
          targetType: 'policy',
          targetId: policy.id,
          after: policySnapshot(policy),
        });
        await bumpConfigVersion(tx);
        return policy;
      });
    } catch (error) {
      if (isUniqueViolation(error)) throw nameTaken(data.name);
      throw error;
    }
  }

  async function get(orgId: string, policyId: string): Promise<Policy> {
    const policy = await findPolicy(db.prisma, orgId, policyId);
    if (!policy) throw notFound('Policy');
    return policy;
  }

  /**
   * Ordered by priority, then name, then id: the order the gateway applies them in. An org has at
   * most 200 policies, so one query reads them all and the `svc_id` filter, the order (byPriority,
   * the gateway's comparison rather than the database's collation) and the page are done here.
   */
  async function list(orgId: string, filter: PolicyFilter = {}): Promise<ListPage<Policy>> {
    const { limit, offset } = checkFilter(filter);
    const rows = await policiesOfOrg(db.prisma, {
      orgId,
      enabled: filter.enabled,
      mode: filter.mode,
      effect: filter.effect,
    });
    const svcId = filter.svc_id;
    const matching = svcId == null ? rows : rows.filter((policy) => targetOf(policy).svc_ids?.includes(svcId) ?? true);
    matching.sort(byPriority);
    return { items: matching.slice(offset, offset + limit), total: matching.length };
  }

  /**
   * The policies that apply to each of several agents (agents' `policies`), in priority order:
   * one query for all of them (an org has at most 200 policies).
   */
  async function forAgents(agents: readonly { orgId: string; svcId: string }[]): Promise<Policy[][]> {
    const orgIds = [...new Set(agents.map((a) => a.orgId))];
    const rows = orgIds.length ? await policiesOfOrgs(db.prisma, orgIds) : [];
    rows.sort(byPriority);
    return agents.map(({ orgId, svcId }) =>
      rows.filter((policy) => policy.orgId === orgId && (targetOf(policy).svc_ids?.includes(svcId) ?? true)),
    );
  }

  /** PUT: every field replaced, `version` + 1. The row is locked first, so `before` is what this replace replaced. */
  async function replace(orgId: string, policyId: string, input: PolicyInput, principal: Principal): Promise<Policy> {
    const data = validate(input);
    const actor = actorOf(principal);
    try {
      return await notFoundIfGone(
        'Policy',
        db.prisma.$transaction(async (tx) => {
          if (!(await lockPolicy(tx, orgId, policyId))) throw notFound('Policy');
          const before = await findPolicyOrThrow(tx, policyId);
          const policy = await replacePolicy(tx, orgId, policyId, { ...data, updatedBy: actor.label });
          await recordAudit(tx, orgId, actor, {
            action: 'policy.updated',
            targetType: 'policy',
            targetId: policy.id,
            before: policySnapshot(before),
            after: policySnapshot(policy),
          });
          await bumpConfigVersion(tx);
          return policy;
        }),
      );
    } catch (error) {
      if (isUniqueViolation(error)) throw nameTaken(data.name);
      throw error;
    }
  }

  /** One statement deletes and returns the row, so of concurrent deletes one wins and the rest are 404. */
  async function remove(orgId: string, policyId: string, principal: Principal): Promise<void> {
    await notFoundIfGone(
      'Policy',
      db.prisma.$transaction(async (tx) => {
        const deleted = await deletePolicy(tx, orgId, policyId);
        await recordAudit(tx, orgId, actorOf(principal), {
          action: 'policy.deleted',
          targetType: 'policy',
          targetId: deleted.id,
          before: policySnapshot(deleted),
        });
        await bumpConfigVersion(tx);
      }),
    );
  }

  /**
   * The org's enabled policies as the gateway applies them, in priority order. Cached per process;
   * every policy write is audited, which empties the cache on every process within a poll.
   */
  function active(orgId: string): Promise<ActivePolicy[]> {
    return cache.get(`policies:${orgId}`, async () => {
      const rows = await policiesOfOrg(db.prisma, { orgId, enabled: true });
      return rows.map((policy) => activePolicy(policy, logger)).sort(byPriority);
    });
  }

  return { create, get, list, forAgents, replace, remove, active };
}

export type PolicyService = ReturnType<typeof createPolicyService>;
