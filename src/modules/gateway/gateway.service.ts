import type { SqlConnection } from '../../db/sql.js';
import type { Deps } from '../../deps.js';
import { AppError } from '../../errors.js';
import { canonicalHash } from '../../lib/canonical-json.js';
import type { RequestState } from '../../http/request-state.js';
import type { ApprovalService } from '../approval/approval.service.js';
import type { Principal } from '../auth/authz.js';
import type { CapabilityTokenService } from '../capability-token/capability-token.service.js';
import { effectiveLimits, type ManifestDocument } from '../manifest/manifest-document.js';
import { newInteractionId, type RecordService } from '../record/record.service.js';
import type { ToolResult } from '../tool/connectors.js';
import type { ToolService } from '../tool/tool.service.js';
import { peekBudget, takeBudget, type BudgetState } from './budget.js';

/**
 * The gateway decision of decisions.md § Gateway decision. Every check runs and each failure adds
 * a reason; a denial is data, not an error. Only the hourly limit answers with an error (429),
 * after its denial has been recorded.
 */

export interface GatewayAction {
  type: string;
  tool: string;
  params?: unknown;
}

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

interface Collaborators {
  records: RecordService;
  tools: ToolService;
  tokens: CapabilityTokenService;
  approvals: ApprovalService;
}

const fieldPattern = /^[a-z0-9_.-]+$/;

export function createGatewayService({ db, cache }: Deps, { records, tools, tokens, approvals }: Collaborators) {
  /** The agent's manifest as the gateway judges it: active or suspended, else the newest. */
  const manifestOf = (orgId: string, svcId: string) =>
    cache.get(`manifest:${orgId}:${svcId}`, async () =>
      (await db.prisma.manifest.findFirst({ where: { orgId, svcId, status: { in: ['active', 'suspended'] } } })) ??
      (await db.prisma.manifest.findFirst({ where: { orgId, svcId }, orderBy: [{ createdAt: 'desc' }] })),
    );
  const toolFor = (orgId: string, actionType: string) =>
    cache.get(`tool:${orgId}:${actionType}`, () => tools.forAction(orgId, actionType));
  const orgSettings = (orgId: string) =>
    cache.get(`org-gateway-settings:${orgId}`, () =>
      db.prisma.organization.findUniqueOrThrow({ where: { id: orgId }, select: { recordParams: true, approvalTtlSeconds: true } }),
    );

  function validateRequest(request: GatewayRequest) {
    const errors: { field: string; message: string }[] = [];
    if (!request.svc_id) errors.push({ field: 'svc_id', message: 'must not be empty' });
    if (!request.agent_id) errors.push({ field: 'agent_id', message: 'must not be empty' });
    if (!fieldPattern.test(request.action.type)) errors.push({ field: 'action.type', message: 'must be lowercase letters, digits, "_", "." or "-"' });
    if (!fieldPattern.test(request.action.tool)) errors.push({ field: 'action.tool', message: 'must be lowercase letters, digits, "_", "." or "-"' });
    const params = request.action.params ?? {};
    if (typeof params !== 'object' || params === null || Array.isArray(params)) {
      errors.push({ field: 'action.params', message: 'must be an object' });
    }
    if (errors.length) throw new AppError('VALIDATION_ERROR', 'The gateway request is invalid', { details: { errors } });
    return params as Record<string, unknown>;
  }

  const budgetReason = (state: BudgetState): Reason => ({
    code: 'BUDGET_EXCEEDED',
    message: `The daily budget of ${state.day.limit} actions is used up; it resets at ${new Date(state.day.window.resetAt * 1000).toISOString()}`,
    details: { limit: state.day.limit, current: state.day.current, period: '1d', resets_at: new Date(state.day.window.resetAt * 1000).toISOString() },
  });

  function setRateLimitHeaders(state: RequestState, budget: BudgetState) {
    state.responseHeaders.set('X-RateLimit-Limit', String(budget.hour.limit));
    state.responseHeaders.set('X-RateLimit-Remaining', String(Math.max(0, budget.hour.limit - budget.hour.current)));
    state.responseHeaders.set('X-RateLimit-Reset', String(budget.hour.window.resetAt));
  }

  async function decide(principal: Principal, request: GatewayRequest, mode: 'execute' | 'evaluate', state: RequestState): Promise<GatewayDecision> {
    const params = validateRequest(request);
    const orgId = principal.orgId;
    const { svc_id: svcId, agent_id: agentId } = request;
    const action = { type: request.action.type, tool: request.action.tool, params };
    const capability = `${action.type}:${action.tool}`;
    const interactionId = newInteractionId();
    const reasons: Reason[] = [];
    const deny = (code: string, message: string, details?: Record<string, unknown>) =>
      reasons.push({ code, message, ...(details ? { details } : {}) });

    if (principal.type === 'api_key' && principal.svcIds.length && !principal.svcIds.includes(svcId)) {
      deny('SVC_NOT_ALLOWED_FOR_KEY', `This API key may act only for ${principal.svcIds.join(', ')}`);
    }
    const manifest = await manifestOf(orgId, svcId);
    const document = manifest?.document as unknown as ManifestDocument | undefined;
    if (!manifest) deny('MANIFEST_NOT_FOUND', `No manifest is registered for agent "${svcId}"`);
    else if (manifest.status !== 'active') {
      deny('MANIFEST_NOT_ACTIVE', `The manifest of "${svcId}" is ${manifest.status}`, { status: manifest.status });
    }
    if (manifest && agentId !== document!.agent.id) {
      deny('AGENT_MISMATCH', `agent_id "${agentId}" does not match the manifest's agent "${document!.agent.id}"`);
    }
    if (manifest && !manifest.approvedCapabilities.includes(capability)) {
      deny('CAPABILITY_NOT_APPROVED', `"${capability}" is not among the approved capabilities of "${svcId}"`);
    }
    let tokenId: string | undefined;
    if (request.capability_token) {
      const token = await tokens.check(request.capability_token, orgId, svcId);
      if (!token.ok) deny('CAPABILITY_TOKEN_INVALID', token.message);
      else {
        tokenId = token.tokenId;
        const granted = token.capabilities.filter((c) => manifest?.approvedCapabilities.includes(c));
        if (!granted.includes(capability)) deny('CAPABILITY_NOT_IN_TOKEN', `The capability token does not grant "${capability}"`);
      }
    }
    // POLICY_DENIED: org policies are a planned resource (interface.md, v0.2); none can deny yet.
    const limits = document ? effectiveLimits(document) : undefined;
    if (limits && reasons.length === 0 && mode === 'execute') {
      // Counted atomically below, once every other check has passed.
    } else if (limits) {
      const budget = await peekBudget(db.sql, orgId, svcId, limits);
      if (budget.day.current >= budget.day.limit) reasons.push(budgetReason(budget));
      else if (mode === 'evaluate' && budget.hour.current >= budget.hour.limit) {
        deny('POLICY_VIOLATION', `The hourly limit of ${budget.hour.limit} actions is reached`, {
          limit: budget.hour.limit,
          period: '1h',
          current: budget.hour.current,
        });
      }
    }
    const needsHuman = Boolean(manifest && document!.constraints?.require_human_approval?.includes(capability));
    // What an approval is bound to; only needed when a human is involved.
    const actionHash = needsHuman ? canonicalHash({ svc_id: svcId, agent_id: agentId, action }) : '';
    let approvalToConsume: string | undefined;
    if (needsHuman) {
      if (request.approval_id) {
        const approval = await approvals.check(orgId, request.approval_id, actionHash);
        if (approval.ok) approvalToConsume = request.approval_id;
        else deny('APPROVAL_REQUIRED', `"${capability}" needs a human approval: ${approval.message}`);
      } else {
        deny('APPROVAL_REQUIRED', `"${capability}" needs a human approval`);
      }
    }
    const tool = await toolFor(orgId, action.type);
    if (!tool) deny('TOOL_NOT_CONFIGURED', `No tool connector is configured for action type "${action.type}"`);

    const base = { interaction_id: interactionId, executed: false, result: null };
    if (mode === 'evaluate') {
      return { ...base, decision: reasons.length ? 'deny' : 'allow', reasons, approval_id: request.approval_id ?? null };
    }

    const record = async (decision: GatewayDecision, resultHash: string | null) => {
      await records.append(
          interactionId,
          {
            orgId,
            svcId,
            agentId,
            actionType: action.type,
            tool: action.tool,
            capability,
            paramsHash: canonicalHash(params),
            params,
            decision: decision.decision,
            executed: decision.executed,
            reasons: decision.reasons,
            resultHash,
            approvalId: decision.approval_id,
          },
          (await orgSettings(orgId)).recordParams,
      );
      return decision;
    };

    // A human is asked only when nothing else stands in the way.
    const onlyApprovalMissing = reasons.length === 1 && reasons[0].code === 'APPROVAL_REQUIRED' && !request.approval_id;
    if (onlyApprovalMissing && manifest) {
      const approvalId = await approvals.request({
        orgId,
        svcId,
        agentId,
        manifestId: manifest.id,
        capability,
        action,
        actionHash,
        reasons,
        requestedBy: principal.type === 'api_key' ? principal.keyId : principal.email,
        ttlSeconds: (await orgSettings(orgId)).approvalTtlSeconds,
      });
      reasons[0].details = { approval_id: approvalId };
      return record({ ...base, decision: 'deny', reasons, approval_id: approvalId }, null);
    }
    if (reasons.length) return record({ ...base, decision: 'deny', reasons, approval_id: request.approval_id ?? null }, null);

    // Allowed so far: count the budget, use the token and the approval, all or nothing.
    class Refused extends Error {
      constructor(readonly reason: Reason, readonly budget?: BudgetState) {
        super(reason.message);
      }
    }
    let budget: BudgetState;
    try {
      const count = async (conn: SqlConnection) => {
        const outcome = await takeBudget(conn, orgId, svcId, limits!);
        if (!outcome.ok) {
          if (outcome.exceeded === 'day') throw new Refused(budgetReason(outcome.state), outcome.state);
          throw new Refused(
            {
              code: 'POLICY_VIOLATION',
              message: `The hourly limit of ${outcome.state.hour.limit} actions is reached`,
              details: { limit: outcome.state.hour.limit, period: '1h', current: outcome.state.hour.current },
            },
            outcome.state,
          );
        }
        return outcome.state;
      };
      // Without a token or an approval to use, the budget statement is the whole transaction.
      budget = !tokenId && !approvalToConsume ? await count(db.sql) : await db.sql.transaction(async (tx) => {
        const state = await count(tx);
        if (tokenId && !(await tokens.use(tx, tokenId))) {
          throw new Refused({ code: 'CAPABILITY_TOKEN_INVALID', message: 'The capability token was used up or revoked meanwhile' });
        }
        if (approvalToConsume && !(await approvals.consume(tx, approvalToConsume, actionHash))) {
          throw new Refused({ code: 'APPROVAL_REQUIRED', message: 'The approval has already been used' });
        }
        return state;
      });
    } catch (error) {
      if (!(error instanceof Refused)) throw error;
      const denied = await record({ ...base, decision: 'deny', reasons: [error.reason], approval_id: approvalToConsume ?? null }, null);
      if (error.budget) setRateLimitHeaders(state, error.budget);
      if (error.reason.code === 'POLICY_VIOLATION') {
        const resetAt = error.budget!.hour.window.resetAt;
        throw new AppError('POLICY_VIOLATION', error.reason.message, {
          details: error.reason.details,
          headers: { 'Retry-After': String(Math.max(1, Math.ceil(resetAt - Date.now() / 1000))) },
        });
      }
      return denied;
    }
    setRateLimitHeaders(state, budget);

    const result = await tools.execute(tool!, { svc_id: svcId, agent_id: agentId, action, interaction_id: interactionId });
    return record(
      { ...base, decision: 'allow', executed: true, result, reasons: [], approval_id: approvalToConsume ?? null },
      canonicalHash(result),
    );
  }

  return { decide };
}

export type GatewayService = ReturnType<typeof createGatewayService>;
