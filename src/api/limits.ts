import type { FieldComplexityValue } from '@pothos/plugin-complexity';
import {
  getNamedType,
  getNullableType,
  isLeafType,
  isListType,
  isObjectType,
  type GraphQLField,
  type GraphQLNamedType,
} from 'graphql';

/**
 * What one /graphql request may ask for. Everything here is checked before a resolver runs
 * (src/http/guard.ts): tokens while parsing, depth and aliases while validating, the cost once
 * the variables are known. Anonymous callers can reach only sign-up and whether it is open, login
 * (both forms), refresh_session and introspection, so their budget is a few root fields; the standard
 * introspection query (GraphiQL's) is 184 tokens, has no aliases, costs 1, and is not counted in depth.
 */
export interface OperationLimits {
  tokens: number;
  depth: number;
  aliases: number;
  cost: number;
}

export type CallerClass = 'anonymous' | 'authenticated';

/**
 * The cost of one REST call: a root field, with up to 99 objects below it. A GraphQL operation
 * counts `floor(cost / REQUEST_COST)` requests (at least one) against the operator rate limit.
 */
export const REQUEST_COST = 100;
/** The page size assumed for a paginated field asked without `limit` (the largest default page). */
export const DEFAULT_PAGE_SIZE = 100;
/** The size assumed for a list that takes no `limit` (history entries, users, API keys, …). */
export const UNBOUNDED_LIST_SIZE = 10;

export const operationLimits: Record<CallerClass, OperationLimits> = {
  anonymous: { tokens: 1_000, depth: 10, aliases: 5, cost: 2 * REQUEST_COST },
  // A document nested past the ~1,500 levels at which graphql-js's recursive parser overflows the
  // stack has more than 2,000 tokens: it is refused for its tokens, however the parser stopped.
  authenticated: { tokens: 2_000, depth: 10, aliases: 20, cost: 100 * REQUEST_COST },
};

/** How many requests an operation of this cost counts against the operator rate limit. */
export const rateLimitRequests = (cost: number): number => Math.max(1, Math.floor(cost / REQUEST_COST));

/** `{items, total}` objects (list.ts, approvals, manifest history): their field says how many items. */
function isPage(type: GraphQLNamedType): boolean {
  const items = isObjectType(type) ? type.getFields().items : undefined;
  return items !== undefined && isListType(getNullableType(items.type));
}

/**
 * The cost model, for @pothos/plugin-complexity: an estimate of the objects a response may hold.
 * Scalars come with their object and are free; an object costs 1 (a root field REQUEST_COST, the
 * work of a REST call); a list multiplies its selection by its size: `limit` for paginated fields
 * (DEFAULT_PAGE_SIZE when omitted), UNBOUNDED_LIST_SIZE for lists without one.
 */
export function fieldCost<Context>(
  args: Record<string, unknown>,
  _ctx: Context,
  field: GraphQLField<unknown, Context>,
): FieldComplexityValue {
  const named = getNamedType(field.type);
  if (isLeafType(named)) return 0;
  const kind = (field.extensions.pothosConfig as { kind?: string } | undefined)?.kind;
  const own = kind === 'Query' || kind === 'Mutation' ? REQUEST_COST : 1;
  if (isListType(getNullableType(field.type))) {
    // A page's items: the page's own field multiplies them by the page size.
    if (field.name === 'items') return { field: own, multiplier: 1 };
    return { field: own * UNBOUNDED_LIST_SIZE, multiplier: UNBOUNDED_LIST_SIZE };
  }
  if (isPage(named)) {
    const paginated = field.args.some((arg) => arg.name === 'limit');
    const size = !paginated ? UNBOUNDED_LIST_SIZE : typeof args.limit === 'number' ? args.limit : DEFAULT_PAGE_SIZE;
    return { field: own, multiplier: size };
  }
  return own;
}
