import { AppError } from '../errors.js';
import type { GatewayDecision, GatewayMode, GatewayRequest } from '../modules/gateway/decision.js';
import type { DecisionOutcome } from '../modules/gateway/gateway.service.js';
import type { RequestState } from '../api/request-state.js';
import { restRoute } from '../api/rest-routes.js';

/**
 * The gateway's HTTP edge: its two REST routes (answered directly, without SOFA: the hot path),
 * the body they answer, and what a decision sets on the HTTP answer, which the GraphQL fields
 * (src/modules/gateway/gateway.graphql.ts) give alike. The routes are counted against the agent's
 * manifest budget and its policies' rate limits (in the decision), never against the operator
 * rate limit. Here rather than in the module: a module's files other than its GraphQL schema know
 * nothing of HTTP, and this file is HTTP through and through (headers, the 429, the wire body).
 */

/**
 * The agent's hourly budget in the X-RateLimit headers, or the limit that refused (the hourly
 * budget or a policy's rate limit) as 429 POLICY_VIOLATION with its X-RateLimit headers and
 * Retry-After (the denial is already recorded).
 */
export function answer(outcome: DecisionOutcome, state: RequestState): GatewayDecision {
  const { budget, rateLimited } = outcome;
  const headers = (limit: number, remaining: number, resetAt: number) => {
    state.responseHeaders.set('X-RateLimit-Limit', String(limit));
    state.responseHeaders.set('X-RateLimit-Remaining', String(Math.max(0, remaining)));
    state.responseHeaders.set('X-RateLimit-Reset', String(resetAt));
  };
  if (rateLimited) headers(rateLimited.limit, 0, rateLimited.resetAt);
  else if (budget) headers(budget.hour.limit, budget.hour.limit - budget.hour.current, budget.hour.window.resetAt);
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
    result: result && { data: result.data, error: result.success ? null : result.error, success: result.success },
  };
}

/**
 * The REST route of a mode, over the GraphQL field `gateway_<mode>` (its arguments are the body,
 * its type the OpenAPI answer), authorized by the same action as the field.
 */
function decisionRoute(mode: GatewayMode, summary: string, auth: ReadonlyArray<'apiKey' | 'bearer'>) {
  restRoute(`Mutation.gateway_${mode}`, {
    method: 'POST',
    path: `/gateway/${mode}`,
    tag: 'Gateway',
    summary,
    auth,
    budgeted: true,
    direct: {
      action: `gateway:${mode}`,
      async handle({ principal, args, services, state }) {
        const outcome = await services.gateway.decide(principal, args as unknown as GatewayRequest, {
          mode,
          channel: 'rest',
          awayWhile: state.turn?.away,
        });
        return decisionBody(answer(outcome, state));
      },
    },
  });
}

decisionRoute('execute', 'Execute an agent action if policy allows it', ['apiKey']);
decisionRoute('evaluate', 'Dry-run the decision for an agent action', ['apiKey', 'bearer']);
