import type { useSofa } from 'sofa-api';
import type { Action, Principal } from '../modules/auth/authz.js';
import type { Services } from '../services.js';
import type { RequestState } from './request-state.js';

type RouteConfig = NonNullable<Parameters<typeof useSofa>[0]['routes']>[string];

/**
 * The REST facade's routes. Each module declares the routes of its fields beside them; only
 * declared fields are reachable over REST (src/http/rest-facade.ts refuses every other path).
 */
export interface RestRoute {
  method: 'GET' | 'POST' | 'PATCH' | 'PUT' | 'DELETE';
  /** Under /api/v1, with `:name` for path parameters named like the field's arguments. */
  path: string;
  status?: 200 | 201 | 204;
  tag: string;
  summary: string;
  /** Longer text for the OpenAPI operation (Markdown), when the summary is not enough. */
  description?: string;
  /** Security schemes accepted: bearer token, API key, or none (open route). */
  auth: ReadonlyArray<'bearer' | 'apiKey'>;
  /**
   * The whole JSON body is this one argument (a manifest payload is the body itself, and its
   * unknown fields must reach the validator rather than be dropped by SOFA).
   */
  bodyArg?: string;
  /**
   * Arguments a body-carrying route (POST, PUT, PATCH, DELETE) also takes from the query string,
   * e.g. `DELETE /agents/{id}?reason=`. Every other query parameter of such a route is ignored
   * (secrets in URLs end up in access logs), so this names only what is never secret.
   */
  queryArgs?: readonly string[];
  /** Error statuses beyond those implied by method, path and auth (e.g. 401 of a wrong password). */
  extraErrors?: ReadonlyArray<'401' | '429'>;
  /**
   * Answered by this handler instead of SOFA and GraphQL execution, which cost about half of a
   * gateway call: the hot path. Everything else stays the route's: the guard's credentials and
   * strict body check against the field's arguments, the OpenAPI operation SOFA derives from the
   * field, the envelopes. The field itself keeps serving /graphql.
   */
  direct?: DirectRoute;
}

export interface DirectCall {
  principal: Principal;
  /** The field's arguments, coerced from the JSON body as GraphQL would. */
  args: Record<string, unknown>;
  services: Services;
  state: RequestState;
}

export interface DirectRoute {
  /** Checked with the permission table in the caller's own org (the field's `own` scope). */
  action: Action;
  /** The JSON body of the 200 response, exactly as SOFA would shape the field's value. */
  handle(call: DirectCall): Promise<unknown>;
}

export const restRoutes = new Map<string, RestRoute>();

/** `field` is `Query.name` or `Mutation.name`. */
export function restRoute(field: string, route: RestRoute): void {
  if (restRoutes.has(field)) throw new Error(`REST route for ${field} declared twice`);
  restRoutes.set(field, route);
}

export function sofaRouteConfig(): Record<string, RouteConfig> {
  return Object.fromEntries(
    [...restRoutes].map(([field, r]) => [
      field,
      { method: r.method, path: r.path, responseStatus: r.status ?? 200, tags: [r.tag], description: r.summary },
    ]),
  );
}
