import { builder } from '../../api/builder.js';
import type { RequestState } from '../../api/request-state.js';
import { principalOf } from '../../api/context.js';
import { closedValues } from '../../api/closed-values.js';
import { AppError } from '../../errors.js';
import { TOOL_ERROR_CODES } from '../tool/connectors.js';
import { REASON_CODES, type GatewayDecision, type GatewayMode, type Reason } from './decision.js';
import { MatchedPolicyRef } from '../record/record.graphql.js';
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
export function answer(outcome: DecisionOutcome, state: RequestState): GatewayDecision {
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
 * Execute and evaluate are one decision; the mode says whether it counts, asks, executes and
 * records. Each mode's field answers through `answer` (as its REST route does, declared in
 * src/http/gateway-edge.ts), authorized by the same action as that route.
 */
function decisionField(mode: GatewayMode, description: string) {
  builder.mutationField(`gateway_${mode}`, (t) =>
    t.field({
      type: GatewayDecisionRef,
      description,
      args: decisionArgs,
      authScopes: { own: `gateway:${mode}` },
      async resolve(_, args, ctx) {
        const options = { mode, channel: 'graphql' as const, awayWhile: ctx.state.turn?.away };
        return answer(await ctx.services.gateway.decide(principalOf(ctx), args, options), ctx.state);
      },
    }),
  );
}

decisionField('execute', 'Decide, count the budget, execute through the org tool connector and record.');
decisionField(
  'evaluate',
  'The same decision as execute as a dry run: nothing is counted, asked, executed or recorded.',
);
