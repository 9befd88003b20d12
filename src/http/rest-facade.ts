import { useSofa } from '@graphql-yoga/plugin-sofa';
import {
  getNamedType,
  GraphQLBoolean,
  GraphQLInt,
  isEnumType,
  isListType,
  isNonNullType,
  type ExecutionArgs,
  type ExecutionResult,
  type GraphQLArgument,
  type GraphQLSchema,
} from 'graphql';
import type { Plugin } from 'graphql-yoga';
import type { Logger } from 'pino';
import { AppError, authenticationRequired, operationForbidden, orgNotFound, type FieldError } from '../errors.js';
import { findUnstorable, isStorableText, UNSTORABLE_TEXT_MESSAGE } from '../lib/storable-input.js';
import { parseTimestamp, timestampProblem } from '../lib/timestamp.js';
import { awayWhile, type AuthenticateOptions } from './authenticate.js';
import { authorize, may, type AuthState, type Principal } from '../authz/authz.js';
import type { Services } from '../services.js';
import {
  errorAnswer,
  errorResponse,
  jsonAnswer,
  responseOf,
  restErrorAnswer,
  restErrorHandler,
  toWireError,
  wireError,
  type PlainAnswer,
  type WireError,
} from './envelope.js';
import { logUnexpected } from '../logger.js';
import { REST_BASE_PATH } from './openapi.js';
import type { ServerContext } from './lifecycle.js';
import type { RequestState } from '../api/request-state.js';
import { publicPath, sofaFieldPath, type DirectRoute, type RestRoute } from '../api/rest-routes.js';
import { AnswerCache } from './answer-cache.js';
import { Response } from '../api/fetch-api.js';
import { coerceInput } from '../api/input-coercion.js';
import { inputProblem, REQUIRED } from './input-problems.js';
import { restSchema, sofaRouteConfig } from './rest-schema.js';
import { parseStreamQuery, type StreamRoute } from '../api/stream-routes.js';
import { restRoutes, streamRoutes } from './schema.js';
import { sofaQueries, sofaVariables, type SofaQuery } from './sofa-queries.js';

/** What the read lane uses of yoga's envelop: the context and the execute, each plugin's hooks with them. */
interface Enveloped {
  contextFactory(initial: object): unknown;
  execute(args: ExecutionArgs): unknown;
}

/**
 * The REST facade: SOFA mounts the declared routes under /api/v1. SOFA would also answer for every
 * other Query/Mutation field and for its /webhook routes, so requests are matched against the
 * declared routes first and anything else answers 404 (or 405 for a known path). Streamed routes
 * (stream-routes.ts) are matched here too and answered by their handlers instead of SOFA.
 */

interface CompiledRoute {
  method: string;
  needsAuth: boolean;
  /** Counted against the operator rate limit when authenticated (all but the budgeted gateway routes). */
  operatorRateLimit: boolean;
  pattern: RegExp;
  label: string;
  /** Names of the path parameters, in the order of the pattern's groups. */
  pathParams: string[];
  /** Arguments of the GraphQL field that may come from the JSON body. */
  bodyArgs: Map<string, GraphQLArgument>;
  bodyArg: string | undefined;
  /** Arguments a body-carrying route also reads from the query string. */
  queryArgs: readonly string[];
  /** The GraphQL field SOFA serves it with (`Query.org`); none for a streamed route. */
  field?: string;
  /** Its status when it succeeds (SOFA's `responseStatus`). */
  status: number;
  stream?: StreamRoute;
  direct?: DirectRoute;
  /** Its answers to operators kept by data version (answer-cache.ts): the tables it reads. */
  answerCache?: RestRoute['answerCache'];
}

/** `path` is the public path, from the root. */
function pathPattern(path: string): { pattern: RegExp; pathParams: string[] } {
  const pathParams = [...path.matchAll(/:([A-Za-z0-9_]+)/g)].map((m) => m[1]);
  const source = path
    .split('/')
    .map((segment) => (segment.startsWith(':') ? '([^/]+)' : segment.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')))
    .join('/');
  return { pattern: new RegExp(`^${source}$`), pathParams };
}

function compile(schema: GraphQLSchema): CompiledRoute[] {
  const sofaRoutes = [...restRoutes].map(([fieldPath, route]): CompiledRoute => {
    const [typeName, fieldName] = fieldPath.split('.');
    const type = typeName === 'Query' ? schema.getQueryType() : schema.getMutationType();
    const field = type?.getFields()[fieldName];
    if (!field) throw new Error(`REST route ${route.method} ${route.path} names unknown field ${fieldPath}`);
    if (route.answerCache && (route.method !== 'GET' || route.direct))
      throw new Error(`REST route ${route.method} ${route.path}: only a GET that SOFA serves keeps answers`);
    const { pattern, pathParams } = pathPattern(publicPath(route));
    return {
      method: route.method,
      needsAuth: route.auth.length > 0,
      operatorRateLimit: !route.budgeted,
      pattern,
      label: `${route.method} ${publicPath(route)}`,
      field: fieldPath,
      pathParams,
      bodyArgs: new Map(field.args.filter((a) => !pathParams.includes(a.name)).map((a) => [a.name, a])),
      bodyArg: route.bodyArg,
      queryArgs: route.queryArgs ?? [],
      direct: route.direct,
      answerCache: route.answerCache,
      status: route.status ?? 200,
    };
  });
  const streamed = streamRoutes.map((route): CompiledRoute => {
    if (!route.auth.length) throw new Error(`streamed route ${route.method} ${route.path} must require credentials`);
    return {
      method: route.method,
      needsAuth: true,
      operatorRateLimit: true,
      ...pathPattern(`${REST_BASE_PATH}${route.path}`),
      label: `${route.method} ${REST_BASE_PATH}${route.path}`,
      bodyArgs: new Map(),
      bodyArg: undefined,
      queryArgs: [],
      stream: route,
      status: 200,
    };
  });
  return [...sofaRoutes, ...streamed];
}

/**
 * Where SOFA serves the route of this request URL: its field's literal path, with the path
 * parameters in the query string (decoded from the path as a router would, and first, as SOFA
 * reads path parameters before the query string), then `kept` of the request's own query string:
 * every other parameter, or only the named ones. SOFA takes a parameter from the query string
 * before the body, so the path's values win there as they did on the path.
 */
function sofaUrl(url: URL, route: CompiledRoute, kept: 'all' | readonly string[]): URL {
  const target = new URL(`${REST_BASE_PATH}${sofaFieldPath(route.field!)}`, url);
  const groups = route.pattern.exec(url.pathname)?.slice(1) ?? [];
  route.pathParams.forEach((name, i) => target.searchParams.append(name, safeDecode(groups[i])));
  for (const [name, value] of url.searchParams) {
    if (route.pathParams.includes(name)) continue;
    if (kept === 'all' || kept.includes(name)) target.searchParams.append(name, value);
  }
  return target;
}

/** How many segments a path has: a route's pattern matches paths of its own count only. */
const segmentsOf = (path: string) => path.split('/').length;

/**
 * The routes by their paths' number of segments: a request's path is tried against the few of its
 * count, not every route's pattern (a regular expression each, on every request).
 */
type RouteTable = Map<number, CompiledRoute[]>;

function routeTable(routes: readonly CompiledRoute[]): RouteTable {
  const table: RouteTable = new Map();
  for (const route of routes) {
    const count = segmentsOf(route.label.slice(route.label.indexOf(' ') + 1));
    table.set(count, [...(table.get(count) ?? []), route]);
  }
  return table;
}

/** Of the routes matching a path and method, the most literal wins: /records/export over /records/:record_id. */
const bySpecificity = (a: CompiledRoute, b: CompiledRoute) => a.pathParams.length - b.pathParams.length;

/**
 * SOFA converts body values with the scalars' lenient `serialize` (42 becomes "42", a lone string
 * becomes a list). JSON bodies are checked first with GraphQL's strict input coercion instead, so a
 * wrong type is a 422 naming the field; required arguments missing from the body (and from the
 * query string, for the few it may carry) are reported in the same answer, every field at once,
 * in the facade's words (input-problems.ts).
 */
function checkBody(
  text: string,
  route: CompiledRoute,
  schema: GraphQLSchema,
  fromQuery: ReadonlySet<string>,
): { errors: FieldError[]; args: Record<string, unknown> } | 'not_json' {
  const args: Record<string, unknown> = {};
  let body: unknown = {};
  if (text.trim()) {
    try {
      body = JSON.parse(text);
    } catch {
      return 'not_json';
    }
  } else if (route.bodyArg) {
    return { errors: [{ field: 'body', message: 'must be a JSON object' }], args };
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    return { errors: [{ field: 'body', message: 'must be a JSON object' }], args };
  }
  const unstorable = findUnstorable(body, '');
  if (unstorable) return { errors: [unstorable], args };
  if (route.bodyArg) return { errors: [], args: { [route.bodyArg]: body } };
  const errors: FieldError[] = [];
  const given = body as Record<string, unknown>;
  for (const [name, value] of Object.entries(given)) {
    const arg = route.bodyArgs.get(name);
    if (!arg || value === undefined) continue;
    args[name] = coerceInput(value, arg.type, (path, _invalid, error) => {
      const suffix = path.map((p) => (typeof p === 'number' ? `[${p}]` : `.${p}`)).join('');
      errors.push(inputProblem(`${name}${suffix}`, error.message, schema));
    });
  }
  errors.push(...missingArguments(route, (name) => given[name] !== undefined || fromQuery.has(name)));
  return { errors, args };
}

/** Required arguments (non-null, no default) the request does not give. */
function missingArguments(route: CompiledRoute, isGiven: (name: string) => boolean): FieldError[] {
  return [...route.bodyArgs.values()]
    .filter((arg) => isNonNullType(arg.type) && arg.defaultValue === undefined && !isGiven(arg.name))
    .map((arg) => ({ field: arg.name, message: REQUIRED }));
}

/**
 * Query-string arguments of GET routes: SOFA would pass "abc" to the Int scalar and report the
 * failure without the argument's name. Checked here so the 422 names the parameter.
 */
function checkQuery(url: URL, route: CompiledRoute, only?: readonly string[]): FieldError[] {
  const errors: FieldError[] = [];
  // A GET route's arguments all come from the query string; a body route's are checked with its body.
  if (!only) errors.push(...missingArguments(route, (name) => url.searchParams.has(name)));
  for (const name of new Set(url.searchParams.keys())) {
    if (only && !only.includes(name)) continue;
    const arg = route.bodyArgs.get(name);
    if (!arg) continue;
    const values = url.searchParams.getAll(name);
    const type = isNonNullType(arg.type) ? arg.type.ofType : arg.type;
    if (!isListType(type) && values.length > 1) {
      errors.push({ field: name, message: 'must be given once' });
      continue;
    }
    const named = getNamedType(arg.type);
    for (const value of values) {
      if (named === GraphQLInt && !(/^-?\d{1,10}$/.test(value) && Math.abs(Number(value)) <= 2 ** 31 - 1)) {
        errors.push({ field: name, message: 'must be an integer' });
      } else if (named.name === 'Timestamp' && !parseTimestamp(value)) {
        errors.push({ field: name, message: timestampProblem });
      } else if (named === GraphQLBoolean && value !== 'true' && value !== 'false') {
        errors.push({ field: name, message: 'must be true or false' });
      } else if (isEnumType(named) && !named.getValue(value)) {
        errors.push({
          field: name,
          message: `must be one of ${named
            .getValues()
            .map((v) => v.name)
            .join(', ')}`,
        });
      }
    }
  }
  return errors;
}

/** A malformed escape stays as sent: it then names no resource (404), rather than failing the request. */
function safeDecode(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    return segment;
  }
}

/** The path parameters and query-string names and values that the database could not store (the edge rule). */
function checkUrlText(url: URL, route: CompiledRoute): FieldError[] {
  const errors: FieldError[] = [];
  const groups = route.pattern.exec(url.pathname)?.slice(1) ?? [];
  route.pathParams.forEach((name, i) => {
    if (!isStorableText(safeDecode(groups[i]))) errors.push({ field: name, message: UNSTORABLE_TEXT_MESSAGE });
  });
  for (const [name, value] of url.searchParams) {
    if (!isStorableText(name))
      errors.push({ field: 'query', message: `has a parameter name that ${UNSTORABLE_TEXT_MESSAGE}` });
    else if (!isStorableText(value)) errors.push({ field: name, message: UNSTORABLE_TEXT_MESSAGE });
  }
  return errors;
}

/**
 * A streamed route, once credentials are known: the query string (422), then authorization with
 * the permission table (404 for another org, 403), then the handler's own validation and stream.
 */
async function serveStream(
  route: CompiledRoute & { stream: StreamRoute },
  principal: Principal,
  url: URL,
  serverContext: ServerContext,
  services: Services,
  logger: Logger,
): Promise<Response> {
  const parsed = parseStreamQuery(url, route.stream);
  if ('errors' in parsed) {
    return errorResponse(wireError('VALIDATION_ERROR', 'The query string is invalid', { errors: parsed.errors }));
  }
  const groups = route.pattern.exec(url.pathname)!.slice(1);
  const path = Object.fromEntries(route.pathParams.map((name, i) => [name, safeDecode(groups[i])]));
  // In the org named by the path (another org: 404), else in the caller's own org.
  const orgId = path.org_id ?? principal.orgId;
  const decision =
    path.org_id !== undefined
      ? authorize(principal, orgId, route.stream.action)
      : may(principal, route.stream.action)
        ? 'allow'
        : 'forbidden';
  try {
    if (decision === 'not_found') throw orgNotFound();
    if (decision === 'forbidden') throw operationForbidden();
    return await route.stream.handle({
      principal,
      orgId,
      path,
      query: parsed.query,
      services,
      state: serverContext.state,
      logger,
      abort: () => serverContext.req?.socket?.destroy?.(),
    });
  } catch (error) {
    if (!(error instanceof AppError))
      logUnexpected(logger, error, { request_id: serverContext.state.requestId }, 'streamed route failed');
    return errorResponse(toWireError(error));
  }
}

/**
 * A direct route, once credentials and the body (types and required arguments) are checked:
 * authorization with the permission table (403), then the handler. Whatever it throws is shaped
 * by the envelopes, unknown errors as a masked 500.
 */
async function serveDirect(
  route: CompiledRoute & { direct: DirectRoute },
  principal: Principal,
  args: Record<string, unknown>,
  state: RequestState,
  services: Services,
  logger: Logger,
): Promise<PlainAnswer> {
  try {
    if (!may(principal, route.direct.action)) throw operationForbidden();
    const body = await route.direct.handle({
      principal,
      args,
      services,
      state,
      awayWhile: (wait) => awayWhile(state, wait),
    });
    return jsonAnswer(body);
  } catch (error) {
    if (!(error instanceof AppError)) logUnexpected(logger, error, { request_id: state.requestId }, 'unexpected error');
    return errorAnswer(toWireError(error));
  }
}

/** The request as yoga hands it to the guard. */
type Served = Parameters<NonNullable<Plugin<{}, ServerContext>['onRequest']>>[0];

/**
 * The declared route of the request, or the 404 (no route on the path) or 405 (none for the
 * method) that answers it; undefined when the path is not the facade's: outside /api/v1 only the
 * paths of root-mounted routes are.
 */
function match(routes: RouteTable, method: string, url: URL): CompiledRoute | Response | undefined {
  const onPath = (routes.get(segmentsOf(url.pathname)) ?? []).filter((r) => r.pattern.test(url.pathname));
  const underBase = url.pathname === REST_BASE_PATH || url.pathname.startsWith(`${REST_BASE_PATH}/`);
  if (!underBase && !onPath.length) return undefined;
  const route = onPath.filter((r) => r.method === method).sort(bySpecificity)[0];
  if (route) return route;
  if (!onPath.length) return errorResponse(wireError('NOT_FOUND', 'No such endpoint'));
  const response = errorResponse(wireError('METHOD_NOT_ALLOWED', `${method} is not allowed here`));
  response.headers.set('Allow', [...new Set(onPath.map((r) => r.method))].join(', '));
  return response;
}

const invalidInput = (message: string, errors: FieldError[]): WireError =>
  wireError('VALIDATION_ERROR', message, { errors });
const invalid = (message: string, errors: FieldError[]) => errorResponse(invalidInput(message, errors));

/** What a checked request carries: a body-carrying route's JSON text and its coerced arguments. */
type Input = { body: false } | { body: true; text: string; args: Record<string, unknown> };

/**
 * The request's input checked against its route (the edge rule for URL text, then the query
 * string, or the body), or the 400/422 that answers it. A streamed route's handler checks its
 * query string itself.
 */
async function validate(
  route: CompiledRoute,
  request: Request,
  url: URL,
  schema: GraphQLSchema,
): Promise<Input | Response> {
  if (request.method === 'GET' && !route.stream) {
    const refused = readInputProblem(url, route);
    return refused ? errorResponse(refused) : { body: false };
  }
  const unstorable = checkUrlText(url, route);
  if (unstorable.length) return invalid('The request is invalid', unstorable);
  if (route.stream) return { body: false };
  return validateBody(route, request, url, schema);
}

/** What refuses a read's input: the URL's text, then its query string (the guard's and the lane's check). */
function readInputProblem(url: URL, route: CompiledRoute): WireError | undefined {
  const unstorable = checkUrlText(url, route);
  if (unstorable.length) return invalidInput('The request is invalid', unstorable);
  const problems = checkQuery(url, route);
  return problems.length ? invalidInput('The query string is invalid', problems) : undefined;
}

/** A body-carrying route: the few arguments it takes from the query string, then the JSON body. */
async function validateBody(
  route: CompiledRoute,
  request: Request,
  url: URL,
  schema: GraphQLSchema,
): Promise<Input | Response> {
  const checked = await checkedBody(route, () => request.text(), url, schema);
  return 'status' in checked ? responseOf(checked) : checked;
}

/** The body-carrying route's input, or the 400/422 that answers it, as data. */
async function checkedBody(
  route: CompiledRoute,
  text: () => Promise<string>,
  url: URL,
  schema: GraphQLSchema,
): Promise<Input | PlainAnswer> {
  const queryProblems = route.queryArgs.length ? checkQuery(url, route, route.queryArgs) : [];
  if (queryProblems.length) return errorAnswer(invalidInput('The query string is invalid', queryProblems));
  const body = await text();
  const fromQuery = new Set(route.queryArgs.filter((name) => url.searchParams.has(name)));
  const checked = checkBody(body, route, schema, fromQuery);
  if (checked === 'not_json') return errorAnswer(wireError('BAD_REQUEST', 'The request body is not valid JSON'));
  if (checked.errors.length) return errorAnswer(invalidInput('The request body is invalid', checked.errors));
  return { body: true, text: body, args: checked.args };
}

/**
 * The request SOFA serves for a body-carrying route. Its arguments come from the path and the
 * JSON body only: SOFA would otherwise also read them from the query string, where secrets end up
 * in access logs.
 */
function sofaRequest(route: CompiledRoute, text: string, { request, url, fetchAPI }: Served): Request {
  const clean = sofaUrl(url, route, route.queryArgs);
  const body = route.bodyArg ? `{${JSON.stringify(route.bodyArg)}:${text}}` : text;
  // The server's own Request class: Node's global (undici) Request costs ~7% of a gateway call.
  return new fetchAPI.Request(clean, { method: request.method, headers: request.headers, body: body || null });
}

/** What becomes of a checked request: answered here, or served by SOFA, as it came or rewritten. */
type Dispatch = { answer: Response } | { sofa: Request };

/** What authentication reads of a request: its headers. */
type Credentials = { headers: Pick<Headers, 'get'> };

/** A route its handler answers without SOFA and GraphQL execution (the gateway's). */
export type DirectRouteOf = CompiledRoute & { direct: DirectRoute };

/** A GET route SOFA serves (an operator's read), for the lane (direct-lane.ts). */
export type ReadRoute = CompiledRoute & { field: string };

/** The operators' reads, for Node's server to answer before yoga (direct-lane.ts, decision 0078). */
export interface ReadRoutes {
  /** The route SOFA serves for a GET of this path, once yoga has started; none for anything else. */
  find(method: string, url: URL): ReadRoute | undefined;
  /** Answers as the facade and SOFA do: every step, error and word the same. */
  answer(route: ReadRoute, request: Credentials, url: URL, state: RequestState): Promise<PlainAnswer>;
}

/** The direct routes, for Node's server to answer before yoga (direct-lane.ts). */
export interface DirectRoutes {
  /** The direct route of this method and exact path, if one has no path parameters. */
  find(method: string, pathname: string): DirectRouteOf | undefined;
  /** Answers as the facade does: every step, error and word the same. */
  answer(
    route: DirectRouteOf,
    request: Credentials,
    url: URL,
    state: RequestState,
    text: () => Promise<string>,
  ): Promise<PlainAnswer>;
}

export function useRestFacade(
  schema: GraphQLSchema,
  authenticate: (request: Credentials, state: RequestState, options: AuthenticateOptions) => Promise<AuthState>,
  logger: Logger,
  services: Services,
): { plugins: Plugin<{}, ServerContext>[]; direct: DirectRoutes; reads: ReadRoutes } {
  /**
   * The caller of a route that needs credentials (null for an open route), or the error that
   * refuses them. Credentials are checked before the input, so an anonymous caller learns nothing
   * from validation messages. Who may do what is decided later, by the field's auth scopes.
   */
  async function callerOf(
    route: CompiledRoute,
    request: Credentials,
    state: RequestState,
  ): Promise<{ principal: Principal | null } | { refused: WireError }> {
    if (!route.needsAuth) return { principal: null };
    try {
      const auth = await authenticate(request, state, { operatorRateLimit: route.operatorRateLimit });
      return auth.principal
        ? { principal: auth.principal }
        : { refused: toWireError(auth.error ?? authenticationRequired()) };
    } catch (error) {
      // Over the rate limit (an AppError), the database unreachable (503), or a bug (masked as INTERNAL_ERROR).
      if (!(error instanceof AppError))
        logUnexpected(logger, error, { request_id: state.requestId }, 'authentication failed');
      return { refused: toWireError(error) };
    }
  }

  /**
   * A direct route: credentials, the URL's text, the body, then the handler, each step able to
   * answer instead; the same steps and words as the other routes. Served from yoga's guard and
   * from Node's server before yoga (direct-lane.ts).
   */
  async function answerDirect(
    route: DirectRouteOf,
    request: Credentials,
    url: URL,
    state: RequestState,
    text: () => Promise<string>,
  ): Promise<PlainAnswer> {
    const caller = await callerOf(route, request, state);
    if ('refused' in caller) return errorAnswer(caller.refused);
    const unstorable = checkUrlText(url, route);
    if (unstorable.length) return errorAnswer(invalidInput('The request is invalid', unstorable));
    const input = await checkedBody(route, text, url, schema);
    if ('status' in input) return input;
    return serveDirect(route, caller.principal!, input.body ? input.args : {}, state, services, logger);
  }

  /**
   * A streamed route is answered by its handler; every other route is SOFA's, at its field's path,
   * a body-carrying one without its query string.
   */
  async function dispatch(
    route: CompiledRoute,
    input: Input,
    principal: Principal | null,
    served: Served,
  ): Promise<Dispatch> {
    const { request, url, serverContext, fetchAPI } = served;
    if (route.stream) {
      const stream = { ...route, stream: route.stream };
      return { answer: await serveStream(stream, principal!, url, serverContext, services, logger) };
    }
    if (!input.body) {
      return {
        sofa: new fetchAPI.Request(sofaUrl(url, route, 'all'), { method: request.method, headers: request.headers }),
      };
    }
    return { sofa: sofaRequest(route, input.text, served) };
  }

  let compiled: CompiledRoute[] | undefined;
  const routes = () => (compiled ??= compile(schema));
  let table: RouteTable | undefined;
  /** What SOFA serves with, once yoga has started: the schema it is given, and yoga's envelop. */
  let sofaServing: { schema: GraphQLSchema; queries: (field: string) => SofaQuery } | undefined;
  let getEnveloped: ((initial: object) => Enveloped) | undefined;
  /** The operators' answers kept by data version (answer-cache.ts), this process's. */
  const answers = new AnswerCache();

  /**
   * A read, the guard's steps then SOFA's (sofa-queries.ts): credentials, the URL's text, the query
   * string, then the field's operation with its variables, executed through yoga's envelop (its
   * context, compiled resolvers and masked errors), answered with the field's value; or, for a
   * route that keeps answers, the caller's answer kept at the data version their check just read.
   */
  async function answerRead(
    route: ReadRoute,
    request: Credentials,
    url: URL,
    state: RequestState,
  ): Promise<PlainAnswer> {
    const caller = await callerOf(route, request, state);
    if ('refused' in caller) return errorAnswer(caller.refused);
    const refused = readInputProblem(url, route);
    if (refused) return errorAnswer(refused);
    // `find` gave the route: yoga has started, so both are set.
    const { schema: servedSchema, queries } = sofaServing!;
    const fieldName = route.field.split('.')[1];
    const query = queries(fieldName);
    try {
      const variableValues = sofaVariables(query, sofaUrl(url, route, 'all').search, servedSchema);
      const kept = keptAnswerOf(route, caller.principal, variableValues);
      const answer = kept?.answer ?? (await executeRead(route, fieldName, query, variableValues, request, state));
      if (kept && !kept.hit) answers.set(kept.key, kept.version, answer);
      return answer;
    } catch (error) {
      return restErrorAnswer([error]);
    }
  }

  /** The read's field executed through yoga's envelop (its context, compiled resolvers, masked errors). */
  async function executeRead(
    route: ReadRoute,
    fieldName: string,
    query: SofaQuery,
    variableValues: Record<string, unknown>,
    request: Credentials,
    state: RequestState,
  ): Promise<PlainAnswer> {
    const serverContext = { state, request };
    const enveloped = getEnveloped!(serverContext);
    const contextValue = await enveloped.contextFactory(serverContext);
    const result = (await enveloped.execute({
      schema: sofaServing!.schema,
      document: query.document,
      contextValue,
      variableValues,
      operationName: query.operationName,
    })) as ExecutionResult;
    if (result.errors) return restErrorAnswer(result.errors);
    return jsonAnswer(result.data?.[fieldName], route.status);
  }

  /**
   * Where a cacheable read's answer is kept for this caller, and the answer if one is kept for the
   * data version their bearer check just read. Only operators' reads of their own org: the
   * version is the caller's org's.
   */
  function keptAnswerOf(
    route: ReadRoute,
    principal: Principal | null,
    variableValues: Record<string, unknown>,
  ): { key: string; version: string; hit: boolean; answer?: PlainAnswer } | undefined {
    if (!route.answerCache || principal?.type !== 'user' || principal.orgDataVersion === undefined) return undefined;
    if (variableValues.org_id !== principal.orgId) return undefined;
    const key = AnswerCache.keyOf(principal, route.label, variableValues);
    const answer = answers.get(key, principal.orgDataVersion);
    return { key, version: principal.orgDataVersion, hit: answer !== undefined, answer };
  }

  const guard: Plugin<{}, ServerContext> = {
    onYogaInit({ yoga }) {
      getEnveloped = (initial) => yoga.getEnveloped(initial) as unknown as Enveloped;
    },
    /** match → authenticate → validate → dispatch; a step that answers ends the request. */
    async onRequest(served) {
      const { request, url, serverContext, endResponse, setRequest } = served;
      const route = match((table ??= routeTable(routes())), request.method, url);
      if (route === undefined) return;
      if (route instanceof Response) return endResponse(route);
      const state = serverContext.state;
      state.route = route.label;
      if (route.direct) {
        const direct = { ...route, direct: route.direct };
        return endResponse(responseOf(await answerDirect(direct, request, url, state, () => request.text())));
      }
      const caller = await callerOf(route, request, state);
      if ('refused' in caller) return endResponse(errorResponse(caller.refused));
      const input = await validate(route, request, url, schema);
      if (input instanceof Response) return endResponse(input);
      const next = await dispatch(route, input, caller.principal, served);
      if ('answer' in next) endResponse(next.answer);
      else setRequest(next.sofa);
    },
  };
  const sofa = useSofa({
    basePath: REST_BASE_PATH,
    routes: sofaRouteConfig('field_path'),
    errorHandler: restErrorHandler as unknown as NonNullable<Parameters<typeof useSofa>[0]['errorHandler']>,
    openAPI: { endpoint: false },
    swaggerUI: { endpoint: false },
  }) as Plugin<{}, ServerContext>;
  // SOFA sees the schema without the GraphQL-only fields (rest-schema.ts).
  const restFacade: Plugin<{}, ServerContext> = {
    ...sofa,
    onSchemaChange: (payload) => {
      const rest = restSchema(payload.schema);
      sofaServing = { schema: rest, queries: sofaQueries(rest) };
      sofa.onSchemaChange?.({ ...payload, schema: rest });
    },
    // SOFA picks its requests by the URL it is given; yoga passes the URL of the request as it
    // arrived, not of the one the guard set at the field's path.
    onRequest: (payload) => sofa.onRequest?.({ ...payload, url: new URL(payload.request.url) }),
  };
  let byPath: Map<string, DirectRouteOf> | undefined;
  const find = (method: string, pathname: string) => {
    byPath ??= new Map(
      routes()
        .filter((route): route is DirectRouteOf => Boolean(route.direct) && !route.pathParams.length)
        .map((route) => [route.label, route]),
    );
    return byPath.get(`${method} ${pathname}`);
  };
  const findRead = (method: string, url: URL): ReadRoute | undefined => {
    if (method !== 'GET' || !sofaServing || !getEnveloped) return undefined;
    const route = match((table ??= routeTable(routes())), method, url);
    if (!route || route instanceof Response || route.stream || route.direct || !route.field) return undefined;
    return route as ReadRoute;
  };
  return {
    plugins: [guard, restFacade],
    direct: { find, answer: answerDirect },
    reads: { find: findRead, answer: answerRead },
  };
}
