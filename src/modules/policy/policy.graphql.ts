import { builder } from '../../api/builder.js';
import { closedValues, graphqlOnly } from '../../api/closed-values.js';
import { principalOf } from '../../api/context.js';
import { listType } from '../../api/list.js';
import { mutation, query } from '../../api/operations.js';
import type { PolicySnapshot } from '../audit/audit-events.js';
import { DETECTORS } from './content-detectors.js';
import { MAX_CONDITION_LENGTH } from './policy-condition.js';
import { policyEffects, policyModes, rateLimitScopes } from './policy-rules.js';
import {
  DEFAULT_PAGE_SIZE,
  DEFAULT_PRIORITY,
  MAX_DESCRIPTION_LENGTH,
  MAX_HISTORY_WINDOW_SECONDS,
  MAX_LABELS,
  MAX_MESSAGE_LENGTH,
  MAX_NAME_LENGTH,
  MAX_PAGE_SIZE,
  MAX_POLICIES_PER_ORG,
  MAX_PRIORITY,
  MAX_RATE_LIMIT,
  MAX_TARGET_ENTRIES,
  MAX_WINDOW_SECONDS,
  publicTarget,
  rateLimitOf,
  type PolicyRateLimit,
} from './policy.service.js';

const PolicyModeEnum = builder.enumType('PolicyMode', {
  values: policyModes,
  description: '`enforce` changes decisions; `shadow` is evaluated and reported in decisions but never changes one.',
});
const PolicyEffectEnum = builder.enumType('PolicyEffect', {
  values: policyEffects,
  description:
    '`deny` adds POLICY_DENIED; `require_approval` makes the action need a human (APPROVAL_REQUIRED); ' +
    '`rate_limit` counts allowed actions and answers 429 POLICY_VIOLATION over `rate_limit.limit`; ' +
    '`label` adds its `labels` to the decision, its record and the agent’s `history`; ' +
    'after the tool ran, `redact` replaces the matches of its `detectors` in the result with `[REDACTED:<kind>]`, ' +
    'and `deny_result` withholds the result (RESULT_DENIED; the record keeps that the tool ran). ' +
    'Conditions of `redact` and `deny_result` policies may read `result`, the tool’s result data.',
});
const RateLimitScopeEnum = builder.enumType('PolicyRateLimitScope', {
  values: rateLimitScopes,
  description: 'What one counter covers: each agent, each API key, or the whole org.',
});

const conditionDoc =
  `A CEL (Common Expression Language) boolean expression, at most ${MAX_CONDITION_LENGTH} characters, over: ` +
  '`agent` {id, name, version, team}, `action` {type, tool, capability, params}, `params` (= action.params), ' +
  '`key` {id, prefix, scopes}, `request` {time (timestamp), hour, weekday (UTC integers; weekday 0 = Sunday), ' +
  'channel ("rest", "graphql" or "mcp"), mode ("execute" or "evaluate")}. ' +
  'Checked on save (syntax, boolean type, size, cost): regular expressions (`matches`) are refused, and so is ' +
  'anything whose cost grows faster than linearly with the params, such as a comprehension nested in one over ' +
  'the params, or `in`, a string function or `==` on a list inside it over data that does not come from its ' +
  'iteration variable (`params.l.all(x, x in params.l)`). A condition that fails at run time (a missing field, ' +
  'a type error, more operations than the evaluation budget) matches: policies fail closed. Absent: always ' +
  'true. Example: `params.amount > 1000 && request.hour < 6`. ' +
  '`secrets(x)`, `pii(x)` and `hidden_text(x)` give the kinds of content found in any string inside `x` ' +
  '(`secrets(params).size() > 0`). A policy with `history_window_seconds` also sees `history`: the agent’s ' +
  'earlier decisions in that window, oldest first, at most 1000, each {capability, type, tool, decision, ' +
  'executed, labels, at} (`history.exists(h, "private" in h.labels)`).';

const PolicyTargetRef = builder.objectRef<PolicySnapshot['target']>('PolicyTarget').implement({
  description: 'What a policy applies to; an absent (null) list matches everything.',
  fields: (t) => ({
    svc_ids: t.exposeStringList('svc_ids', { nullable: true, description: 'Agent ids.' }),
    capabilities: t.exposeStringList('capabilities', {
      nullable: true,
      description: '`<domain>:<action>` patterns; either part may be `*`.',
    }),
  }),
});

const PolicyRateLimitRef = builder.objectRef<PolicyRateLimit>('PolicyRateLimit').implement({
  fields: (t) => ({
    limit: t.exposeInt('limit', { description: 'Allowed actions per window and counter.' }),
    window_seconds: t.exposeInt('window_seconds', { description: 'Fixed windows aligned to the Unix epoch.' }),
    per: t.field({ type: RateLimitScopeEnum, resolve: (rule) => rule.per }),
  }),
});

export const PolicyRef = builder.prismaObject('Policy', {
  description:
    'A rule of the organization over gateway actions: it denies, requires a human approval for, or rate-limits the actions it targets (docs/guides/policies.md).',
  fields: (t) => ({
    policy_id: t.exposeID('id'),
    name: t.exposeString('name'),
    description: t.exposeString('description'),
    enabled: t.exposeBoolean('enabled', { description: 'Disabled policies are kept but never evaluated.' }),
    mode: t.field({ type: PolicyModeEnum, resolve: (policy) => policy.mode as (typeof policyModes)[number] }),
    priority: t.exposeInt('priority', { description: 'Lower applies first; equal priorities by name, then id.' }),
    effect: t.field({ type: PolicyEffectEnum, resolve: (policy) => policy.effect as (typeof policyEffects)[number] }),
    target: t.field({ type: PolicyTargetRef, resolve: publicTarget }),
    condition: t.exposeString('condition', { nullable: true, description: conditionDoc }),
    rate_limit: t.field({
      type: PolicyRateLimitRef,
      nullable: true,
      description: 'Set exactly when `effect` is `rate_limit`.',
      resolve: rateLimitOf,
    }),
    message: t.exposeString('message', { nullable: true, description: 'Added to the reason a deny gives the agent.' }),
    labels: t.stringList({
      nullable: true,
      description: 'Set exactly when `effect` is `label`: the labels it adds.',
      resolve: (policy) => (policy.effect === 'label' ? policy.labels : null),
    }),
    detectors: t.stringList({
      nullable: true,
      ...closedValues(DETECTORS),
      description: 'Set exactly when `effect` is `redact`: the detectors whose matches in the result are replaced.',
      resolve: (policy) => (policy.effect === 'redact' ? policy.detectors : null),
    }),
    history_window_seconds: t.exposeInt('historyWindowSeconds', {
      nullable: true,
      description: 'How far back `history` reaches in the condition; null: the condition has no `history`.',
    }),
    version: t.exposeInt('version', { description: '1 when created; every replace adds 1.' }),
    created_at: t.expose('createdAt', { type: 'Timestamp' }),
    updated_at: t.expose('updatedAt', { type: 'Timestamp' }),
    created_by: t.exposeString('createdBy', {
      description: 'Email of the user (or prefix of the API key) that created it.',
    }),
    updated_by: t.exposeString('updatedBy'),
  }),
});

const PolicyTargetInput = builder.inputType('PolicyTargetInput', {
  description: 'Omit a list to match every agent or every capability.',
  fields: (t) => ({
    svc_ids: t.stringList({ description: `1 to ${MAX_TARGET_ENTRIES} distinct agent ids.` }),
    capabilities: t.stringList({
      description: `1 to ${MAX_TARGET_ENTRIES} distinct \`<domain>:<action>\` patterns; either part may be \`*\` (\`billing:*\`, \`*:delete\`).`,
    }),
  }),
});

const PolicyRateLimitInput = builder.inputType('PolicyRateLimitInput', {
  fields: (t) => ({
    limit: t.int({ required: true, description: `1 to ${MAX_RATE_LIMIT}.` }),
    window_seconds: t.int({ required: true, description: `1 to ${MAX_WINDOW_SECONDS}.` }),
    per: t.field({ type: RateLimitScopeEnum, required: true }),
  }),
});

/** Every field of a policy: create and replace (PUT) take the same, absent optional ones default. */
const policyArgs = builder.args((t) => ({
  name: t.string({
    required: true,
    description: `1 to ${MAX_NAME_LENGTH} characters (trimmed), unique in the organization.`,
  }),
  description: t.string({ description: `At most ${MAX_DESCRIPTION_LENGTH} characters; default "".` }),
  enabled: t.boolean({ description: 'Default true.' }),
  mode: t.field({ type: PolicyModeEnum, description: 'Default `enforce`.' }),
  priority: t.int({ description: `0 to ${MAX_PRIORITY}, lower first; default ${DEFAULT_PRIORITY}.` }),
  effect: t.field({ type: PolicyEffectEnum, required: true }),
  target: t.field({ type: PolicyTargetInput, description: 'Default: every agent and capability.' }),
  condition: t.string({ description: conditionDoc }),
  rate_limit: t.field({ type: PolicyRateLimitInput, description: 'Required exactly when `effect` is `rate_limit`.' }),
  message: t.string({ description: `At most ${MAX_MESSAGE_LENGTH} characters.` }),
  labels: t.stringList({
    description: `Required exactly when \`effect\` is \`label\`: 1 to ${MAX_LABELS} distinct labels of 1 to 40 lowercase letters, digits, "_" or "-".`,
  }),
  detectors: t.stringList({
    ...closedValues(DETECTORS),
    description: `Required exactly when \`effect\` is \`redact\`: a non-empty subset of ${DETECTORS.join(', ')}.`,
  }),
  history_window_seconds: t.int({
    description: `1 to ${MAX_HISTORY_WINDOW_SECONDS}: the condition sees \`history\`, the agent's decisions of that many seconds before. Each decision of an agent such a policy targets is then serialized with the write of its history entry.`,
  }),
}));

const filterArgs = builder.args((t) => ({
  enabled: t.boolean(),
  mode: t.field({ type: PolicyModeEnum }),
  effect: t.field({ type: PolicyEffectEnum }),
  svc_id: t.string({
    description: 'Policies that apply to this agent: those naming it in `target.svc_ids`, and those without `svc_ids`.',
  }),
  limit: t.int({ description: `Default ${DEFAULT_PAGE_SIZE}, at most ${MAX_PAGE_SIZE}.` }),
  offset: t.int({ description: 'Default 0.' }),
}));

const PolicyList = listType('PolicyList', PolicyRef);
const policiesPath = '/policies';
const tag = 'Policies';
const listDescription =
  "Policies of the caller's organization in the order the gateway applies them: priority, then name, then id.";

const policiesQuery = query('policies', {
  field: (t) =>
    t.field({
      type: PolicyList,
      description: listDescription,
      args: filterArgs,
      authScopes: { own: 'policy:read' },
      resolve: (_, args, ctx) => ctx.services.policies.list(principalOf(ctx).orgId, args),
    }),
  rest: { method: 'GET', path: policiesPath, tag, summary: 'List policies', auth: ['bearer'] },
});

builder.prismaObjectField('Organization', 'policies', (t) =>
  t.field({
    type: PolicyList,
    description: listDescription.replace("the caller's organization", 'the organization'),
    extensions: graphqlOnly,
    args: filterArgs,
    authScopes: (org) => ({ org: { orgId: org.id, action: 'policy:read' } }),
    resolve: (org, args, ctx) => ctx.services.policies.list(org.id, args),
  }),
);

const policyQuery = query('policy', {
  field: (t) =>
    t.field({
      type: PolicyRef,
      args: { policy_id: t.arg.id({ required: true }) },
      authScopes: { own: 'policy:read' },
      resolve: (_, args, ctx) => ctx.services.policies.get(principalOf(ctx).orgId, String(args.policy_id)),
    }),
  rest: {
    method: 'GET',
    path: `${policiesPath}/:policy_id`,
    tag,
    summary: 'Read a policy',
    auth: ['bearer'],
  },
});

const createPolicyMutation = mutation('create_policy', {
  field: (t) =>
    t.field({
      type: PolicyRef,
      description: `Adds a policy (version 1); at most ${MAX_POLICIES_PER_ORG} per organization. Applies on every process within a second.`,
      args: policyArgs,
      authScopes: { own: 'policy:write' },
      resolve: (_, args, ctx) => {
        const principal = principalOf(ctx);
        return ctx.services.policies.create(principal.orgId, args, principal);
      },
    }),
  rest: {
    method: 'POST',
    path: policiesPath,
    status: 201,
    tag,
    summary: 'Create a policy',
    auth: ['bearer'],
    extraErrors: ['409'],
  },
});

const replacePolicyMutation = mutation('replace_policy', {
  field: (t) =>
    t.field({
      type: PolicyRef,
      description: 'Replaces every field (an omitted optional field takes its default again) and adds 1 to `version`.',
      args: { policy_id: t.arg.id({ required: true }), ...policyArgs },
      authScopes: { own: 'policy:write' },
      resolve: (_, args, ctx) => {
        const principal = principalOf(ctx);
        return ctx.services.policies.replace(principal.orgId, String(args.policy_id), args, principal);
      },
    }),
  rest: {
    extraErrors: ['409'],
    method: 'PUT',
    path: `${policiesPath}/:policy_id`,
    tag,
    summary: 'Replace a policy (every field)',
    auth: ['bearer'],
  },
});

const deletePolicyMutation = mutation('delete_policy', {
  field: (t) =>
    t.boolean({
      args: { policy_id: t.arg.id({ required: true }) },
      authScopes: { own: 'policy:write' },
      resolve: async (_, args, ctx) => {
        const principal = principalOf(ctx);
        await ctx.services.policies.remove(principal.orgId, String(args.policy_id), principal);
        return true;
      },
    }),
  rest: {
    method: 'DELETE',
    path: `${policiesPath}/:policy_id`,
    status: 204,
    tag,
    summary: 'Delete a policy',
    auth: ['bearer'],
  },
});

/** The operations of this file, in the order the OpenAPI document lists their routes. */
export const policyOperations = [
  policiesQuery,
  policyQuery,
  createPolicyMutation,
  replacePolicyMutation,
  deletePolicyMutation,
];
