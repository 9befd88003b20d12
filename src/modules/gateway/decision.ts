import type { FieldError } from '../../errors.js';
import { findUnstorable } from '../../lib/storable-input.js';
import type { AgentGate } from '../agent/agent.service.js';
import type { ApprovalCheck } from '../approval/approval.service.js';
import type { TokenCheck } from '../capability-token/capability-token.service.js';
import type { CurrentManifest } from '../manifest/manifest.service.js';
import type { ConditionFacts, HistoryFact } from '../policy/policy-condition.js';
import { DETECTORS, type Detector } from '../policy/content-detectors.js';
import type { PolicyMatch } from '../policy/policy-rules.js';
import type { InteractionChannel, RecordedPolicy } from '../record/record-chain.js';
import type { ToolResult } from '../tool/connectors.js';
import type { BudgetState, PolicyCounter } from './budget.js';

/**
 * The gateway decision (docs/reference/gateway.md) as pure functions: what a request is,
 * what the gateway knows when it decides (a DecisionContext, loaded by gateway.service.ts), and the
 * checks that turn that into reasons. No database, no clock, no HTTP: REST, GraphQL and MCP reach
 * the same rules through the service, and the rules are unit-tested on their own.
 */

export type GatewayMode = 'execute' | 'evaluate';
/** Where the request came in; policies and records will name it. */
export type GatewayChannel = InteractionChannel;

export interface GatewayAction {
  type: string;
  tool: string;
  params?: unknown;
}

/** A request as the channels receive it (the wire names). */
export interface GatewayRequest {
  svc_id: string;
  agent_id: string;
  action: GatewayAction;
  capability_token?: string | null;
  approval_id?: string | null;
}

/** Every reason code a decision can give (docs/reference/errors.md#denial-reasons-not-errors), a closed set. */
export const REASON_CODES = [
  'SVC_NOT_ALLOWED_FOR_KEY',
  'AGENT_DEACTIVATED',
  'MANIFEST_NOT_FOUND',
  'MANIFEST_NOT_ACTIVE',
  'AGENT_MISMATCH',
  'CAPABILITY_NOT_APPROVED',
  'CAPABILITY_TOKEN_INVALID',
  'CAPABILITY_NOT_IN_TOKEN',
  'POLICY_DENIED',
  'BUDGET_EXCEEDED',
  'APPROVAL_REQUIRED',
  'TOOL_NOT_CONFIGURED',
  'TOOL_DEFINITION_CHANGED',
  'TOOL_NOT_FOUND_UPSTREAM',
  'UPSTREAM_AUTHORIZATION_REQUIRED',
  'POLICY_VIOLATION',
  'EXECUTION_INTERRUPTED',
  'RESULT_DENIED',
  'CONFIRMATION_REQUIRED',
] as const;
export type ReasonCode = (typeof REASON_CODES)[number];

export interface Reason {
  code: ReasonCode;
  message: string;
  details?: Record<string, unknown>;
}

export interface GatewayDecision {
  interaction_id: string;
  decision: 'allow' | 'deny';
  executed: boolean;
  result: ToolResult | null;
  reasons: Reason[];
  approval_id: string | null;
  /** The policies that matched, in priority order (shadow ones included). */
  policies: RecordedPolicy[];
  /** The labels of the enforced `label` policies that matched, sorted and distinct. */
  labels: string[];
  /** What enforced `redact` policies replaced in the result, by kind; empty when nothing was. */
  redactions: Redaction[];
}

export interface Redaction {
  kind: string;
  count: number;
}

/** A validated request: what every later step works on. */
export interface GatewayCall {
  svcId: string;
  agentId: string;
  action: { type: string; tool: string; params: Record<string, unknown> };
  /** `action.type + ":" + action.tool`. */
  capability: string;
  capabilityToken: string | null;
  approvalId: string | null;
}

/** Everything the checks need, loaded before any of them runs. */
export interface DecisionContext {
  call: GatewayCall;
  mode: GatewayMode;
  /** The agent ids the API key is limited to; empty when it may act for any. */
  keySvcIds: readonly string[];
  /** The agent behind the svc_id; null when the org has none (then it has no manifest either). */
  agent: AgentGate | null;
  manifest: CurrentManifest | null;
  /** The capability token's check; null when the request carries none. */
  token: TokenCheck | null;
  /** The approval's check; null when the request names none. */
  approval: ApprovalCheck | null;
  /** The user's answer to a confirmation of this call (MCP elicitation), once consumed; null when none was given. */
  confirmation?: ConfirmationCheck | null;
  toolConfigured: boolean;
  /**
   * Why the upstream MCP tool's definition holds the call (it changed, or the upstream no longer
   * lists the tool); undefined when it does not.
   */
  toolHold?: {
    code: 'TOOL_DEFINITION_CHANGED' | 'TOOL_NOT_FOUND_UPSTREAM';
    message: string;
    details: Record<string, unknown>;
  };
  /**
   * The tool authenticates with an OAuth connection and the caller has none to use: where that
   * user connects, and why (never connected, expired, revoked). Undefined when a token is at hand
   * or the tool needs none.
   */
  upstreamAuthorization?: { connectUrl: string; reason: string };
  /** The agent's counts before this decision, when they were read (evaluate; an execute already denied). */
  budget: BudgetState | null;
  /** The org's enabled policies that apply to this request, in priority order. */
  policies: readonly PolicyMatch[];
  /**
   * The rate limits of the matched `rate_limit` policies with their counts before this decision,
   * when they were read (evaluate); an execute counts them in its commit instead.
   */
  limits: readonly { counter: PolicyCounter; current: number }[] | null;
}

/** A confirmation answered for this call: accepted (by whom), or why it does not confirm it. */
export type ConfirmationCheck = { ok: true; id: string; by: string } | { ok: false; message: string };

export interface Checked {
  reasons: Reason[];
  /** The capability needs a human (the manifest's `require_human_approval` or an enforced policy). */
  needsHuman: boolean;
}

const namePattern = /^[a-z0-9_.-]+$/;
const nameRule = 'must be lowercase letters, digits, "_", "." or "-"';
const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/** The request's own shape; its problems are a 422, before anything is read or counted. */
export function parseGatewayRequest(request: GatewayRequest): { call: GatewayCall } | { errors: FieldError[] } {
  const errors: FieldError[] = [];
  if (!request.svc_id) errors.push({ field: 'svc_id', message: 'must not be empty' });
  if (!request.agent_id) errors.push({ field: 'agent_id', message: 'must not be empty' });
  if (!namePattern.test(request.action.type)) errors.push({ field: 'action.type', message: nameRule });
  if (!namePattern.test(request.action.tool)) errors.push({ field: 'action.tool', message: nameRule });
  const params = request.action.params ?? {};
  if (!isObject(params)) errors.push({ field: 'action.params', message: 'must be an object' });
  // What the record cannot store (NUL, lone surrogates, hostile depth) is refused before anything
  // runs, on every channel: the REST edge checks its body alike, MCP and GraphQL rely on this.
  const unstorable = findUnstorable(request, '');
  if (unstorable) errors.push(unstorable);
  if (errors.length) return { errors };
  const { type, tool } = request.action;
  return {
    call: {
      svcId: request.svc_id,
      agentId: request.agent_id,
      action: { type, tool, params: params as Record<string, unknown> },
      capability: `${type}:${tool}`,
      capabilityToken: request.capability_token || null,
      approvalId: request.approval_id || null,
    },
  };
}

const isoSeconds = (unixSeconds: number) => new Date(unixSeconds * 1000).toISOString();

export function budgetExceeded(state: BudgetState): Reason {
  const resetsAt = isoSeconds(state.day.window.resetAt);
  return {
    code: 'BUDGET_EXCEEDED',
    message: `The daily budget of ${state.day.limit} actions is used up; it resets at ${resetsAt}`,
    details: { limit: state.day.limit, current: state.day.current, period: '1d', resets_at: resetsAt },
  };
}

export function hourlyLimitReached(state: BudgetState): Reason {
  return {
    code: 'POLICY_VIOLATION',
    message: `The hourly limit of ${state.hour.limit} actions is reached`,
    details: { limit: state.hour.limit, period: '1h', current: state.hour.current },
  };
}

const failedCondition = (match: PolicyMatch) =>
  match.conditionError ? ` (its condition failed: ${match.conditionError}; policies fail closed)` : '';

const policyRef = ({ policy, conditionError }: PolicyMatch) => ({
  policy_id: policy.id,
  name: policy.name,
  version: policy.version,
  ...(conditionError ? { condition_error: conditionError } : {}),
});

export function policyDenied(match: PolicyMatch): Reason {
  const { name, message } = match.policy;
  return {
    code: 'POLICY_DENIED',
    message: `Denied by policy "${name}"${message ? `: ${message}` : ''}${failedCondition(match)}`,
    details: policyRef(match),
  };
}

/** An enforced `rate_limit` policy whose window is full (429 on execute). */
export function policyLimitReached(match: PolicyMatch, counter: PolicyCounter): Reason {
  const { policy } = match;
  const period = `${policy.rateLimit!.windowSeconds}s`;
  return {
    code: 'POLICY_VIOLATION',
    message: `The rate limit of policy "${policy.name}" is reached: ${counter.limit} actions per ${period}${failedCondition(match)}`,
    details: { limit: counter.limit, period, current: counter.limit, policy_id: policy.id },
  };
}

/** The decision's `policies`: each match, and for rate limits whether this action was over (`exceeded`, by match index). */
export function policyEntries(
  matches: readonly PolicyMatch[],
  exceeded: ReadonlyMap<number, boolean> = new Map(),
): RecordedPolicy[] {
  return matches.map(({ policy, conditionError }, index) => ({
    policy_id: policy.id,
    name: policy.name,
    version: policy.version,
    effect: policy.effect,
    mode: policy.mode,
    condition_error: conditionError,
    rate_limit_exceeded: policy.effect === 'rate_limit' ? (exceeded.get(index) ?? false) : null,
  }));
}

/** What the policies on the tool's result decided: withhold it (a denial), or redact these detectors' matches. */
export interface ResultVerdict {
  denial: Reason | null;
  /** In DETECTORS order; empty: nothing to redact. */
  detectors: Detector[];
}

/**
 * The verdict of the policies that matched the tool's result (the `result` phase): the first
 * enforced `deny_result` withholds it with RESULT_DENIED naming the policy; otherwise the
 * enforced `redact` policies' detectors together. Shadow ones are only reported.
 */
export function resultVerdict(matches: readonly PolicyMatch[]): ResultVerdict {
  const enforced = matches.filter((match) => match.policy.mode === 'enforce');
  const denying = enforced.find((match) => match.policy.effect === 'deny_result');
  const wanted = new Set(
    enforced.filter((match) => match.policy.effect === 'redact').flatMap((m) => m.policy.detectors),
  );
  const detectors = DETECTORS.filter((detector) => wanted.has(detector));
  if (!denying) return { denial: null, detectors };
  const { name, message } = denying.policy;
  return {
    denial: {
      code: 'RESULT_DENIED',
      message: `The tool ran, and its result is withheld by policy "${name}"${message ? `: ${message}` : ''}${failedCondition(denying)}`,
      details: policyRef(denying),
    },
    detectors,
  };
}

/**
 * The decision's labels: those of every enforced `label` policy that matched (a failed condition
 * matches too: a label errs on the side of the policies that read it), sorted and distinct. A
 * shadow label policy is reported in `policies` and labels nothing.
 */
export function decisionLabels(matches: readonly PolicyMatch[]): string[] {
  const labels = new Set<string>();
  for (const { policy } of matches)
    if (policy.effect === 'label' && policy.mode === 'enforce') for (const label of policy.labels) labels.add(label);
  return [...labels].sort();
}

/** Which rate limits a peek found full (evaluate): enforced ones deny, shadow ones are only reported. */
export function limitsReached(limits: DecisionContext['limits']): Map<number, boolean> {
  return new Map((limits ?? []).map(({ counter, current }) => [counter.match, current >= counter.limit]));
}

/**
 * Every check, in the order of docs/reference/gateway.md#the-checks-in-order; each failure adds
 * a reason and the decision is `deny` when any exists. The budget enters only when it was read:
 * an execute that passes every other check counts it atomically afterwards (gateway.store.ts)
 * instead.
 */
export function checkDecision(context: DecisionContext): Checked {
  const { call, manifest, token, approval, budget } = context;
  const { svcId, agentId, capability } = call;
  const reasons: Reason[] = [];
  const deny = (code: ReasonCode, message: string, details?: Record<string, unknown>) =>
    reasons.push({ code, message, ...(details ? { details } : {}) });

  if (context.keySvcIds.length && !context.keySvcIds.includes(svcId)) {
    deny('SVC_NOT_ALLOWED_FOR_KEY', `This API key may act only for ${context.keySvcIds.join(', ')}`);
  }
  if (context.agent?.status === 'deactivated') {
    const why = context.agent.deactivationReason;
    deny('AGENT_DEACTIVATED', `Agent "${svcId}" is deactivated${why ? `: ${why}` : ''}`);
  }
  if (!manifest) {
    deny('MANIFEST_NOT_FOUND', `No manifest is registered for agent "${svcId}"`);
  } else {
    if (manifest.status !== 'active') {
      deny('MANIFEST_NOT_ACTIVE', `The manifest of "${svcId}" is ${manifest.status}`, { status: manifest.status });
    }
    if (agentId !== manifest.agentId) {
      deny('AGENT_MISMATCH', `agent_id "${agentId}" does not match the manifest's agent "${manifest.agentId}"`);
    }
    if (!manifest.approvedCapabilities.includes(capability)) {
      deny('CAPABILITY_NOT_APPROVED', `"${capability}" is not among the approved capabilities of "${svcId}"`);
    }
  }
  if (token && !token.ok) deny('CAPABILITY_TOKEN_INVALID', token.message);
  if (token?.ok) {
    const granted = token.capabilities.filter((c) => manifest?.approvedCapabilities.includes(c));
    if (!granted.includes(capability))
      deny('CAPABILITY_NOT_IN_TOKEN', `The capability token does not grant "${capability}"`);
  }
  const enforced = context.policies.filter((match) => match.policy.mode === 'enforce');
  for (const match of enforced) if (match.policy.effect === 'deny') reasons.push(policyDenied(match));
  for (const { counter, current } of context.limits ?? []) {
    if (counter.enforced && current >= counter.limit)
      reasons.push(policyLimitReached(context.policies[counter.match], counter));
  }
  if (manifest && budget) {
    if (budget.day.current >= budget.day.limit) reasons.push(budgetExceeded(budget));
    else if (context.mode === 'evaluate' && budget.hour.current >= budget.hour.limit)
      reasons.push(hourlyLimitReached(budget));
  }
  const byManifest = Boolean(manifest?.requireHumanApproval.includes(capability));
  const byPolicies = enforced.filter((match) => match.policy.effect === 'require_approval');
  const needsHuman = byManifest || byPolicies.length > 0;
  if (needsHuman && approval?.ok !== true) {
    const why = [
      ...(byManifest ? ['the manifest requires it'] : []),
      ...byPolicies.map(
        (match) =>
          `policy "${match.policy.name}" requires it${match.policy.message ? ` (${match.policy.message})` : ''}${failedCondition(match)}`,
      ),
    ].join('; ');
    const problem = approval && 'message' in approval ? `: ${approval.message}` : '';
    deny(
      'APPROVAL_REQUIRED',
      `"${capability}" needs a human approval (${why})${problem}`,
      byPolicies.length ? { policies: byPolicies.map(policyRef) } : undefined,
    );
  }
  const confirmations = enforced.filter((match) => match.policy.effect === 'require_confirmation');
  if (confirmations.length && context.confirmation?.ok !== true) {
    const why = confirmations.map((match) => `policy "${match.policy.name}"${failedCondition(match)}`).join('; ');
    const problem = context.confirmation && !context.confirmation.ok ? `: ${context.confirmation.message}` : '';
    deny(
      'CONFIRMATION_REQUIRED',
      `"${capability}" needs its user's confirmation (${why}), which only an MCP client that accepts form elicitation can ask for${problem}`,
      { policies: confirmations.map(policyRef) },
    );
  }
  if (!context.toolConfigured)
    deny('TOOL_NOT_CONFIGURED', `No tool connector is configured for action type "${call.action.type}"`);
  if (context.toolHold) deny(context.toolHold.code, context.toolHold.message, context.toolHold.details);
  if (context.upstreamAuthorization) {
    const { connectUrl, reason } = context.upstreamAuthorization;
    deny(
      'UPSTREAM_AUTHORIZATION_REQUIRED',
      `The tool for "${call.action.type}" acts with an account its user connects, and there is none to use (${reason.replace(/_/g, ' ')}): connect it at ${connectUrl}`,
      { connect_url: connectUrl, reason },
    );
  }
  return { reasons, needsHuman };
}

/**
 * The CEL variables of a request (docs/guides/policies.md#conditions). Built once per decision, and only when
 * a policy that targets the request has a condition. Without a manifest the agent is its id alone;
 * a user's evaluate has the user as `key` (no prefix, no scopes).
 */
export function conditionFacts(
  call: GatewayCall,
  manifest: CurrentManifest | null,
  caller: { id: string; prefix: string; scopes: readonly string[] },
  request: { mode: GatewayMode; channel: GatewayChannel; now: number },
  history?: readonly HistoryFact[],
): ConditionFacts {
  const time = new Date(request.now);
  const { type, tool, params } = call.action;
  return {
    agent: {
      id: call.svcId,
      name: manifest?.agent.name ?? '',
      version: manifest?.agent.version ?? '',
      team: manifest?.agent.team ?? '',
    },
    action: { type, tool, capability: call.capability, params },
    params,
    key: { id: caller.id, prefix: caller.prefix, scopes: [...caller.scopes] },
    request: {
      time,
      hour: BigInt(time.getUTCHours()),
      weekday: BigInt(time.getUTCDay()),
      channel: request.channel,
      mode: request.mode,
    },
    ...(history && { history }),
  };
}

/** A human is asked only when nothing else stands in the way and none was named. */
export const shouldAskHuman = (call: GatewayCall, { reasons, needsHuman }: Checked): boolean =>
  needsHuman && !call.approvalId && reasons.length === 1 && reasons[0].code === 'APPROVAL_REQUIRED';
