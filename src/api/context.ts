import type { AuthState, Principal, UserPrincipal } from '../authz/authz.js';
import type { RequestState } from './request-state.js';
import type { Loaders, Services } from './services.js';

/** The GraphQL context of one request, for /graphql and for the REST facade alike. */
export interface Context {
  /**
   * The request's headers. Only they: a read answered before yoga (src/http/direct-lane.ts) has
   * no Fetch Request, and nothing below the edge needs more of it.
   */
  request: { headers: Pick<Headers, 'get'> };
  state: RequestState;
  services: Services;
  /** Per-request batching for relations that dashboards query in lists. */
  loaders: Loaders;
  /**
   * Resolves the caller's credentials once per request. On REST it also counts the request against
   * the operator rate limit; on /graphql the guard (guard.ts) read them first and counts by cost.
   */
  authenticate(): Promise<AuthState>;
  /**
   * Runs a wait for something outside the process (a tool's answer) with the request's turn given
   * back meanwhile, so that other orgs' work runs (the edge's admission, src/http/authenticate.ts).
   */
  awayWhile<T>(wait: () => Promise<T>): Promise<T>;
  /** Set by the scope loaders once `authenticate` resolved: read by the synchronous error builder. */
  authState?: AuthState;
  /** The authenticated caller, once a scope loader has resolved it. */
  principal?: Principal;
}

/**
 * The caller of a field whose auth scopes already required one; the scope loaders set it.
 * Throws rather than returning undefined so that a field missing its scopes fails closed.
 */
export function principalOf(ctx: Context): Principal {
  if (!ctx.principal) throw new Error('principalOf() on a field without auth scopes');
  return ctx.principal;
}

/** The signed-in user of a field whose auth scopes required a session (`session: true`). */
export function userOf(ctx: Context): UserPrincipal {
  const principal = principalOf(ctx);
  if (principal.type !== 'user') throw new Error('userOf() on a field without the session scope');
  return principal;
}
