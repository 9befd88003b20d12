import { useSofa } from '@graphql-yoga/plugin-sofa';
import {
  coerceInputValue,
  getNamedType,
  GraphQLBoolean,
  GraphQLInt,
  isEnumType,
  isListType,
  isNonNullType,
  type GraphQLArgument,
  type GraphQLSchema,
} from 'graphql';
import type { Plugin } from 'graphql-yoga';
import type { Logger } from 'pino';
import { AppError, authenticationRequired, type FieldError } from '../errors.js';
import type { AuthState } from '../modules/auth/authenticate.js';
import { errorResponse, restErrorHandler, toWireError, wireError } from './envelope.js';
import { REST_BASE_PATH, sofaCustomScalars } from './openapi.js';
import type { ServerContext } from './lifecycle.js';
import type { RequestState } from './request-state.js';
import { restRoutes, sofaRouteConfig } from './rest-routes.js';
import { restSchema } from './rest-schema.js';

/**
 * The REST facade: SOFA mounts the declared routes under /api/v1. SOFA would also answer for every
 * other Query/Mutation field and for its /webhook routes, so requests are matched against the
 * declared routes first and anything else answers 404 (or 405 for a known path).
 */

interface CompiledRoute {
  method: string;
  needsAuth: boolean;
  pattern: RegExp;
  label: string;
  /** Arguments of the GraphQL field that may come from the JSON body. */
  bodyArgs: Map<string, GraphQLArgument>;
  bodyArg: string | undefined;
}

function compile(schema: GraphQLSchema): CompiledRoute[] {
  return [...restRoutes].map(([fieldPath, route]) => {
    const [typeName, fieldName] = fieldPath.split('.');
    const type = typeName === 'Query' ? schema.getQueryType() : schema.getMutationType();
    const field = type?.getFields()[fieldName];
    if (!field) throw new Error(`REST route ${route.method} ${route.path} names unknown field ${fieldPath}`);
    const pathParams = new Set([...route.path.matchAll(/:([A-Za-z0-9_]+)/g)].map((m) => m[1]));
    const source = route.path
      .split('/')
      .map((segment) => (segment.startsWith(':') ? '[^/]+' : segment.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')))
      .join('/');
    return {
      method: route.method,
      needsAuth: route.auth.length > 0,
      pattern: new RegExp(`^${REST_BASE_PATH}${source}$`),
      label: `${route.method} ${REST_BASE_PATH}${route.path}`,
      bodyArgs: new Map(field.args.filter((a) => !pathParams.has(a.name)).map((a) => [a.name, a])),
      bodyArg: route.bodyArg,
    };
  });
}

/**
 * SOFA converts body values with the scalars' lenient `serialize` (42 becomes "42", a lone string
 * becomes a list). JSON bodies are checked first with GraphQL's strict input coercion instead, so a
 * wrong type is a 422 naming the field.
 */
function checkBody(text: string, route: CompiledRoute): FieldError[] | 'not_json' {
  if (!text.trim()) return route.bodyArg ? [{ field: 'body', message: 'must be a JSON object' }] : [];
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    return 'not_json';
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    return [{ field: 'body', message: 'must be a JSON object' }];
  }
  if (route.bodyArg) return [];
  const errors: FieldError[] = [];
  for (const [name, value] of Object.entries(body)) {
    const arg = route.bodyArgs.get(name);
    if (!arg || value === undefined) continue;
    coerceInputValue(value, arg.type, (path, _invalid, error) => {
      const suffix = path.map((p) => (typeof p === 'number' ? `[${p}]` : `.${p}`)).join('');
      errors.push({ field: `${name}${suffix}`, message: error.message });
    });
  }
  return errors;
}

/**
 * Query-string arguments of GET routes: SOFA would pass "abc" to the Int scalar and report the
 * failure without the argument's name. Checked here so the 422 names the parameter.
 */
function checkQuery(url: URL, route: CompiledRoute): FieldError[] {
  const errors: FieldError[] = [];
  for (const name of new Set(url.searchParams.keys())) {
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
      } else if (named === GraphQLBoolean && value !== 'true' && value !== 'false') {
        errors.push({ field: name, message: 'must be true or false' });
      } else if (isEnumType(named) && !named.getValue(value)) {
        errors.push({ field: name, message: `must be one of ${named.getValues().map((v) => v.name).join(', ')}` });
      }
    }
  }
  return errors;
}

export function useRestFacade(
  schema: GraphQLSchema,
  authenticate: (request: Request, state: RequestState) => Promise<AuthState>,
  logger: Logger,
): Plugin<{}, ServerContext>[] {
  let routes: CompiledRoute[] | undefined;
  const guard: Plugin<{}, ServerContext> = {
    async onRequest({ request, url, serverContext, endResponse, setRequest, fetchAPI }) {
      if (url.pathname !== REST_BASE_PATH && !url.pathname.startsWith(`${REST_BASE_PATH}/`)) return;
      routes ??= compile(schema);
      const onPath = routes.filter((r) => r.pattern.test(url.pathname));
      const route = onPath.find((r) => r.method === request.method);
      if (!route) {
        if (onPath.length) {
          const response = errorResponse(wireError('METHOD_NOT_ALLOWED', `${request.method} is not allowed here`));
          response.headers.set('Allow', onPath.map((r) => r.method).join(', '));
          endResponse(response);
        } else {
          endResponse(errorResponse(wireError('NOT_FOUND', 'No such endpoint')));
        }
        return;
      }
      serverContext.state.route = route.label;
      // Credentials are checked before the body, so an anonymous caller learns nothing from
      // validation messages. Who may do what is decided later, by the field's auth scopes.
      if (route.needsAuth) {
        let rejection: unknown;
        try {
          const auth = await authenticate(request, serverContext.state);
          if (!auth.principal) rejection = auth.error ?? authenticationRequired();
        } catch (error) {
          // Over the rate limit (an AppError), or the database failing (masked as INTERNAL_ERROR).
          if (!(error instanceof AppError)) logger.error({ err: error, request_id: serverContext.state.requestId }, 'authentication failed');
          rejection = error;
        }
        if (rejection) {
          endResponse(errorResponse(toWireError(rejection)));
          return;
        }
      }
      if (request.method === 'GET') {
        const problems = checkQuery(url, route);
        if (problems.length) {
          endResponse(errorResponse(wireError('VALIDATION_ERROR', 'The query string is invalid', { errors: problems })));
        }
        return;
      }
      const text = await request.text();
      const problems = checkBody(text, route);
      if (problems === 'not_json') {
        endResponse(errorResponse(wireError('BAD_REQUEST', 'The request body is not valid JSON')));
        return;
      }
      if (problems.length) {
        endResponse(errorResponse(wireError('VALIDATION_ERROR', 'The request body is invalid', { errors: problems })));
        return;
      }
      // Arguments of body-carrying routes come from the path and the JSON body only: SOFA would
      // otherwise also read them from the query string, where secrets end up in access logs.
      const clean = new URL(url);
      clean.search = '';
      const body = route.bodyArg ? `{${JSON.stringify(route.bodyArg)}:${text}}` : text;
      // The server's own Request class: Node's global (undici) Request costs ~7% of a gateway call.
      setRequest(new fetchAPI.Request(clean, { method: request.method, headers: request.headers, body: body || null }));
    },
  };
  const sofa = useSofa({
      basePath: REST_BASE_PATH,
      routes: sofaRouteConfig(),
      customScalars: sofaCustomScalars,
      errorHandler: restErrorHandler as unknown as NonNullable<Parameters<typeof useSofa>[0]['errorHandler']>,
      openAPI: { endpoint: false },
      swaggerUI: { endpoint: false },
  }) as Plugin<{}, ServerContext>;
  // SOFA sees the schema without the GraphQL-only fields (rest-schema.ts).
  const restFacade: Plugin<{}, ServerContext> = {
    ...sofa,
    onSchemaChange: (payload) => sofa.onSchemaChange?.({ ...payload, schema: restSchema(payload.schema) }),
  };
  return [guard, restFacade];
}
