import type { Action, Principal } from '../authz/authz.js';
import type { Services } from './services.js';
import type { RequestState } from './request-state.js';

/** Where the versioned REST facade lives. */
export const REST_BASE_PATH = '/api/v1';
/**
 * Where the OpenAPI document's SOFA (openapi.ts) puts the routes mounted at the root
 * (`mount: 'root'`): SOFA has one base path, so `/auth/login` is `/api/v1/~root/auth/login` there
 * and the document maps it back.
 */
export const ROOT_MOUNT_PREFIX = '/~root';
/**
 * Where the serving SOFA (rest-facade.ts) answers each field: a literal path per field under
 * REST_BASE_PATH, the path parameters moved to the query string. The guard has already matched
 * the public path; a literal path is one map lookup in SOFA's router, where a path with
 * parameters was matched again against the URLPattern of every such route (about a tenth of an
 * operator read's CPU). Requests that name these paths themselves match no route and are 404.
 */
export const FIELD_MOUNT_PREFIX = '/~field';

/**
 * The tables whose writes bump their org's data version (the triggers of migration
 * 20261211000000_org_data_versions; a test holds the two together). A cached route reads only these.
 */
export const VERSIONED_TABLES = ['organizations', 'users'] as const;
export type VersionedTable = (typeof VERSIONED_TABLES)[number];

export interface RestRoute {
  method: 'GET' | 'POST' | 'PATCH' | 'PUT' | 'DELETE';
  /**
   * Under /api/v1 (or the root with `mount: 'root'`), with `:name` for path parameters named like
   * the field's arguments.
   */
  path: string;
  /**
   * `root`: served at `path` itself, without /api/v1 (the secondary listing's unprefixed
   * operations). Everything else about the route is the same: the guard, SOFA, the OpenAPI entry.
   */
  mount?: 'root';
  status?: 200 | 201 | 204;
  tag: string;
  summary: string;
  /** Longer text for the OpenAPI operation (Markdown), when the summary is not enough. */
  description?: string;
  /** Security schemes accepted: bearer token, API key, or none (open route). */
  auth: ReadonlyArray<'bearer' | 'apiKey'>;
  /**
   * Counted against the agent's manifest budget and its policies' rate limits, in the gateway's
   * decision (the gateway's routes), so not against the org's operator rate limit as well.
   */
  budgeted?: true;
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
  /**
   * Error statuses the route can answer beyond those every route of its kind can (a body: 400,
   * 413; credentials: 401, 403, 429; a path id: 404): 401 of a wrong password, 403 of a login the
   * org refuses, 404 of an id in the body, 409 of a conflict or a state transition, 503 of a secret
   * that does not open. The
   * document lists only these, and every test's responses are held to it (test/support/app.ts).
   */
  extraErrors?: ReadonlyArray<'401' | '403' | '404' | '409' | '429' | '503'>;
  /** What an error status of this route can mean beyond what it means everywhere (a code of its own). */
  errorNotes?: Partial<Record<'403' | '409' | '422', string>>;
  /**
   * Answered by this handler instead of SOFA and GraphQL execution, which cost about half of a
   * gateway call: the hot path. Everything else stays the route's: the guard's credentials and
   * strict body check against the field's arguments, the OpenAPI operation SOFA derives from the
   * field, the envelopes. The field itself keeps serving /graphql.
   */
  direct?: DirectRoute;
  /**
   * A GET whose 200 answer to an operator is kept and served again while their org's data version
   * stays the same (src/http/answer-cache.ts): for a route whose answer is made of the rows of
   * these tables of the caller's org and nothing else (no clock, no other org). A test runs each
   * such route and fails if it reads any other table.
   */
  answerCache?: { tables: readonly VersionedTable[] };
}

export interface DirectCall {
  principal: Principal;
  /** The field's arguments, coerced from the JSON body as GraphQL would. */
  args: Record<string, unknown>;
  services: Services;
  state: RequestState;
  /** As the GraphQL context's `awayWhile` (src/api/context.ts). */
  awayWhile<T>(wait: () => Promise<T>): Promise<T>;
}

export interface DirectRoute {
  /** Checked with the permission table in the caller's own org (the field's `own` scope). */
  action: Action;
  /** The JSON body of the 200 response, exactly as SOFA would shape the field's value. */
  handle(call: DirectCall): Promise<unknown>;
}

/** The route's path as clients use it, from the root: `/api/v1/orgs/:org_id` or `/auth/login`. */
export const publicPath = (route: Pick<RestRoute, 'path' | 'mount'>) =>
  route.mount === 'root' ? route.path : `${REST_BASE_PATH}${route.path}`;

/** The route's path as SOFA serves it, under REST_BASE_PATH. */
export const sofaPath = (route: Pick<RestRoute, 'path' | 'mount'>) =>
  route.mount === 'root' ? `${ROOT_MOUNT_PREFIX}${route.path}` : route.path;

/** Where the serving SOFA answers `field` (`Query.org`), under REST_BASE_PATH. */
export const sofaFieldPath = (field: string) => `${FIELD_MOUNT_PREFIX}/${field}`;
