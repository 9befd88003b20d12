import { restRoute } from '../api/rest-routes.js';
import type { GatewayDecision, GatewayMode, GatewayRequest } from '../modules/gateway/decision.js';
import { answer } from '../modules/gateway/gateway.graphql.js';

/**
 * The gateway's HTTP edge: its two REST routes (answered directly, without SOFA: the hot path)
 * and the body they answer. What a decision sets on the HTTP answer (its headers, the 429) is
 * `answer` in src/modules/gateway/gateway.graphql.ts, which the GraphQL fields give alike. The
 * routes are counted against the agent's manifest budget and its policies' rate limits (in the
 * decision), never against the operator rate limit. Here rather than in the module: a module's
 * files other than its GraphQL schema know nothing of HTTP, and these routes are HTTP through and
 * through (the direct handler, the wire body).
 */

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
