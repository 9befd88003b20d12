import type { ForbiddenResult, AuthFailure } from '@pothos/plugin-scope-auth';
import { AppError, authenticationRequired, operationForbidden, orgNotFound } from '../errors.js';
import { authorize, may, type Action } from '../authz/authz.js';
import type { Context } from './context.js';

/**
 * Scope loaders for Pothos scope-auth. Failures end in three answers, in this order: no valid
 * credential → 401; a resource of another org → 404 (thrown, so it is never reported as 403);
 * the caller's role or scope does not allow the action → 403.
 */
export function authScopeLoaders(ctx: Context) {
  const principal = async () => {
    const state = await ctx.authenticate();
    ctx.authState = state;
    if (!state.principal) return null;
    ctx.principal = state.principal;
    return state.principal;
  };
  return {
    authenticated: async () => (await principal()) !== null,
    session: async () => (await principal())?.type === 'user',
    own: async (action: Action) => {
      const caller = await principal();
      return caller !== null && may(caller, action);
    },
    org: async ({ orgId, action }: { orgId: string; action: Action }) => {
      const caller = await principal();
      if (!caller) return false;
      const decision = authorize(caller, orgId, action);
      if (decision === 'not_found') throw orgNotFound();
      return decision === 'allow';
    },
  };
}

function thrownError(failure: AuthFailure): Error | undefined {
  if ('error' in failure && failure.error) return failure.error;
  if ('failures' in failure) {
    for (const inner of failure.failures) {
      const found = thrownError(inner);
      if (found) return found;
    }
  }
  return undefined;
}

export function unauthorizedError(_parent: unknown, ctx: Context, _info: unknown, result: ForbiddenResult): Error {
  const thrown = thrownError(result.failure);
  if (thrown instanceof AppError) return thrown;
  if (thrown) return thrown;
  const state = ctx.authState;
  if (!state?.principal) {
    return state && 'error' in state && state.error ? state.error : authenticationRequired();
  }
  return operationForbidden();
}
