import type { Deps } from '../../deps.js';
import type { SqlConnection } from '../../db/sql.js';
import { isDatabaseUnavailable } from '../../db/unavailable.js';
import { AppError, serviceUnavailable } from '../../errors.js';
import { canonicalHash } from '../../lib/canonical-json.js';
import type { AgentService } from '../agent/agent.service.js';
import type { ApprovalService } from '../approval/approval.service.js';
import { agentScope, outOfScope, principalName, type Principal } from '../../authz/authz.js';
import type { CapabilityTokenService } from '../capability-token/capability-token.service.js';
import type { ManifestService } from '../manifest/manifest.service.js';
import type { OrgService } from '../org/org.service.js';
import { redact } from '../policy/content-detectors.js';
import type { ConditionFacts, HistoryFact } from '../policy/policy-condition.js';
import {
  historyWindowFor,
  matchPolicies,
  scanAhead,
  type ActivePolicy,
  type PolicyEvaluation,
} from '../policy/policy-rules.js';
import type { RecordedConfirmation, RecordedPolicy } from '../record/record-chain.js';
import { newInteractionId, type NewRecord, type RecordService, type RecordSubject } from '../record/record.service.js';
import type { ToolResult } from '../tool/connectors.js';
import { type ConnectionAccess, type ToolService, usedConnectionOf } from '../tool/tool.service.js';
import {
  budgetState,
  budgetWindows,
  policyCounters,
  secondsUntil,
  type BudgetLimits,
  type BudgetCounts,
  type BudgetState,
  type BudgetWindows,
  type PolicyCounter,
} from './budget.js';
import {
  budgetExceeded,
  checkDecision,
  conditionFacts,
  decisionLabels,
  hourlyLimitReached,
  limitsReached,
  parseGatewayRequest,
  policyEntries,
  policyLimitReached,
  resultVerdict,
  shouldAskHuman,
  type Checked,
  type ConfirmationCheck,
  type DecisionContext,
  type GatewayCall,
  type GatewayChannel,
  type GatewayDecision,
  type GatewayMode,
  type GatewayRequest,
  type Reason,
} from './decision.js';
import type { ExecutionJournal } from './execution-journal.js';
import {
  type AllowanceOutcome,
  budgetCountsOf,
  type CounterKey,
  countAndJournal,
  countAndJournalMany,
  counterKeyOf,
  type JournalEntry,
  readCounts,
} from './gateway.store.js';
import { keyBatcher } from '../../lib/key-batcher.js';
import { appendHistory, lockAgentHistory, undoUnless, type HistoryEntry } from './agent-history.store.js';
import { createHistoryReader } from './agent-history.js';
import {
  answerConfirmation,
  askConfirmation,
  confirmationState,
  postConfirmationAnswer,
  takePostedAnswer,
} from './confirmation.store.js';
import { randomId } from '../../lib/ids.js';

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
  /**
   * Confirmation by the caller's user (effect require_confirmation), for an MCP client that accepts
   * form elicitation: `canAsk` when it does, `answer` when this call carries its user's answer.
   */
  confirmation?: { canAsk: boolean; answer: ConfirmationAnswer | null };
}

/**
 * A user's answer to a confirmation question, as the MCP edge read it: carried by the call
 * (2026-07-28's retry, the question's id being its request state), or `posted` on its own
 * (2025-11-25's response to `elicitation/create`) and kept in the question's row.
 */
export interface ConfirmationAnswer {
  id: string;
  action: ElicitationAction | 'posted';
}

export type ElicitationAction = 'accept' | 'decline' | 'cancel';

/** What the edge asks the user when a call needs only their confirmation. */
export interface ConfirmationQuestion {
  id: string;
  message: string;
}

export interface DecisionOutcome {
  decision: GatewayDecision;
  /** The agent's budget after an execute counted it (or was refused by it): rate-limit headers. */
  budget: BudgetState | null;
  /** A rate limit refused the action; it is recorded as denied and the edge answers 429. */
  rateLimited: RateLimited | null;
  /** All the call lacks is its user's confirmation, and the client can ask: nothing was recorded yet. */
  confirm?: ConfirmationQuestion;
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

type Refusal = Extract<Commit, { ok: false }>;

const refusal = (reason: Reason): Refusal => ({ ok: false, reason, budget: null, rateLimited: null, refusedBy: null });

/** The commit found an enforced policy rate limit reached: 429 with that limit's window. */
function policyRefusal(context: DecisionContext, counter: PolicyCounter): Refusal {
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

/** The commit found the agent's budget used up: the day's is a denial, the hour's a 429 as well. */
function budgetRefusal(state: BudgetState, exceeded: 'day' | 'hour'): Refusal {
  if (exceeded === 'day') return { ...refusal(budgetExceeded(state)), budget: state };
  const reason = hourlyLimitReached(state);
  const { window } = state.hour;
  return {
    ok: false,
    reason,
    budget: state,
    rateLimited: { reason, limit: state.hour.limit, resetAt: window.resetAt, retryAfterSeconds: secondsUntil(window) },
    refusedBy: null,
  };
}

/** What the checks and the steps after them read, loaded once per decision. */
interface Loaded {
  context: DecisionContext;
  tool: Awaited<ReturnType<ToolService['forAction']>>;
  /** For a tool with an OAuth connection: the caller's token, or why there is none. */
  upstream: ConnectionAccess | undefined;
  settings: Awaited<ReturnType<OrgService['gatewaySettings']>>;
  counters: PolicyCounter[];
  /** The org's enabled policies: those on the tool's result are matched once it ran. */
  active: readonly ActivePolicy[];
  /** The request's condition facts, built at most once. */
  facts: () => ConditionFacts;
}

/** A request being decided, before anything is read for it. */
interface Request {
  interactionId: string;
  principal: Principal;
  call: GatewayCall;
  options: DecisionOptions;
  windows: BudgetWindows;
  /** The decision's time (Date.now()): its conditions' `request.time`, its history entry's. */
  now: number;
  /** The user's answer to a confirmation of this call, once taken; null when none came with it. */
  confirmation: ConfirmationCheck | null;
}

/** An execute being decided: the request, what was loaded for it, and what its record will say. */
interface Execution extends Loaded, Request {
  subject: RecordSubject;
}

const executionOf = (asked: Request, loaded: Loaded): Execution => ({
  ...loaded,
  ...asked,
  subject: subjectOf(asked.principal.orgId, asked.call, asked.options.channel),
});

/** Where a history window of `windowSeconds` begins for this decision. */
const since = ({ now }: Request, windowSeconds: number) => new Date(now - windowSeconds * 1000);

/** A decision's entry in its agent's history. */
function historyEntryOf(
  { principal, call, interactionId, now }: Request,
  decision: 'allow' | 'deny',
  labels: readonly string[],
): HistoryEntry {
  return {
    orgId: principal.orgId,
    svcId: call.svcId,
    id: interactionId,
    at: new Date(now),
    actionType: call.action.type,
    tool: call.action.tool,
    capability: call.capability,
    decision,
    // An allowed execute's tool is called once the transaction commits.
    executed: decision === 'allow',
    labels,
  };
}

/** What the serialized transaction decided: a denial by the checks, or what the commit said. */
type SerializedDecision =
  | { kind: 'ask'; execution: Execution; checked: Checked }
  | { kind: 'denied'; execution: Execution; checked: Checked }
  | { kind: 'committed'; execution: Execution; commit: Commit; approvalToUse: string | null };

/** The request checked for shape (a 422 naming every problem), as every later step works on it. */
function parseCall(request: GatewayRequest): GatewayCall {
  const parsed = parseGatewayRequest(request);
  if ('errors' in parsed) {
    throw new AppError('VALIDATION_ERROR', 'The gateway request is invalid', { details: { errors: parsed.errors } });
  }
  return parsed.call;
}

/** A decision that executed nothing. */
const unexecuted = (
  interactionId: string,
  verdict: Pick<GatewayDecision, 'decision' | 'reasons' | 'approval_id' | 'policies' | 'labels'>,
): GatewayDecision => ({ interaction_id: interactionId, executed: false, result: null, redactions: [], ...verdict });

/** Evaluate answers the checks as they stand, with the rate limits its counts show reached; nothing is recorded. */
function evaluated(interactionId: string, context: DecisionContext, checked: Checked): DecisionOutcome {
  const decision = unexecuted(interactionId, {
    decision: checked.reasons.length ? 'deny' : 'allow',
    reasons: checked.reasons,
    approval_id: context.call.approvalId,
    policies: policyEntries(context.policies, limitsReached(context.limits)),
    labels: decisionLabels(context.policies),
  });
  return { decision, budget: null, rateLimited: null };
}

function subjectOf(orgId: string, call: GatewayCall, channel: GatewayChannel): RecordSubject {
  return {
    orgId,
    svcId: call.svcId,
    agentId: call.agentId,
    actionType: call.action.type,
    tool: call.action.tool,
    capability: call.capability,
    // Hashed before anything is counted or called, so nothing about the params can fail later.
    paramsHash: canonicalHash(call.action.params),
    channel,
  };
}

/**
 * The hashes a record keeps of a tool's result: of what the agent was given (the redacted result,
 * when a policy redacted it; the withheld one, when a policy withheld it) and, after a redaction,
 * of the original.
 */
interface ResultHashes {
  result: string;
  original: string | null;
}

function recordOf(execution: Execution, decision: GatewayDecision, hashes: ResultHashes | null): NewRecord {
  const { subject, call, upstream } = execution;
  return {
    ...subject,
    params: call.action.params,
    decision: decision.decision,
    executed: decision.executed,
    reasons: decision.reasons,
    resultHash: hashes?.result ?? null,
    originalResultHash: hashes?.original ?? null,
    redactions: decision.redactions,
    approvalId: decision.approval_id,
    policies: decision.policies,
    // The OAuth connection the call went (or would have gone) with: its id and user, never its token.
    connection: usedConnectionOf(upstream),
    labels: decision.labels,
    confirmation: recordedConfirmation(execution),
  };
}

/** The confirmation a call runs with, as its record signs it; null without one. */
const recordedConfirmation = ({ confirmation }: Execution): RecordedConfirmation | null =>
  confirmation?.ok ? { confirmation_id: confirmation.id, by: confirmation.by } : null;

/** What the write-ahead journal keeps of an allowed execute until its record exists. */
function journalEntryOf(execution: Execution, approvalToUse: string | null): JournalEntry {
  return {
    id: execution.interactionId,
    ...execution.subject,
    params: execution.settings.recordParams ? execution.call.action.params : null,
    approvalId: approvalToUse,
    // An interrupted execution's record lists the matches as known before the commit counted them.
    policies: policyEntries(execution.context.policies),
    // The same connection as recordOf's, so that an interrupted execution names it too.
    connection: usedConnectionOf(execution.upstream),
    labels: decisionLabels(execution.context.policies),
    confirmation: recordedConfirmation(execution),
  };
}

/** The matched policies once the commit counted them: whose rate limit this action went past. */
function policiesCounted({ context, counters }: Execution, counts: readonly number[]): RecordedPolicy[] {
  return policyEntries(
    context.policies,
    new Map(counters.map((counter, i) => [counter.match, counts[i] > counter.limit])),
  );
}

/** What the commit's count said, as the execute's answer. */
function commitOutcome({ context, counters }: Execution, outcome: AllowanceOutcome): Commit | LeaseLost {
  if ('leaseLost' in outcome) return LEASE_LOST;
  if (outcome.ok) return { ok: true, budget: outcome.budget.state, counts: outcome.counts };
  if (outcome.refusedBy !== null) return policyRefusal(context, counters[outcome.refusedBy]);
  return budgetRefusal(outcome.budget.state, outcome.budget.exceeded);
}

/**
 * The single statement that counts the policy rate limits and the budget and writes the journal
 * entry, on `conn` (the driver, or the transaction that used a token or an approval first).
 */
async function countAndJournalOn(
  conn: Parameters<typeof countAndJournal>[0],
  execution: Execution,
  entry: JournalEntry,
  owner: number,
): Promise<Commit | LeaseLost> {
  const { counters, windows, context } = execution;
  return commitOutcome(
    execution,
    await countAndJournal(conn, counters, windows, context.manifest!.limits, owner, entry),
  );
}

/** How long a question to the user stays answerable. */
const CONFIRMATION_TTL_SECONDS = 600;

/** The client can ask its user, and the user's confirmation is all the call lacks (and none came with it). */
const asksUser = ({ options, confirmation }: Request, { reasons }: Checked) =>
  options.mode === 'execute' &&
  options.confirmation?.canAsk === true &&
  confirmation === null &&
  reasons.length === 1 &&
  reasons[0].code === 'CONFIRMATION_REQUIRED';

/** At most this many executes share one commit: a bound on the statement's size and on a batch's wait. */
const MAX_COMMIT_BATCH = 64;

interface QueuedCommit {
  execution: Execution;
  entry: JournalEntry;
  owner: number;
}

/**
 * Executes whose commits may share a statement: the same owner, counters, windows and limits (one
 * agent's executes of an action the same policies match). Every commit of such a batch locks the
 * rows the first locked, so a batch never takes a lock out of take_allowance's order.
 */
function commitBatchKey({ execution: { counters, windows, context }, owner }: QueuedCommit): string {
  const limits = context.manifest!.limits;
  const counterKeys = counters.map((c) => `${counterKeyOf(c)}:${c.limit}:${c.enforced}`);
  return [owner, counterKeyOf(windows.day), counterKeyOf(windows.hour), limits.maxActionsPerDay]
    .concat(limits.maxActionsPerHour, counterKeys)
    .join('|');
}

/** What `read` reads for a decision, in its order. */
type Reads = [
  Awaited<ReturnType<AgentService['gate']>>,
  Awaited<ReturnType<ManifestService['current']>>,
  Awaited<ReturnType<ToolService['forAction']>>,
  ConnectionAccess | undefined,
  Awaited<ReturnType<OrgService['gatewaySettings']>>,
  Awaited<ReturnType<CapabilityTokenService['check']>> | null,
  Awaited<ReturnType<ApprovalService['check']>> | null,
  readonly ActivePolicy[],
];

export function createGatewayService({ db, env, telemetry }: Deps, modules: Collaborators) {
  const { agents, manifests, orgs, tools, tokens, approvals, records, journal, policies } = modules;
  const histories = createHistoryReader();
  const policyEvaluated = (policy: ActivePolicy, result: PolicyEvaluation) =>
    telemetry.policyEvaluated(policy.effect, policy.mode, result);

  /**
   * Counter reads without counting (evaluate; requests already denied). Reads that arrive while
   * one is in flight go together in the next, one statement for all of them: a burst of evaluates
   * costs a read per round trip, not one per request, and each still reads after it arrived.
   */
  const readCountsBatched = keyBatcher<readonly CounterKey[], Map<string, number>>(async (_, batch) => {
    const keys = new Map(batch.flatMap((queued) => queued.item.map((key) => [counterKeyOf(key), key] as const)));
    const counts = await readCounts(db.sql, [...keys.values()]);
    for (const queued of batch) queued.resolve(counts);
  });

  /**
   * The commits of executes with neither a token nor an approval. Those that arrive while one of
   * their batch key is committing go together in the next statement: an agent's counter rows stay
   * locked until a commit is durable, so one agent's executes would otherwise wait for one disk
   * flush each. Should a batch fail for any reason but an unreachable database, each commit is
   * tried alone, so that one execute's bad entry cannot fail the others.
   */
  const commitBatched = keyBatcher<QueuedCommit, Commit | LeaseLost>(async (_, batch) => {
    const commits = batch.map((queued) => queued.item);
    const outcomes = await commitTogether(commits).catch((error: unknown) => {
      if (commits.length === 1 || isDatabaseUnavailable(error)) throw error;
      return undefined;
    });
    if (outcomes) {
      batch.forEach((queued, i) => queued.resolve(commitOutcome(queued.item.execution, outcomes[i])));
      return;
    }
    for (const { item, resolve, reject } of batch) {
      await countAndJournalOn(db.sql, item.execution, item.entry, item.owner).then(resolve, reject);
    }
  }, MAX_COMMIT_BATCH);

  function commitTogether(commits: readonly QueuedCommit[]): Promise<AllowanceOutcome[]> {
    const [{ execution, owner }] = commits;
    const { counters, windows, context } = execution;
    const entries = commits.map((commit) => commit.entry);
    return countAndJournalMany(db.sql, counters, windows, context.manifest!.limits, owner, entries);
  }

  /** The agent's counts in the current hour and day and those of the policy rate limits. */
  async function peekCounts(
    windows: BudgetWindows,
    counters: readonly PolicyCounter[] = [],
  ): Promise<{ budget: BudgetCounts; limits: number[] }> {
    const counts = await readCountsBatched('counts', [windows.hour, windows.day, ...counters]);
    const count = (key: CounterKey) => counts.get(counterKeyOf(key)) ?? 0;
    return {
      budget: { day: count(windows.day), hour: count(windows.hour) },
      limits: counters.map(count),
    };
  }

  /**
   * The reads a decision needs, each independent of the others and mostly cached; a tool with an
   * OAuth connection adds the caller's connection (the user behind the key, grant or session).
   */
  function read(principal: Principal, call: GatewayCall): Promise<Reads> {
    const orgId = principal.orgId;
    const tool = tools.forAction(orgId, call.action.type);
    return Promise.all([
      agents.gate(orgId, call.svcId),
      manifests.current(orgId, call.svcId),
      tool,
      tool.then((found) => (found ? tools.upstreamAccessFor(found, principal.userId) : undefined)),
      orgs.gatewaySettings(orgId),
      call.capabilityToken ? tokens.check(call.capabilityToken, orgId, call.svcId) : null,
      call.approvalId ? approvals.check(orgId, call.approvalId, actionHashOf(call)) : null,
      policies.active(orgId),
    ]);
  }

  /**
   * Everything the checks need, from what `read` read: the policies that apply (pure, on facts
   * built once, with the agent's `history` when a history policy targets it), and for evaluate the
   * budget's and their rate limits' counts in one query. An execute's context reads nothing more:
   * it may be built inside the transaction that serializes an agent's decisions.
   */
  async function loadContext(
    { principal, call, options, windows, now, confirmation }: Request,
    [agent, manifest, tool, upstream, settings, token, approval, active]: Reads,
    history?: readonly HistoryFact[],
  ): Promise<Loaded> {
    const orgId = principal.orgId;
    const { mode } = options;
    const caller = callerFacts(principal);
    let built: ConditionFacts | undefined;
    const facts = () =>
      (built ??= conditionFacts(call, manifest, caller, { mode, channel: options.channel, now }, history));
    const matches = matchPolicies(active, call.svcId, call.capability, facts, policyEvaluated, env.policyEvalBudget);
    const counters = policyCounters(matches, { orgId, svcId: call.svcId, callerId: caller.id }, now);
    // Only evaluate reports the counts up front; an execute counts them in its commit.
    const counts = mode === 'evaluate' ? await peekCounts(windows, counters) : null;
    const context: DecisionContext = {
      call,
      mode,
      keySvcIds: agentScope(principal) ?? [],
      agent,
      manifest,
      token,
      approval,
      confirmation,
      toolConfigured: tool !== null,
      toolHold: tool ? tools.definitionHoldOf(tool, call.action.tool) : undefined,
      upstreamAuthorization: upstream && 'required' in upstream ? upstream.required : undefined,
      budget: manifest && counts ? budgetState(windows, manifest.limits, counts.budget) : null,
      policies: matches,
      limits: counts ? counts.limits.map((current, i) => ({ counter: counters[i], current })) : null,
    };
    return { context, tool, upstream, settings, counters, active, facts };
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

  /** Load the context → check → evaluate's answer, a denial, or an execution under its journal entry. */
  async function decideUntraced(
    principal: Principal,
    request: GatewayRequest,
    options: DecisionOptions,
  ): Promise<DecisionOutcome> {
    const call = parseCall(request);
    const interactionId = newInteractionId();
    const windows = budgetWindows(principal.orgId, call.svcId);
    const reads = await read(principal, call);
    const confirmation = await confirmationOf(principal, call, options.confirmation?.answer ?? null);
    const asked: Request = { principal, call, options, windows, now: Date.now(), interactionId, confirmation };
    if (reads[0] && !outOfScope(principal, call.svcId)) agents.seen(principal.orgId, call.svcId);
    await scanAhead(reads[7], call.svcId, call.capability, call.action.params);
    const historyWindow = historyWindowFor(reads[7], call.svcId);
    if (historyWindow !== null && options.mode === 'execute')
      return journal.run(interactionId, () => executeSerialized(asked, reads, historyWindow));
    const history =
      historyWindow === null
        ? undefined
        : await histories.since(db.sql, principal.orgId, call.svcId, since(asked, historyWindow), asked.now);
    const loaded = await loadContext(asked, reads, history);
    const checked = checkDecision(loaded.context);
    if (options.mode === 'evaluate') return evaluated(interactionId, loaded.context, checked);
    const execution = executionOf(asked, loaded);
    if (asksUser(asked, checked)) return askUser(execution, checked);
    if (checked.reasons.length) return deny(execution, checked);
    return journal.run(interactionId, () => execute(execution, checked));
  }

  /**
   * An execute of an agent that a history policy targets, its decision serialized with the write
   * of its history entry: in one transaction, the agent's lock, its history, the checks, the
   * commit (counting, using a token or an approval, journaling) and its entry. Then, outside it,
   * what follows any decision: the denial's record, or the tool and its record.
   */
  async function executeSerialized(
    asked: Request,
    reads: Reads,
    windowSeconds: number,
  ): Promise<{ value: DecisionOutcome; hasRecord: boolean }> {
    const decided = await decideInHistory(asked, reads, windowSeconds).catch((error: unknown) => {
      throw unavailableFor(error, asked.interactionId, false);
    });
    if (decided.kind === 'ask') return { value: await askUser(decided.execution, decided.checked), hasRecord: true };
    if (decided.kind === 'denied') return { value: await deny(decided.execution, decided.checked), hasRecord: true };
    const { execution, commit, approvalToUse } = decided;
    if (!commit.ok) return { value: await refused(execution, commit, approvalToUse), hasRecord: false };
    const decision = await callTool(execution, approvalToUse, policiesCounted(execution, commit.counts));
    return { value: { decision, budget: commit.budget, rateLimited: null }, hasRecord: true };
  }

  /** The serialized transaction, once more under a new journal owner when the lease of the first was lost. */
  async function decideInHistory(asked: Request, reads: Reads, windowSeconds: number): Promise<SerializedDecision> {
    for (let attempt = 0; attempt < 2; attempt++) {
      const owner = await journal.ownerId();
      const decided = await db.sql.transactionIf<SerializedDecision | LeaseLost>(async (tx) => {
        const value = await decideLocked(tx, asked, reads, windowSeconds, owner);
        return { commit: value !== LEASE_LOST, value };
      });
      if (decided !== LEASE_LOST) return decided;
      await journal.leaseLost(owner);
    }
    throw serviceUnavailable('The execution journal could not be claimed; retry shortly');
  }

  /**
   * Inside the agent's transaction. A refusal found by the commit (a rate limit, the budget, a used
   * token) undoes what the commit did, to its savepoint, and is written to the history as a denial.
   */
  async function decideLocked(
    tx: SqlConnection,
    asked: Request,
    reads: Reads,
    windowSeconds: number,
    owner: number,
  ): Promise<SerializedDecision | LeaseLost> {
    const { orgId } = asked.principal;
    await lockAgentHistory(tx, orgId, asked.call.svcId);
    const history = await histories.since(tx, orgId, asked.call.svcId, since(asked, windowSeconds), asked.now);
    const execution = executionOf(asked, await loadContext(asked, reads, history));
    const checked = checkDecision(execution.context);
    const labels = decisionLabels(execution.context.policies);
    // Not decided yet: the user is asked, and the call comes again with the answer.
    if (asksUser(asked, checked)) return { kind: 'ask', execution, checked };
    if (checked.reasons.length) {
      await appendHistory(tx, historyEntryOf(asked, 'deny', labels));
      return { kind: 'denied', execution, checked };
    }
    const approvalToUse = checked.needsHuman ? asked.call.approvalId : null;
    const entry = journalEntryOf(execution, approvalToUse);
    const commitIt = () => commitWithin(tx, execution, entry, approvalToUse, owner);
    // Counting alone undoes itself when it refuses (take_allowance); a token or an approval used
    // before it is what a savepoint must take back.
    const commit =
      execution.context.token?.ok || approvalToUse
        ? await undoUnless(tx, commitIt, (value) => value === LEASE_LOST || value.ok)
        : await commitIt();
    if (commit === LEASE_LOST) return LEASE_LOST;
    await appendHistory(tx, historyEntryOf(asked, commit.ok ? 'allow' : 'deny', labels));
    return { kind: 'committed', execution, commit, approvalToUse };
  }

  const record = (execution: Execution, decision: GatewayDecision, hashes: ResultHashes | null = null) =>
    records.append(execution.interactionId, recordOf(execution, decision, hashes), execution.settings.recordParams);

  /**
   * The user's answer that came with the call, taken once (bound to the call's hash, on any
   * process): a confirmation when accepted, else why it does not confirm; null without an answer.
   */
  async function confirmationOf(
    principal: Principal,
    call: GatewayCall,
    answer: ConfirmationAnswer | null,
  ): Promise<ConfirmationCheck | null> {
    if (!answer) return null;
    const question = { id: answer.id, orgId: principal.orgId, svcId: call.svcId, callHash: actionHashOf(call) };
    const taken =
      answer.action === 'posted'
        ? await takePostedAnswer(db.sql, question)
        : (await answerConfirmation(db.sql, question))
          ? { action: answer.action, by: principalName(principal) }
          : null;
    if (!taken) return { ok: false, message: 'the answer was already used, expired, or is about another call' };
    if (taken.action === null) return { ok: false, message: 'the user did not answer in time' };
    if (taken.action !== 'accept') return { ok: false, message: `the user answered ${taken.action}` };
    return { ok: true, id: answer.id, by: taken.by ?? principalName(principal) };
  }

  /**
   * A client's answer posted on its own to a question of this agent (2025-11-25), kept for the
   * call that waits on it, on whichever process; false when the question is not open to it.
   */
  async function postConfirmation(
    principal: Principal,
    svcId: string,
    answer: { id: string; action: ElicitationAction },
  ): Promise<boolean> {
    return postConfirmationAnswer(db.sql, {
      id: answer.id,
      orgId: principal.orgId,
      svcId,
      action: answer.action,
      by: principalName(principal),
    });
  }

  /** Where a question a call waits on stands: open, answered (posted), or gone (expired, taken). */
  const confirmationStatus = (principal: Principal, svcId: string, id: string) =>
    confirmationState(db.sql, { id, orgId: principal.orgId, svcId });

  /** The question a call that lacks only its user's confirmation asks, kept for the answer; nothing is recorded. */
  async function askUser(execution: Execution, checked: Checked): Promise<DecisionOutcome> {
    const { principal, call, context, interactionId } = execution;
    const id = randomId('cnf');
    await askConfirmation(db.sql, {
      id,
      orgId: principal.orgId,
      svcId: call.svcId,
      callHash: actionHashOf(call),
      expiresAt: new Date(Date.now() + CONFIRMATION_TTL_SECONDS * 1000),
    });
    const decision = unexecuted(interactionId, {
      decision: 'deny',
      reasons: checked.reasons,
      approval_id: null,
      policies: policyEntries(context.policies),
      labels: decisionLabels(context.policies),
    });
    const message = `Agent "${call.svcId}" wants to run ${call.capability} with ${JSON.stringify(call.action.params).slice(0, 500)}. Allow it?`;
    return { decision, budget: null, rateLimited: null, confirm: { id, message } };
  }

  /** A denial by the checks, recorded; a human is asked when only their approval is missing. */
  async function deny(execution: Execution, checked: Checked): Promise<DecisionOutcome> {
    const { call, context, interactionId } = execution;
    const final = await withDayBudget(execution, checked);
    const asked = shouldAskHuman(call, final)
      ? await askHuman(execution, final.reasons)
      : { approvalId: call.approvalId, reasons: final.reasons };
    const decision = unexecuted(interactionId, {
      decision: 'deny',
      reasons: asked.reasons,
      approval_id: asked.approvalId,
      policies: policyEntries(context.policies),
      labels: decisionLabels(context.policies),
    });
    await record(execution, decision);
    return { decision, budget: null, rateLimited: null };
  }

  /** Denied anyway: the checks again with the budget read, to say so too when the day's is used up. */
  async function withDayBudget({ context, windows }: Execution, checked: Checked): Promise<Checked> {
    if (!context.manifest) return checked;
    const { budget } = await peekCounts(windows);
    return checkDecision({ ...context, budget: budgetState(windows, context.manifest.limits, budget) });
  }

  /** Requests the approval the call lacks; the denial's one reason names it. */
  async function askHuman(execution: Execution, [reason]: Reason[]) {
    const { principal, call, context, settings } = execution;
    const approvalId = await approvals.request({
      orgId: principal.orgId,
      svcId: call.svcId,
      agentId: call.agentId,
      manifestId: context.manifest!.id,
      capability: call.capability,
      action: call.action,
      actionHash: actionHashOf(call),
      reasons: [reason],
      requestedBy: principalName(principal),
      ttlSeconds: settings.approvalTtlSeconds,
    });
    return { approvalId, reasons: [{ ...reason, details: { ...reason.details, approval_id: approvalId } }] };
  }

  /**
   * An allowed execute, run under its journal entry: the commit (counting, using and journaling),
   * then the tool, then the record. Answers whether the record was appended.
   */
  async function execute(
    execution: Execution,
    checked: Checked,
  ): Promise<{ value: DecisionOutcome; hasRecord: boolean }> {
    const approvalToUse = checked.needsHuman ? execution.call.approvalId : null;
    const commit = await commitOrUnavailable(execution, approvalToUse);
    if (!commit.ok) return { value: await refused(execution, commit, approvalToUse), hasRecord: false };
    const decision = await callTool(execution, approvalToUse, policiesCounted(execution, commit.counts));
    return { value: { decision, budget: commit.budget, rateLimited: null }, hasRecord: true };
  }

  async function commitOrUnavailable(execution: Execution, approvalToUse: string | null): Promise<Commit> {
    try {
      return await commitExecution(execution, journalEntryOf(execution, approvalToUse), approvalToUse);
    } catch (error) {
      // The commit may have reached the database before the connection failed: then the journal
      // has the entry and recovery records it. The tool did not run.
      throw unavailableFor(error, execution.interactionId, false);
    }
  }

  /** The commit refused: recorded as denied, naming the policy whose rate limit refused. */
  async function refused(
    execution: Execution,
    commit: Refusal,
    approvalToUse: string | null,
  ): Promise<DecisionOutcome> {
    const exceeded = new Map(commit.refusedBy ? [[commit.refusedBy.match, true]] : []);
    const decision = unexecuted(execution.interactionId, {
      decision: 'deny',
      reasons: [commit.reason],
      approval_id: approvalToUse,
      policies: policyEntries(execution.context.policies, exceeded),
      labels: decisionLabels(execution.context.policies),
    });
    await record(execution, decision);
    return { decision, budget: commit.budget, rateLimited: commit.rateLimited };
  }

  /** Calls the tool (letting other work run meanwhile, when the edge can) and records its outcome. */
  async function callTool(
    execution: Execution,
    approvalToUse: string | null,
    policies: RecordedPolicy[],
  ): Promise<GatewayDecision> {
    const { call, interactionId, options } = execution;
    const send = () =>
      tools.execute(
        execution.tool!,
        {
          svc_id: call.svcId,
          agent_id: call.agentId,
          action: call.action,
          interaction_id: interactionId,
        },
        execution.upstream,
      );
    const result = await (options.awayWhile ? options.awayWhile(send) : send());
    const onResult = matchResult(execution, result);
    const verdict = resultVerdict(onResult);
    // A redaction that replaced nothing leaves the result as it was, and the record as without one.
    const scanned = verdict.detectors.length && result.success ? redact(result.data, verdict.detectors) : null;
    const redacted = scanned?.redactions.length ? scanned : null;
    const shown: ToolResult = redacted && result.success ? { ...result, data: redacted.value } : result;
    const decided: GatewayDecision = {
      interaction_id: interactionId,
      executed: true,
      result: verdict.denial ? null : shown,
      decision: verdict.denial ? 'deny' : 'allow',
      reasons: verdict.denial ? [verdict.denial] : [],
      approval_id: approvalToUse,
      policies: [...policies, ...policyEntries(onResult)],
      labels: decisionLabels(execution.context.policies),
      redactions: verdict.denial ? [] : (redacted?.redactions ?? []),
    };
    const hashes = {
      result: canonicalHash(verdict.denial ? result : shown),
      original: redacted && !verdict.denial ? canonicalHash(result) : null,
    };
    await recordExecuted(execution, decided, hashes);
    return decided;
  }

  /**
   * The policies on the tool's result that match it (the `result` phase): their conditions see
   * the call's facts and `result`, the tool's data (null when it failed).
   */
  function matchResult({ context, facts, active }: Execution, result: ToolResult) {
    const withResult = () => ({ ...facts(), result: result.success ? result.data : null });
    const { call } = context;
    return matchPolicies(
      active,
      call.svcId,
      call.capability,
      withResult,
      policyEvaluated,
      env.policyEvalBudget,
      'result',
    );
  }

  /**
   * The record of an execution whose tool ran. With the database unreachable the journal keeps it
   * and appends it once the database is back; after any other failure the journal entry stays,
   * and this process's recovery sweep records the execution as interrupted.
   */
  async function recordExecuted(execution: Execution, decided: GatewayDecision, hashes: ResultHashes): Promise<void> {
    try {
      await record(execution, decided, hashes);
    } catch (error) {
      if (!isDatabaseUnavailable(error)) throw error;
      journal.defer(execution.interactionId, recordOf(execution, decided, hashes), execution.settings.recordParams);
      throw unavailableFor(error, execution.interactionId, true);
    }
  }

  /**
   * The one commit of an allowed execute, under this process's journal owner id; once more under a
   * new one when the lease of the first was lost.
   */
  async function commitExecution(execution: Execution, entry: JournalEntry, approvalToUse: string | null) {
    const owner = await journal.ownerId();
    const first = await attemptCommit(execution, entry, approvalToUse, owner);
    if (first !== LEASE_LOST) return first;
    // This process was taken for a stopped one (its lease ran out while the database was away):
    // nothing was counted; once more under a new owner id.
    await journal.leaseLost(owner);
    const second = await attemptCommit(execution, entry, approvalToUse, await journal.ownerId());
    if (second === LEASE_LOST) throw serviceUnavailable('The execution journal could not be claimed; retry shortly');
    return second;
  }

  /**
   * Without a token or an approval to use, the commit is the single statement that counts and
   * journals; otherwise a transaction that uses them first and keeps nothing when anything is refused.
   */
  function attemptCommit(
    execution: Execution,
    entry: JournalEntry,
    approvalToUse: string | null,
    owner: number,
  ): Promise<Commit | LeaseLost> {
    const { token } = execution.context;
    const tokenId = token?.ok ? token.tokenId : null;
    if (!tokenId && !approvalToUse) {
      const queued = { execution, entry, owner };
      return commitBatched(commitBatchKey(queued), queued);
    }
    return db.sql.transactionIf(async (tx) => {
      const value = await commitWithin(tx, execution, entry, approvalToUse, owner);
      return { commit: value !== LEASE_LOST && value.ok, value };
    });
  }

  /**
   * The commit's statements on a transaction: the token's use, the approval's, then the count and
   * the journal entry. A refusal is an answer; the caller rolls back what the statements before it did.
   */
  async function commitWithin(
    tx: SqlConnection,
    execution: Execution,
    entry: JournalEntry,
    approvalToUse: string | null,
    owner: number,
  ): Promise<Commit | LeaseLost> {
    const { token, call } = execution.context;
    const tokenId = token?.ok ? token.tokenId : null;
    if (tokenId && !(await tokens.use(tx, tokenId))) {
      const reason = {
        code: 'CAPABILITY_TOKEN_INVALID',
        message: 'The capability token was used up or revoked meanwhile',
      } as const;
      return refusal(reason);
    }
    if (approvalToUse && !(await approvals.consume(tx, approvalToUse, actionHashOf(call))))
      return refusal({ code: 'APPROVAL_REQUIRED', message: 'The approval has already been used' });
    return countAndJournalOn(tx, execution, entry, owner);
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

  return { decide, usageOf, postConfirmation, confirmationStatus };
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
