import type { Deps } from '../../deps.js';
import { AppError } from '../../errors.js';
import { canonicalHash } from '../../lib/canonical-json.js';
import type { ApprovalService } from '../approval/approval.service.js';
import type { Principal } from '../auth/authz.js';
import type { CapabilityTokenService } from '../capability-token/capability-token.service.js';
import type { ManifestService } from '../manifest/manifest.service.js';
import type { OrgService } from '../org/org.service.js';
import { newInteractionId, type NewRecord, type RecordService, type RecordSubject } from '../record/record.service.js';
import type { ToolService } from '../tool/tool.service.js';
import { budgetState, budgetWindows, retryAfterSeconds, type BudgetState, type BudgetWindows } from './budget.js';
import {
  budgetExceeded,
  checkDecision,
  hourlyLimitReached,
  parseGatewayRequest,
  shouldAskHuman,
  type DecisionContext,
  type GatewayCall,
  type GatewayChannel,
  type GatewayDecision,
  type GatewayMode,
  type GatewayRequest,
  type Reason,
} from './decision.js';
import type { ExecutionJournal } from './execution-journal.js';
import { countAndJournal, peekBudget, type JournalEntry } from './gateway.store.js';

/**
 * The gateway decision, one path for every channel (REST, GraphQL, MCP):
 *
 *   load the context (in parallel) → pure checks (decision.ts) → one commit (budget, token use,
 *   approval consumption and the write-ahead journal entry) → the tool call → the record.
 *
 * The service returns data: the decision, the budget state and whether the hourly limit refused
 * the action. Each channel's edge turns that into its wire form (headers, a 429, an MCP result).
 */

export interface DecisionOptions {
  mode: GatewayMode;
  channel: GatewayChannel;
}

export interface DecisionOutcome {
  decision: GatewayDecision;
  /** The agent's budget after an execute counted it (or was refused by it): rate-limit headers. */
  budget: BudgetState | null;
  /** The hourly limit refused the action; it is recorded as denied and the edge answers 429. */
  rateLimited: { reason: Reason; retryAfterSeconds: number } | null;
}

type Commit =
  | { ok: true; budget: BudgetState }
  | { ok: false; reason: Reason; budget: BudgetState | null; hourly: boolean };

interface Collaborators {
  manifests: ManifestService;
  orgs: OrgService;
  tools: ToolService;
  tokens: CapabilityTokenService;
  approvals: ApprovalService;
  records: RecordService;
  journal: ExecutionJournal;
}

/** What a pending approval is bound to: the SHA-256 of the canonical {svc_id, agent_id, action}. */
const actionHashOf = (call: GatewayCall) => canonicalHash({ svc_id: call.svcId, agent_id: call.agentId, action: call.action });

export function createGatewayService({ db }: Deps, modules: Collaborators) {
  const { manifests, orgs, tools, tokens, approvals, records, journal } = modules;

  /** Everything the checks need, each read independent of the others and mostly cached. */
  async function loadContext(principal: Principal, call: GatewayCall, mode: GatewayMode, windows: BudgetWindows) {
    const orgId = principal.orgId;
    const [manifest, tool, settings, token, approval, counts] = await Promise.all([
      manifests.current(orgId, call.svcId),
      tools.forAction(orgId, call.action.type),
      orgs.gatewaySettings(orgId),
      call.capabilityToken ? tokens.check(call.capabilityToken, orgId, call.svcId) : null,
      call.approvalId ? approvals.check(orgId, call.approvalId, actionHashOf(call)) : null,
      // Only evaluate reports the budget up front; an execute counts it in its commit.
      mode === 'evaluate' ? peekBudget(db.sql, windows) : null,
    ]);
    const context: DecisionContext = {
      call,
      mode,
      keySvcIds: principal.type === 'api_key' ? principal.svcIds : [],
      manifest,
      token,
      approval,
      toolConfigured: tool !== null,
      budget: manifest && counts ? budgetState(windows, manifest.limits, counts) : null,
    };
    return { context, tool, settings };
  }

  async function decide(principal: Principal, request: GatewayRequest, options: DecisionOptions): Promise<DecisionOutcome> {
    const parsed = parseGatewayRequest(request);
    if ('errors' in parsed) {
      throw new AppError('VALIDATION_ERROR', 'The gateway request is invalid', { details: { errors: parsed.errors } });
    }
    const { call } = parsed;
    const orgId = principal.orgId;
    const interactionId = newInteractionId();
    const windows = budgetWindows(orgId, call.svcId);
    const { context, tool, settings } = await loadContext(principal, call, options.mode, windows);
    let checked = checkDecision(context);
    const base = { interaction_id: interactionId, executed: false, result: null };

    if (options.mode === 'evaluate') {
      const decision = checked.reasons.length ? 'deny' : 'allow';
      return { decision: { ...base, decision, reasons: checked.reasons, approval_id: call.approvalId }, budget: null, rateLimited: null };
    }

    // Hashed before anything is counted or called, so nothing about the params can fail later.
    const paramsHash = canonicalHash(call.action.params);

    const subject: RecordSubject = {
      orgId,
      svcId: call.svcId,
      agentId: call.agentId,
      actionType: call.action.type,
      tool: call.action.tool,
      capability: call.capability,
      paramsHash,
    };
    const recordOf = (decision: GatewayDecision, resultHash: string | null): NewRecord => ({
      ...subject,
      params: call.action.params,
      decision: decision.decision,
      executed: decision.executed,
      reasons: decision.reasons,
      resultHash,
      approvalId: decision.approval_id,
    });
    const recorded = async (decision: GatewayDecision, resultHash: string | null = null) => {
      await records.append(interactionId, recordOf(decision, resultHash), settings.recordParams);
      return decision;
    };

    if (checked.reasons.length) {
      // Denied anyway: say so too when the day's budget is used up.
      if (context.manifest) {
        context.budget = budgetState(windows, context.manifest.limits, await peekBudget(db.sql, windows));
        checked = checkDecision(context);
      }
      let approvalId = call.approvalId;
      if (shouldAskHuman(call, checked)) {
        approvalId = await approvals.request({
          orgId,
          svcId: call.svcId,
          agentId: call.agentId,
          manifestId: context.manifest!.id,
          capability: call.capability,
          action: call.action,
          actionHash: actionHashOf(call),
          reasons: checked.reasons,
          requestedBy: principal.type === 'api_key' ? principal.keyId : principal.email,
          ttlSeconds: settings.approvalTtlSeconds,
        });
        checked.reasons[0].details = { approval_id: approvalId };
      }
      const decision = await recorded({ ...base, decision: 'deny', reasons: checked.reasons, approval_id: approvalId });
      return { decision, budget: null, rateLimited: null };
    }

    // Allowed so far: count, use and journal in one commit, then call the tool.
    const approvalToUse = checked.needsHuman ? call.approvalId : null;
    const entry: JournalEntry = {
      id: interactionId,
      ...subject,
      params: settings.recordParams ? call.action.params : null,
      approvalId: approvalToUse,
    };
    journal.begin(interactionId);
    let commit: Commit;
    try {
      commit = await commitExecution(context, windows, entry, approvalToUse);
    } catch (error) {
      journal.end(interactionId, false);
      throw error;
    }
    if (!commit.ok) {
      journal.end(interactionId, false);
      const decision = await recorded({ ...base, decision: 'deny', reasons: [commit.reason], approval_id: approvalToUse });
      const rateLimited = commit.hourly ? { reason: commit.reason, retryAfterSeconds: retryAfterSeconds(commit.budget!) } : null;
      return { decision, budget: commit.budget, rateLimited };
    }

    const result = await tools.execute(tool!, {
      svc_id: call.svcId,
      agent_id: call.agentId,
      action: call.action,
      interaction_id: interactionId,
    });
    let decision: GatewayDecision;
    try {
      decision = await recorded(
        { ...base, decision: 'allow', executed: true, result, reasons: [], approval_id: approvalToUse },
        canonicalHash(result),
      );
    } catch (error) {
      // The journal entry stays: this process's recovery sweep records the execution as interrupted.
      journal.end(interactionId, false);
      throw error;
    }
    journal.end(interactionId, true);
    return { decision, budget: commit.budget, rateLimited: null };
  }

  /**
   * The one commit of an allowed execute. Without a token or an approval to use, it is the single
   * budget-and-journal statement; otherwise a transaction that uses them first and keeps nothing
   * when anything is refused.
   */
  async function commitExecution(context: DecisionContext, windows: BudgetWindows, entry: JournalEntry, approvalToUse: string | null): Promise<Commit> {
    const limits = context.manifest!.limits;
    const tokenId = context.token?.ok ? context.token.tokenId : null;
    const owner = await journal.ownerId();
    const refusal = (reason: Reason): Commit => ({ ok: false, reason, budget: null, hourly: false });
    const counted = async (conn: Parameters<typeof countAndJournal>[0]): Promise<Commit> => {
      const outcome = await countAndJournal(conn, windows, limits, owner, entry);
      if (outcome.ok) return { ok: true, budget: outcome.state };
      const hourly = outcome.exceeded === 'hour';
      return { ok: false, reason: hourly ? hourlyLimitReached(outcome.state) : budgetExceeded(outcome.state), budget: outcome.state, hourly };
    };
    if (!tokenId && !approvalToUse) return counted(db.sql);
    return db.sql.transactionIf(async (tx) => {
      if (tokenId && !(await tokens.use(tx, tokenId))) {
        return { commit: false, value: refusal({ code: 'CAPABILITY_TOKEN_INVALID', message: 'The capability token was used up or revoked meanwhile' }) };
      }
      if (approvalToUse && !(await approvals.consume(tx, approvalToUse, actionHashOf(context.call)))) {
        return { commit: false, value: refusal({ code: 'APPROVAL_REQUIRED', message: 'The approval has already been used' }) };
      }
      const value = await counted(tx);
      return { commit: value.ok, value };
    });
  }

  return { decide };
}

export type GatewayService = ReturnType<typeof createGatewayService>;
