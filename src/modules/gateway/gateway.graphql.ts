import { builder } from '../../api/builder.js';
import type { RequestState } from '../../api/request-state.js';
import { principalOf } from '../../api/context.js';
import { closedValues } from '../../api/closed-values.js';
import { mutation } from '../../api/operations.js';
import { AppError } from '../../errors.js';
import { TOOL_ERROR_CODES } from '../tool/connectors.js';
import { REASON_CODES, type GatewayDecision, type GatewayMode, type GatewayRequest, type Reason } from './decision.js';
import { MatchedPolicyRef, RedactionRef } from '../record/record.graphql.js';
import type { DecisionOutcome } from './gateway.service.js';

const GatewayActionInput = builder.inputType('GatewayActionInput', {
  fields: (t) => ({
    type: t.string({ required: true, description: 'The <domain> of the capability, e.g. `billing`.' }),
    tool: t.string({ required: true, description: 'The <action> of the capability, e.g. `refund`.' }),
    params: t.field({ type: 'JSON', description: 'Free-form parameters passed to the tool.' }),
  }),
});

const GatewayReason = builder.objectRef<Reason>('GatewayReason').implement({
  fields: (t) => ({
    code: t.exposeString('code', closedValues(REASON_CODES)),
    message: t.exposeString('message'),
    details: t.field({ type: 'JSON', nullable: true, resolve: (r) => r.details ?? null }),
  }),
});

type Result = NonNullable<GatewayDecision['result']>;
const ToolError = builder.objectRef<{ code: string; message: string }>('ToolError').implement({
  fields: (t) => ({ code: t.exposeString('code', closedValues(TOOL_ERROR_CODES)), message: t.exposeString('message') }),
});
const GatewayResult = builder.objectRef<Result>('GatewayResult').implement({
  fields: (t) => ({
    success: t.exposeBoolean('success'),
    data: t.field({ type: 'JSON', resolve: (r) => r.data }),
    error: t.field({ type: ToolError, nullable: true, resolve: (r) => (r.success ? null : r.error) }),
  }),
});

const GatewayDecisionRef = builder.objectRef<GatewayDecision>('GatewayDecision').implement({
  fields: (t) => ({
    interaction_id: t.exposeString('interaction_id', { description: 'Evaluate returns one too, but records nothing.' }),
    decision: t.exposeString('decision', { description: '`allow` or `deny`.', ...closedValues(['allow', 'deny']) }),
    executed: t.exposeBoolean('executed'),
    result: t.field({ type: GatewayResult, nullable: true, resolve: (d) => d.result }),
    reasons: t.field({ type: [GatewayReason], resolve: (d) => d.reasons }),
    approval_id: t.exposeString('approval_id', {
      nullable: true,
      description: 'Set when a human approval was requested or used.',
    }),
    policies: t.field({
      type: [MatchedPolicyRef],
      description:
        'The org policies that matched, in priority order (lower first); execute records them in the signed record.',
      resolve: (d) => d.policies,
    }),
    redactions: t.field({
      type: [RedactionRef],
      description:
        'What enforced `redact` policies replaced in `result` with `[REDACTED:<kind>]`, by kind; empty when nothing was.',
      resolve: (d) => d.redactions,
    }),
    labels: t.exposeStringList('labels', {
      description:
        'The labels of the enforced `label` policies that matched, sorted and distinct; execute signs them into the record and the agent’s history.',
    }),
  }),
});

const decisionArgs = builder.args((t) => ({
  svc_id: t.string({ required: true }),
  agent_id: t.string({ required: true }),
  action: t.field({ type: GatewayActionInput, required: true }),
  capability_token: t.string({ description: 'Optional Ed25519 capability token (JWT).' }),
  approval_id: t.string({ description: 'An approved human approval for this exact action.' }),
}));

/**
 * The agent's hourly budget in the X-RateLimit headers, or the limit that refused (the hourly
 * budget or a policy's rate limit) as 429 POLICY_VIOLATION with its X-RateLimit headers and
 * Retry-After (the denial is already recorded).
 */
function answer(outcome: DecisionOutcome, state: RequestState): GatewayDecision {
  const { budget, rateLimited } = outcome;
  // The quota as data: the edge writes it as the X-RateLimit headers (src/http/lifecycle.ts).
  if (rateLimited) state.rateLimit = { limit: rateLimited.limit, remaining: 0, resetAt: rateLimited.resetAt };
  else if (budget) {
    const { limit, current, window } = budget.hour;
    state.rateLimit = { limit, remaining: Math.max(0, limit - current), resetAt: window.resetAt };
  }
  if (rateLimited) {
    throw new AppError('POLICY_VIOLATION', rateLimited.reason.message, {
      details: rateLimited.reason.details,
      headers: { 'Retry-After': String(rateLimited.retryAfterSeconds) },
    });
  }
  return outcome.decision;
}

/**
 * A decision as the REST route answers it: the GatewayDecision type's fields, nulls included, in
 * the (sorted) key order SOFA gives a field's value, so the direct route answers byte for byte
 * what a SOFA route would.
 */
function decisionBody(decision: GatewayDecision) {
  const { result } = decision;
  return {
    approval_id: decision.approval_id,
    decision: decision.decision,
    executed: decision.executed,
    interaction_id: decision.interaction_id,
    labels: decision.labels,
    policies: decision.policies.map((p) => ({
      condition_error: p.condition_error,
      effect: p.effect,
      mode: p.mode,
      name: p.name,
      policy_id: p.policy_id,
      rate_limit_exceeded: p.rate_limit_exceeded,
      version: p.version,
    })),
    reasons: decision.reasons.map((r) => ({ code: r.code, details: r.details ?? null, message: r.message })),
    redactions: decision.redactions.map((r) => ({ count: r.count, kind: r.kind })),
    result: result && { data: result.data, error: result.success ? null : result.error, success: result.success },
  };
}

/**
 * Execute and evaluate are one decision; the mode says whether it counts, asks, executes and
 * records. Each mode is one operation: its field, and its REST route over the same arguments (the
 * body) and type (the OpenAPI answer), authorized by the same action. The route is answered
 * directly, without SOFA and GraphQL execution (the hot path); both answer through `answer`. The
 * routes are counted against the agent's manifest budget and its policies' rate limits (in the
 * decision), never against the operator rate limit.
 */
function decisionOperation(
  mode: GatewayMode,
  description: string,
  rest: { summary: string; auth: ReadonlyArray<'apiKey' | 'bearer'> },
) {
  return mutation(`gateway_${mode}`, {
    field: (t) =>
      t.field({
        type: GatewayDecisionRef,
        description,
        args: decisionArgs,
        authScopes: { own: `gateway:${mode}` },
        async resolve(_, args, ctx) {
          const options = { mode, channel: 'graphql' as const, awayWhile: ctx.awayWhile };
          return answer(await ctx.services.gateway.decide(principalOf(ctx), args, options), ctx.state);
        },
      }),
    rest: {
      method: 'POST',
      path: `/gateway/${mode}`,
      tag: 'Gateway',
      ...rest,
      budgeted: true,
      direct: {
        action: `gateway:${mode}`,
        async handle({ principal, args, services, state, awayWhile }) {
          const outcome = await services.gateway.decide(principal, args as unknown as GatewayRequest, {
            mode,
            channel: 'rest',
            awayWhile,
          });
          return decisionBody(answer(outcome, state));
        },
      },
    },
  });
}

/** The gateway's operations, in the order the OpenAPI document lists their routes. */
export const gatewayOperations = [
  decisionOperation('execute', 'Decide, count the budget, execute through the org tool connector and record.', {
    summary: 'Execute an agent action if policy allows it',
    auth: ['apiKey'],
  }),
  decisionOperation(
    'evaluate',
    'The same decision as execute as a dry run: nothing is counted, asked, executed or recorded.',
    {
      summary: 'Dry-run the decision for an agent action',
      auth: ['apiKey', 'bearer'],
    },
  ),
];
