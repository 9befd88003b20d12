import type { Deps } from '../../deps.js';
import { isDatabaseUnavailable } from '../../db/unavailable.js';
import { AppError, serviceUnavailable } from '../../errors.js';
import { canonicalHash } from '../../lib/canonical-json.js';
import type { AgentService } from '../agent/agent.service.js';
import type { ApprovalService } from '../approval/approval.service.js';
import { agentScope, outOfScope, principalName, type Principal } from '../auth/authz.js';
import type { CapabilityTokenService } from '../capability-token/capability-token.service.js';
import type { ManifestService } from '../manifest/manifest.service.js';
import type { OrgService } from '../org/org.service.js';
import { matchPolicies, type ActivePolicy, type PolicyEvaluation } from '../policy/policy-rules.js';
import { newInteractionId, type NewRecord, type RecordService, type RecordSubject } from '../record/record.service.js';
import type { ToolService } from '../tool/tool.service.js';
import {
  budgetState,
  budgetWindows,
  policyCounters,
  secondsUntil,
  type BudgetLimits,
  type BudgetState,
  type BudgetWindows,
  type PolicyCounter,
} from './budget.js';
import {
  budgetExceeded,
  checkDecision,
  conditionFacts,
  hourlyLimitReached,
  limitsReached,
  parseGatewayRequest,
  policyEntries,
  policyLimitReached,
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
import { budgetCountsOf, countAndJournal, peekCounts, type JournalEntry } from './gateway.store.js';

/**
 * The gateway decision, one path for every channel (REST, GraphQL, MCP):
 *
 *   load the context (in parallel) → pure checks (decision.ts) → one commit (budget, token use,
 *   approval consumption and the write-ahead journal entry) → the tool call → the record.
 *
 * The service returns data: the decision, the budget state and whether a rate limit (the hourly
 * budget or a policy's) refused the action. Each channel's edge turns that into its wire form
 * (headers, a 429, an MCP result).
 */

export interface DecisionOptions {
  mode: GatewayMode;
  channel: GatewayChannel;
  /**
   * Runs the wait for the tool's answer: the caller's edge may let other work run meanwhile (its
   * turn in the process, src/lib/fair-scheduler.ts). Absent: the tool is awaited as is.
   */
  awayWhile?: <T>(wait: () => Promise<T>) => Promise<T>;
}

export interface DecisionOutcome {
  decision: GatewayDecision;
  /** The agent's budget after an execute counted it (or was refused by it): rate-limit headers. */
  budget: BudgetState | null;
  /** A rate limit refused the action; it is recorded as denied and the edge answers 429. */
  rateLimited: RateLimited | null;
}

/** The limit that refused: the hourly budget or an enforced `rate_limit` policy. */
export interface RateLimited {
  reason: Reason;
  limit: number;
  /** Unix seconds when its window ends. */
  resetAt: number;
  retryAfterSeconds: number;
}

type Commit =
  | { ok: true; budget: BudgetState; counts: number[] }
  | {
      ok: false;
      reason: Reason;
      budget: BudgetState | null;
      rateLimited: RateLimited | null;
      refusedBy: PolicyCounter | null;
    };

interface Collaborators {
  agents: Pick<AgentService, 'gate' | 'seen'>;
  manifests: ManifestService;
  orgs: OrgService;
  tools: ToolService;
  tokens: CapabilityTokenService;
  approvals: ApprovalService;
  records: RecordService;
  journal: ExecutionJournal;
  policies: { active(orgId: string): Promise<readonly ActivePolicy[]> };
}

/**
 * The caller as policy conditions see it (`key`) and rate limits count it: an API key, the user of
 * an evaluate, or an MCP client's OAuth grant (its id where a key's would be, its one scope).
 */
function callerFacts(principal: Principal): { id: string; prefix: string; scopes: readonly string[] } {
  if (principal.type === 'api_key')
    return { id: principal.keyId, prefix: principal.keyPrefix, scopes: principal.scopes };
  if (principal.type === 'oauth_grant') return { id: principal.grantId, prefix: '', scopes: principal.scopes };
  return { id: principal.userId, prefix: '', scopes: [] };
}

const LEASE_LOST = Symbol('lease lost');
type LeaseLost = typeof LEASE_LOST;

/**
 * A failure after the interaction id was given out: when the database is unreachable, a 503 that
 * names the interaction and says whether the tool ran, so the caller can find its record (written
 * once the database is back) instead of retrying blindly. Anything else is passed on.
 */
function unavailableFor(error: unknown, interactionId: string, executed: boolean): unknown {
  if (!isDatabaseUnavailable(error)) return error;
  return serviceUnavailable(
    executed
      ? 'The tool ran, but the database cannot be reached: its record is written once the database is back (find it by interaction_id); do not repeat the action blindly'
      : 'The database cannot be reached; the action was not executed (if it was counted, its record appears under interaction_id once the database is back)',
    { interaction_id: interactionId, executed },
  );
}

/** What a pending approval is bound to: the SHA-256 of the canonical {svc_id, agent_id, action}. */
const actionHashOf = (call: GatewayCall) =>
  canonicalHash({ svc_id: call.svcId, agent_id: call.agentId, action: call.action });

export function createGatewayService({ db, env, telemetry }: Deps, modules: Collaborators) {
  const { agents, manifests, orgs, tools, tokens, approvals, records, journal, policies } = modules;
  const policyEvaluated = (policy: ActivePolicy, result: PolicyEvaluation) =>
    telemetry.policyEvaluated(policy.effect, policy.mode, result);

  /**
   * Everything the checks need, each read independent of the others and mostly cached; then the
   * policies that apply (pure, on facts built once), and for evaluate the budget's and their rate
   * limits' counts in one query.
   */
  async function loadContext(
    principal: Principal,
    call: GatewayCall,
    options: DecisionOptions,
    windows: BudgetWindows,
  ) {
    const orgId = principal.orgId;
    const { mode } = options;
    const now = Date.now();
    const [agent, manifest, tool, settings, token, approval, active] = await Promise.all([
      agents.gate(orgId, call.svcId),
      manifests.current(orgId, call.svcId),
      tools.forAction(orgId, call.action.type),
      orgs.gatewaySettings(orgId),
      call.capabilityToken ? tokens.check(call.capabilityToken, orgId, call.svcId) : null,
      call.approvalId ? approvals.check(orgId, call.approvalId, actionHashOf(call)) : null,
      policies.active(orgId),
    ]);
    const caller = callerFacts(principal);
    const matches = matchPolicies(
      active,
      call.svcId,
      call.capability,
      () => conditionFacts(call, manifest, caller, { mode, channel: options.channel, now }),
      policyEvaluated,
      env.policyEvalBudget,
    );
    const counters = policyCounters(matches, { orgId, svcId: call.svcId, callerId: caller.id }, now);
    // Only evaluate reports the counts up front; an execute counts them in its commit.
    const counts = mode === 'evaluate' ? await peekCounts(db.sql, windows, counters) : null;
    const limits = counts ? counts.limits.map((current, i) => ({ counter: counters[i], current })) : null;
    const context: DecisionContext = {
      call,
      mode,
      keySvcIds: agentScope(principal) ?? [],
      agent,
      manifest,
      token,
      approval,
      toolConfigured: tool !== null,
      toolHold: tool ? tools.definitionHoldOf(tool, call.action.tool) : undefined,
      budget: manifest && counts ? budgetState(windows, manifest.limits, counts.budget) : null,
      policies: matches,
      limits,
    };
    return { context, tool, settings, counters };
  }

  /**
   * One decision in its span (`gateway execute|evaluate`, the tool call and the record its
   * children), counted by decision, first reason, channel and mode. A request refused before any
   * check (invalid) or a failure is no decision: not counted, the span marked as an error.
   */
  function decide(principal: Principal, request: GatewayRequest, options: DecisionOptions): Promise<DecisionOutcome> {
    return telemetry.withSpan(
      `gateway ${options.mode}`,
      { attributes: { 'agw.mode': options.mode, 'agw.channel': options.channel, 'agw.org_id': principal.orgId } },
      async (span) => {
        const outcome = await decideUntraced(principal, request, options);
        const { decision } = outcome;
        telemetry.decision(decision.decision, decision.reasons, options.channel, options.mode);
        if (span.isRecording()) {
          span.setAttributes({
            'agw.svc_id': request.svc_id,
            'agw.capability': `${request.action.type}:${request.action.tool}`,
            'agw.interaction_id': decision.interaction_id,
            'agw.decision': decision.decision,
            'agw.reasons': decision.reasons.map((reason) => reason.code),
            'agw.executed': decision.executed,
            'agw.policies_matched': decision.policies.length,
          });
        }
        return outcome;
      },
    );
  }

  async function decideUntraced(
    principal: Principal,
    request: GatewayRequest,
    options: DecisionOptions,
  ): Promise<DecisionOutcome> {
    const parsed = parseGatewayRequest(request);
    if ('errors' in parsed) {
      throw new AppError('VALIDATION_ERROR', 'The gateway request is invalid', { details: { errors: parsed.errors } });
    }
    const { call } = parsed;
    const orgId = principal.orgId;
    const interactionId = newInteractionId();
    const windows = budgetWindows(orgId, call.svcId);
    const { context, tool, settings, counters } = await loadContext(principal, call, options, windows);
    let checked = checkDecision(context);
    if (context.agent && !outOfScope(principal, call.svcId)) agents.seen(orgId, call.svcId);
    const base = { interaction_id: interactionId, executed: false, result: null };
    // Until the commit counts them, no rate limit is known to be exceeded.
    let matched = policyEntries(context.policies);

    if (options.mode === 'evaluate') {
      const decision = checked.reasons.length ? 'deny' : 'allow';
      matched = policyEntries(context.policies, limitsReached(context.limits));
      return {
        decision: { ...base, decision, reasons: checked.reasons, approval_id: call.approvalId, policies: matched },
        budget: null,
        rateLimited: null,
      };
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
      channel: options.channel,
    };
    const recordOf = (decision: GatewayDecision, resultHash: string | null): NewRecord => ({
      ...subject,
      params: call.action.params,
      decision: decision.decision,
      executed: decision.executed,
      reasons: decision.reasons,
      resultHash,
      approvalId: decision.approval_id,
      policies: decision.policies,
    });
    const recorded = async (decision: GatewayDecision, resultHash: string | null = null) => {
      await records.append(interactionId, recordOf(decision, resultHash), settings.recordParams);
      return decision;
    };

    if (checked.reasons.length) {
      // Denied anyway: say so too when the day's budget is used up.
      if (context.manifest) {
        context.budget = budgetState(windows, context.manifest.limits, (await peekCounts(db.sql, windows)).budget);
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
          requestedBy: principalName(principal),
          ttlSeconds: settings.approvalTtlSeconds,
        });
        checked.reasons[0].details = { ...checked.reasons[0].details, approval_id: approvalId };
      }
      const decision = await recorded({
        ...base,
        decision: 'deny',
        reasons: checked.reasons,
        approval_id: approvalId,
        policies: matched,
      });
      return { decision, budget: null, rateLimited: null };
    }

    // Allowed so far: count, use and journal in one commit, then call the tool.
    const approvalToUse = checked.needsHuman ? call.approvalId : null;
    const entry: JournalEntry = {
      id: interactionId,
      ...subject,
      params: settings.recordParams ? call.action.params : null,
      approvalId: approvalToUse,
      // An interrupted execution's record lists the matches as known before the commit counted them.
      policies: matched,
    };
    journal.begin(interactionId);
    let commit: Commit;
    try {
      commit = await commitExecution(context, counters, windows, entry, approvalToUse);
    } catch (error) {
      journal.end(interactionId, false);
      // The commit may have reached the database before the connection failed: then the journal
      // has the entry and recovery records it. The tool did not run.
      throw unavailableFor(error, interactionId, false);
    }
    if (!commit.ok) {
      journal.end(interactionId, false);
      if (commit.refusedBy) matched = policyEntries(context.policies, new Map([[commit.refusedBy.match, true]]));
      const decision = await recorded({
        ...base,
        decision: 'deny',
        reasons: [commit.reason],
        approval_id: approvalToUse,
        policies: matched,
      });
      return { decision, budget: commit.budget, rateLimited: commit.rateLimited };
    }
    const counted = commit.counts;
    matched = policyEntries(
      context.policies,
      new Map(counters.map((counter, i) => [counter.match, counted[i] > counter.limit])),
    );

    const callTool = () =>
      tools.execute(tool!, {
        svc_id: call.svcId,
        agent_id: call.agentId,
        action: call.action,
        interaction_id: interactionId,
      });
    const result = await (options.awayWhile ? options.awayWhile(callTool) : callTool());
    const allowed: GatewayDecision = {
      ...base,
      decision: 'allow',
      executed: true,
      result,
      reasons: [],
      approval_id: approvalToUse,
      policies: matched,
    };
    const resultHash = canonicalHash(result);
    let decision: GatewayDecision;
    try {
      decision = await recorded(allowed, resultHash);
    } catch (error) {
      if (isDatabaseUnavailable(error)) {
        // The tool ran: its record is written with its real outcome once the database is back.
        journal.defer(interactionId, recordOf(allowed, resultHash), settings.recordParams);
        throw unavailableFor(error, interactionId, true);
      }
      // The journal entry stays: this process's recovery sweep records the execution as interrupted.
      journal.end(interactionId, false);
      throw error;
    }
    journal.end(interactionId, true);
    return { decision, budget: commit.budget, rateLimited: null };
  }

  /**
   * The one commit of an allowed execute. Without a token or an approval to use, it is the single
   * statement that counts the policy rate limits and the budget and writes the journal entry;
   * otherwise a transaction that uses them first and keeps nothing when anything is refused.
   */
  async function commitExecution(
    context: DecisionContext,
    counters: readonly PolicyCounter[],
    windows: BudgetWindows,
    entry: JournalEntry,
    approvalToUse: string | null,
  ): Promise<Commit> {
    const limits = context.manifest!.limits;
    const tokenId = context.token?.ok ? context.token.tokenId : null;
    const refusal = (reason: Reason): Commit => ({
      ok: false,
      reason,
      budget: null,
      rateLimited: null,
      refusedBy: null,
    });
    const counted = async (conn: Parameters<typeof countAndJournal>[0], owner: number): Promise<Commit | LeaseLost> => {
      const outcome = await countAndJournal(conn, counters, windows, limits, owner, entry);
      if ('leaseLost' in outcome) return LEASE_LOST;
      if (outcome.ok) return { ok: true, budget: outcome.budget.state, counts: outcome.counts };
      if (outcome.refusedBy !== null) {
        const counter = counters[outcome.refusedBy];
        const reason = policyLimitReached(context.policies[counter.match], counter);
        const { resetAt } = counter.window;
        return {
          ok: false,
          reason,
          budget: null,
          rateLimited: { reason, limit: counter.limit, resetAt, retryAfterSeconds: secondsUntil(counter.window) },
          refusedBy: counter,
        };
      }
      const { state, exceeded } = outcome.budget;
      if (exceeded === 'day')
        return { ok: false, reason: budgetExceeded(state), budget: state, rateLimited: null, refusedBy: null };
      const reason = hourlyLimitReached(state);
      const { window } = state.hour;
      return {
        ok: false,
        reason,
        budget: state,
        rateLimited: {
          reason,
          limit: state.hour.limit,
          resetAt: window.resetAt,
          retryAfterSeconds: secondsUntil(window),
        },
        refusedBy: null,
      };
    };
    const attempt = async (owner: number): Promise<Commit | LeaseLost> => {
      if (!tokenId && !approvalToUse) return counted(db.sql, owner);
      return db.sql.transactionIf(async (tx) => {
        if (tokenId && !(await tokens.use(tx, tokenId))) {
          return {
            commit: false,
            value: refusal({
              code: 'CAPABILITY_TOKEN_INVALID',
              message: 'The capability token was used up or revoked meanwhile',
            }),
          };
        }
        if (approvalToUse && !(await approvals.consume(tx, approvalToUse, actionHashOf(context.call)))) {
          return {
            commit: false,
            value: refusal({ code: 'APPROVAL_REQUIRED', message: 'The approval has already been used' }),
          };
        }
        const value = await counted(tx, owner);
        return { commit: value !== LEASE_LOST && value.ok, value };
      });
    };
    const owner = await journal.ownerId();
    const first = await attempt(owner);
    if (first !== LEASE_LOST) return first;
    // This process was taken for a stopped one (its lease ran out while the database was away):
    // nothing was counted; once more under a new owner id.
    await journal.leaseLost(owner);
    const second = await attempt(await journal.ownerId());
    if (second === LEASE_LOST) throw serviceUnavailable('The execution journal could not be claimed; retry shortly');
    return second;
  }

  /**
   * The budget use of several agents in the current hour and day, in one query (agents' `usage`);
   * `limits` null when an agent has no manifest (then nothing can be counted).
   */
  async function usageOf(
    agents: readonly { orgId: string; svcId: string; limits: BudgetLimits | null }[],
  ): Promise<AgentUsage[]> {
    const windows = agents.map(({ orgId, svcId }) => budgetWindows(orgId, svcId));
    const counts = agents.length ? await budgetCountsOf(db.sql, windows) : [];
    const isoAt = (unixSeconds: number) => new Date(unixSeconds * 1000).toISOString();
    return agents.map(({ limits }, i) => ({
      hour: {
        count: counts[i].hour,
        limit: limits?.maxActionsPerHour ?? null,
        resets_at: isoAt(windows[i].hour.window.resetAt),
      },
      day: {
        count: counts[i].day,
        limit: limits?.maxActionsPerDay ?? null,
        resets_at: isoAt(windows[i].day.window.resetAt),
      },
    }));
  }

  return { decide, usageOf };
}

export interface UsageWindow {
  count: number;
  limit: number | null;
  resets_at: string;
}
export interface AgentUsage {
  hour: UsageWindow;
  day: UsageWindow;
}

export type GatewayService = ReturnType<typeof createGatewayService>;
