import { scannedKindsIn, type Detector } from './content-detectors.js';
import { contentAllowance, DEFAULT_EVAL_BUDGET } from './policy-condition-budget.js';
import { runCondition, type CompiledCondition, type ConditionFacts } from './policy-condition.js';

/**
 * Which of an org's policies apply to a request (docs/guides/policies.md), as pure functions: the
 * gateway loads the org's enabled policies (policy.service.ts, cached and compiled), builds the
 * request's facts once, and gets the matches in priority order. What a match does (deny, ask a
 * human, count a rate limit) is the decision's (gateway/decision.ts).
 */

export const policyEffects = [
  'deny',
  'require_approval',
  'rate_limit',
  'label',
  'redact',
  'deny_result',
  'require_confirmation',
] as const;
export type PolicyEffect = (typeof policyEffects)[number];
/** The effects applied to a tool's result, after it ran: their conditions may read `result`. */
export const resultEffects: readonly PolicyEffect[] = ['redact', 'deny_result'];
export const appliesToResult = (policy: { effect: PolicyEffect }) => resultEffects.includes(policy.effect);
/** A label (docs/decisions/0086-policy-history-and-labels.md): what label policies add and the records listing filters by. */
export const labelPattern = /^[a-z0-9_-]{1,40}$/;
export const LABEL_RULE = 'must be 1 to 40 lowercase letters, digits, "_" or "-"';

export const policyModes = ['enforce', 'shadow'] as const;
export type PolicyMode = (typeof policyModes)[number];
export const rateLimitScopes = ['agent', 'api_key', 'org'] as const;
export type RateLimitScope = (typeof rateLimitScopes)[number];

export interface RateLimitRule {
  limit: number;
  windowSeconds: number;
  per: RateLimitScope;
}

/** An enabled policy as the gateway applies it. */
export interface ActivePolicy {
  id: string;
  name: string;
  version: number;
  mode: PolicyMode;
  priority: number;
  effect: PolicyEffect;
  /** Null: every agent. */
  svcIds: readonly string[] | null;
  /** `<domain>:<action>` patterns, either part `*`; null: every capability. */
  capabilities: readonly string[] | null;
  /** Null: always true. */
  condition: CompiledCondition | null;
  rateLimit: RateLimitRule | null;
  message: string | null;
  /** A `label` policy's labels (sorted); empty for every other effect. */
  labels: readonly string[];
  /** The window of earlier decisions its condition sees as `history`; null: none. */
  historyWindowSeconds: number | null;
  /** A `redact` policy's detectors; empty for every other effect. */
  detectors: readonly Detector[];
}

export interface PolicyMatch {
  policy: ActivePolicy;
  /** Why the condition failed at run time; the policy then matched (fail closed). */
  conditionError: string | null;
}

/** Whether `<domain>:<action>` pattern (either part may be `*`) covers a capability. */
export function capabilityMatches(pattern: string, capability: string): boolean {
  const cut = pattern.indexOf(':');
  const at = capability.indexOf(':');
  const domain = pattern.slice(0, cut);
  const action = pattern.slice(cut + 1);
  return (
    (domain === '*' || domain === capability.slice(0, at)) && (action === '*' || action === capability.slice(at + 1))
  );
}

/** Lower priority first; equal priorities by name, then id, so the order is the same on every process. */
export function byPriority(
  a: { priority: number; name: string; id: string },
  b: { priority: number; name: string; id: string },
): number {
  return (
    a.priority - b.priority || (a.name < b.name ? -1 : a.name > b.name ? 1 : a.id < b.id ? -1 : a.id > b.id ? 1 : 0)
  );
}

/** What evaluating a targeted policy gave: it matched, its condition was false, or it failed (and matched). */
export type PolicyEvaluation = 'matched' | 'not_matched' | 'condition_error';

/** Whether a policy targets an agent (its `svc_ids`), whatever the capability. */
export const targetsAgent = (policy: ActivePolicy, svcId: string) => !policy.svcIds || policy.svcIds.includes(svcId);

/**
 * The longest history window of the policies that target an agent, or null when none has one:
 * then that agent's decisions are neither serialized nor written to its history.
 */
export function historyWindowFor(policies: readonly ActivePolicy[], svcId: string): number | null {
  let longest: number | null = null;
  for (const policy of policies)
    if (policy.historyWindowSeconds !== null && targetsAgent(policy, svcId))
      longest = Math.max(longest ?? 0, policy.historyWindowSeconds);
  return longest;
}

const targetsCall = (policy: ActivePolicy, svcId: string, capability: string) =>
  targetsAgent(policy, svcId) &&
  (!policy.capabilities || policy.capabilities.some((pattern) => capabilityMatches(pattern, capability)));

/**
 * Scans a call's params ahead of its conditions, by each detector a policy that targets it calls,
 * one detector at a time with the event loop given back between them. The conditions then answer
 * from these scans (scannedKindsIn, charged as a call): the slowest step of a large call is not
 * one piece that holds every other request up, and it never runs inside the transaction that
 * serializes an agent's decisions. Within the allowance the budget gives anyway (one scan of the
 * params by every detector).
 */
export async function scanAhead(
  policies: readonly ActivePolicy[],
  svcId: string,
  capability: string,
  params: unknown,
): Promise<void> {
  if (typeof params !== 'object' || params === null) return;
  const detectors = new Set<Detector>();
  for (const policy of policies)
    if (!appliesToResult(policy) && targetsCall(policy, svcId, capability))
      for (const detector of policy.condition?.detectors ?? []) detectors.add(detector);
  for (const detector of detectors) {
    await new Promise((resolve) => setImmediate(resolve));
    scannedKindsIn(detector, params);
  }
}

/** The facts a policy's condition sees: `history` cut to its own window, when it has one. */
function factsFor(policy: ActivePolicy, facts: ConditionFacts): ConditionFacts {
  if (policy.historyWindowSeconds === null) return facts;
  const since = facts.request.time.getTime() - policy.historyWindowSeconds * 1000;
  const history = facts.history ?? [];
  const first = history.findIndex((entry) => entry.at.getTime() >= since);
  return { ...facts, history: first <= 0 ? (first === 0 ? history : []) : history.slice(first) };
}

/**
 * The policies that apply to an agent's capability, in the order given (the service keeps them by
 * priority): in the `call` phase every one but those on the tool's result, in the `result` phase
 * (facts with `result`) only those. `facts` is built only if some targeted policy has a condition. `evaluated` hears of
 * each policy that targets the request (metrics); the others are not evaluated. Each condition
 * runs within `budget` operations (POLICY_EVAL_BUDGET), and one that scans content within that
 * budget and one scan of the params by every detector (contentAllowance).
 */
export function matchPolicies(
  policies: readonly ActivePolicy[],
  svcId: string,
  capability: string,
  facts: () => ConditionFacts,
  evaluated?: (policy: ActivePolicy, result: PolicyEvaluation) => void,
  budget = DEFAULT_EVAL_BUDGET,
  phase: 'call' | 'result' = 'call',
): PolicyMatch[] {
  const matches: PolicyMatch[] = [];
  let known: ConditionFacts | undefined;
  let allowance: number | undefined;
  for (const policy of policies) {
    // Before the tool runs, the policies on its result wait; after, only they are asked (`result` set).
    if (!targetsCall(policy, svcId, capability) || appliesToResult(policy) !== (phase === 'result')) continue;
    if (!policy.condition) {
      matches.push({ policy, conditionError: null });
      evaluated?.(policy, 'matched');
      continue;
    }
    known ??= facts();
    const extra = policy.condition.detectors
      ? (allowance ??=
          contentAllowance(known.params) + (known.result === undefined ? 0 : contentAllowance(known.result)))
      : 0;
    const outcome = runCondition(policy.condition, factsFor(policy, known), budget + extra);
    if (outcome.matched) matches.push({ policy, conditionError: outcome.error });
    evaluated?.(policy, !outcome.matched ? 'not_matched' : outcome.error ? 'condition_error' : 'matched');
  }
  return matches;
}

/**
 * Whether an enforced `deny` policy without a condition covers the agent's capability: every call
 * of it is refused whatever its arguments, so an agent's tool list (MCP) leaves it out.
 */
export function deniedUnconditionally(policies: readonly ActivePolicy[], svcId: string, capability: string): boolean {
  return policies.some(
    (policy) =>
      policy.effect === 'deny' &&
      policy.mode === 'enforce' &&
      policy.condition === null &&
      (!policy.svcIds || policy.svcIds.includes(svcId)) &&
      (!policy.capabilities || policy.capabilities.some((pattern) => capabilityMatches(pattern, capability))),
  );
}
