import SchemaBuilder from '@pothos/core';
import ComplexityPlugin from '@pothos/plugin-complexity';
import PrismaPlugin from '@pothos/plugin-prisma';
import ScopeAuthPlugin from '@pothos/plugin-scope-auth';
import type PrismaTypes from '../generated/pothos-types.js';
import { getDatamodel } from '../generated/pothos-types.js';
import type { Action } from '../authz/authz.js';
import type { Context } from './context.js';
import { authScopeLoaders, unauthorizedError } from './auth-scopes.js';
import { fieldCost } from './limits.js';

export interface AuthScopes {
  /** Any valid credential. */
  authenticated: boolean;
  /** A bearer-token session (refresh, logout). */
  session: boolean;
  /** The caller belongs to `orgId` and may perform `action` there (the permission table, src/authz/authz.ts). */
  org: { orgId: string; action: Action };
  /** The caller may perform `action` in its own org (routes whose org is implied by the caller). */
  own: Action;
}

export const builder = new SchemaBuilder<{
  Context: Context;
  AuthScopes: AuthScopes;
  PrismaTypes: PrismaTypes;
  DefaultFieldNullability: false;
  Scalars: {
    Timestamp: { Input: Date; Output: Date | string };
    JSON: { Input: unknown; Output: unknown };
    ManifestPayload: { Input: unknown; Output: unknown };
    ToolConfig: { Input: unknown; Output: unknown };
    ToolConfigInput: { Input: unknown; Output: unknown };
  };
}>({
  plugins: [ScopeAuthPlugin, PrismaPlugin, ComplexityPlugin],
  defaultFieldNullability: false,
  complexity: {
    // Every field carries its cost; the /graphql guard (guard.ts) measures an operation before
    // it executes. `disabled` leaves resolvers unwrapped: REST's fixed operations are not measured.
    fieldComplexity: fieldCost,
    disabled: true,
  },
  scopeAuth: {
    authScopes: authScopeLoaders,
    unauthorizedError,
  },
  prisma: {
    client: (ctx) => ctx.services.graphqlPrisma,
    dmmf: getDatamodel(),
    exposeDescriptions: false,
    filterConnectionTotalCount: true,
    onUnusedQuery: null,
  },
});

builder.queryType({});
builder.mutationType({});
