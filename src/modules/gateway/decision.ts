import type { FieldError } from '../../errors.js';
import type { ApprovalCheck } from '../approval/approval.service.js';
import type { TokenCheck } from '../capability-token/capability-token.service.js';
import type { CurrentManifest } from '../manifest/manifest.service.js';
import type { ToolResult } from '../tool/connectors.js';
import type { BudgetState } from './budget.js';

/**
 * The gateway decision of decisions.md § Gateway decision as pure functions: what a request is,
 * what the gateway knows when it decides (a DecisionContext, loaded by gateway.service.ts), and the
 * checks that turn that into reasons. No database, no clock, no HTTP: REST, GraphQL and MCP reach
 * the same rules through the service, and the rules are unit-tested on their own.
 */

export type GatewayMode = 'execute' | 'evaluate';
/** Where the request came in; policies and records will name it. */
export type GatewayChannel = 'rest' | 'graphql' | 'mcp';

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

export interface Reason {
  code: string;
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
  manifest: CurrentManifest | null;
  /** The capability token's check; null when the request carries none. */
  token: TokenCheck | null;
  /** The approval's check; null when the request names none. */
  approval: ApprovalCheck | null;
  toolConfigured: boolean;
  /** The agent's counts before this decision, when they were read (evaluate; an execute already denied). */
  budget: BudgetState | null;
}

export interface Checked {
  reasons: Reason[];
  /** The capability needs a human (the manifest's `require_human_approval`). */
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

/**
 * Every check of decisions.md, in its order; each failure adds a reason and the decision is `deny`
 * when any exists. The budget enters only when it was read: an execute that passes every other
 * check counts it atomically afterwards (gateway.store.ts) instead.
 */
export function checkDecision(context: DecisionContext): Checked {
  const { call, manifest, token, approval, budget } = context;
  const { svcId, agentId, capability } = call;
  const reasons: Reason[] = [];
  const deny = (code: string, message: string, details?: Record<string, unknown>) =>
    reasons.push({ code, message, ...(details ? { details } : {}) });

  if (context.keySvcIds.length && !context.keySvcIds.includes(svcId)) {
    deny('SVC_NOT_ALLOWED_FOR_KEY', `This API key may act only for ${context.keySvcIds.join(', ')}`);
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
    if (!granted.includes(capability)) deny('CAPABILITY_NOT_IN_TOKEN', `The capability token does not grant "${capability}"`);
  }
  // POLICY_DENIED: org policies are a planned resource (interface.md, v0.2); none can deny yet.
  if (manifest && budget) {
    if (budget.day.current >= budget.day.limit) reasons.push(budgetExceeded(budget));
    else if (context.mode === 'evaluate' && budget.hour.current >= budget.hour.limit) reasons.push(hourlyLimitReached(budget));
  }
  const needsHuman = Boolean(manifest?.requireHumanApproval.includes(capability));
  if (needsHuman && !approval) deny('APPROVAL_REQUIRED', `"${capability}" needs a human approval`);
  if (needsHuman && approval && !approval.ok) deny('APPROVAL_REQUIRED', `"${capability}" needs a human approval: ${approval.message}`);
  if (!context.toolConfigured) deny('TOOL_NOT_CONFIGURED', `No tool connector is configured for action type "${call.action.type}"`);
  return { reasons, needsHuman };
}

/** A human is asked only when nothing else stands in the way and none was named. */
export const shouldAskHuman = (call: GatewayCall, { reasons, needsHuman }: Checked): boolean =>
  needsHuman && !call.approvalId && reasons.length === 1 && reasons[0].code === 'APPROVAL_REQUIRED';
