import {
  getNamedType,
  isInputObjectType,
  isNonNullType,
  isObjectType,
  isScalarType,
  type GraphQLSchema,
} from 'graphql';
import { useSofa } from 'sofa-api';
import { authErrorCodes, errorStatus, type ErrorCode } from '../errors.js';
import { CLOSED_VALUES_EXTENSION, JSON_SHAPE_EXTENSION } from '../api/closed-values.js';
import { publicPath, REST_BASE_PATH, sofaPath, type RestRoute } from '../api/rest-routes.js';
import { SSO_STARTS_PER_ADDRESS_PER_MINUTE } from '../modules/sso/sso.service.js';
import {
  UPSTREAM_CALLBACK_PATH,
  UPSTREAM_CLIENT_DOCUMENT_PATH,
  UPSTREAM_START_PATH,
} from '../modules/tool/tool-connections.service.js';
import { restSchema, sofaRouteConfig } from './rest-schema.js';
import type { StreamParam, StreamRoute } from '../api/stream-routes.js';
import { restRoutes, streamRoutes } from './schema.js';

/**
 * The OpenAPI 3.0 document of the REST facade. SOFA derives it from the GraphQL schema; as
 * generated, POST bodies repeat as query parameters, path parameters repeat in bodies, mutations
 * have no operationId and errors are undocumented. This cleans that once, at start.
 */

export { REST_BASE_PATH };
/**
 * Its example shows in the documented responses; parameters drop it (describeParameters), since
 * Swagger UI's "Try it out" would send it as a filter.
 */
const timestampSchema = { type: 'string', format: 'date-time', example: '2026-01-01T00:00:00.000Z' };
/** What a date-time parameter accepts (src/lib/timestamp.ts), said in its description instead of an example. */
const TIMESTAMP_PARAMETER_FORMAT =
  'An ISO 8601 date-time with a time zone (`2026-01-01T00:00:00Z`, `2026-01-01T09:30:00+02:00`) or a date (`2026-01-01`, UTC midnight).';

/** What SOFA writes for each scalar: a shaped JSON scalar (scalars.ts) refers to its component. */
export function sofaCustomScalars(schema: GraphQLSchema): Record<string, Json> {
  const scalars: Record<string, Json> = { Timestamp: timestampSchema, JSON: {} };
  for (const [name, shape] of shapedScalars(schema))
    scalars[name] = shape ? { $ref: `#/components/schemas/${name}` } : {};
  return scalars;
}

/** The JSON scalars whose shape is declared (shapedJsonScalar), with their schemas. */
function shapedScalars(schema: GraphQLSchema): Array<[string, Json]> {
  return Object.values(schema.getTypeMap())
    .filter(isScalarType)
    .flatMap((type) => {
      const shape = type.extensions?.[JSON_SHAPE_EXTENSION] as Json | undefined;
      return shape ? [[type.name, shape] as [string, Json]] : [];
    });
}

// biome-ignore lint/suspicious/noExplicitAny: the document is built as loose JSON and checked by the OpenAPI lint test
type Json = Record<string, any>;

const errorResponses: Record<string, { description: string; schema: 'AuthError' | 'Error' }> = {
  '400': { description: 'The body is not JSON (BAD_REQUEST)', schema: 'Error' },
  '401': { description: 'AUTHENTICATION_REQUIRED or INVALID_TOKEN', schema: 'AuthError' },
  '403': { description: 'FORBIDDEN: the role or API key scope does not allow this', schema: 'AuthError' },
  '404': { description: 'NOT_FOUND: unknown, or belongs to another organization', schema: 'Error' },
  '409': { description: 'CONFLICT or INVALID_STATE_TRANSITION', schema: 'Error' },
  '413': { description: 'PAYLOAD_TOO_LARGE: body over 1 MiB', schema: 'Error' },
  '422': { description: 'VALIDATION_ERROR: details.errors lists each field', schema: 'Error' },
  '429': { description: 'POLICY_VIOLATION: rate limit exceeded; see Retry-After', schema: 'Error' },
  '500': { description: 'INTERNAL_ERROR', schema: 'Error' },
  '503': {
    description:
      'SERVICE_UNAVAILABLE: the database cannot be reached (retry after Retry-After seconds; an execute says in details whether its tool ran), ' +
      "or a stored secret cannot be opened with this service's key",
    schema: 'Error',
  },
};

function errorCodesFor(route: Pick<RestRoute, 'method' | 'path' | 'auth' | 'extraErrors'>): string[] {
  // Every route reads the database (credentials, if nothing else): any can meet it unreachable.
  const codes = ['422', '500', '503'];
  if (route.method !== 'GET' && route.method !== 'DELETE') codes.push('400', '413');
  if (route.auth.length) codes.push('401', '403', '429');
  if (route.path.includes(':')) codes.push('404');
  for (const extra of route.extraErrors ?? []) if (!codes.includes(extra)) codes.push(extra);
  return codes.sort();
}

const rateLimitHeaders = {
  'X-RateLimit-Limit': { description: 'Requests allowed in the window', schema: { type: 'integer' } },
  'X-RateLimit-Remaining': { description: 'Requests left in the window', schema: { type: 'integer' } },
  'X-RateLimit-Reset': { description: 'Unix time (seconds) when the window resets', schema: { type: 'integer' } },
};

/** What a 503 carries when the database is unreachable. */
const serviceUnavailableHeaders = {
  'Retry-After': {
    description: 'Seconds to wait before retrying (when the database is unreachable)',
    schema: { type: 'integer' },
  },
};

/** What a 429 carries: when to retry, and the limit that refused. */
const tooManyRequestsHeaders = {
  'Retry-After': {
    description: 'Seconds until the window that refused resets',
    required: true,
    schema: { type: 'integer' },
  },
  ...rateLimitHeaders,
};

function errorResponsesFor(route: Pick<RestRoute, 'method' | 'path' | 'auth' | 'extraErrors' | 'errorNotes'>): Json {
  const responses: Json = {};
  for (const code of errorCodesFor(route)) {
    const { description, schema: ref } = errorResponses[code];
    const note = route.errorNotes?.[code as keyof NonNullable<RestRoute['errorNotes']>];
    // An open route has no role or scope to lack: its 403 is only what its note says (sign-up closed).
    const ownOnly = code === '403' && !route.auth.length && note;
    responses[code] = {
      description: ownOnly ? note : note ? `${description}; ${note}` : description,
      ...(code === '429'
        ? { headers: tooManyRequestsHeaders }
        : code === '503'
          ? { headers: serviceUnavailableHeaders }
          : {}),
      content: { 'application/json': { schema: { $ref: `#/components/schemas/${ref}` } } },
    };
  }
  return responses;
}

const securityOf = (auth: RestRoute['auth']) =>
  auth.map((scheme) => ({ [scheme === 'bearer' ? 'bearerAuth' : 'apiKeyAuth']: [] }));

function streamParamSchema(param: StreamParam): Json {
  if (param.type === 'integer') return { type: 'integer', format: 'int32' };
  if (param.type === 'timestamp') return { ...timestampSchema };
  return param.values ? { type: 'string', enum: [...param.values] } : { type: 'string' };
}

/** A streamed route (stream-routes.ts): SOFA knows nothing of it, so it is described here. */
function streamOperation(route: StreamRoute): Json {
  const pathParams = [...route.path.matchAll(/:([A-Za-z0-9_]+)/g)].map((m) => m[1]);
  return {
    operationId: route.operationId,
    tags: [route.tag],
    summary: route.summary,
    ...(route.description ? { description: route.description } : {}),
    security: securityOf(route.auth),
    parameters: [
      ...pathParams.map((name) => ({ name, in: 'path', required: true, schema: { type: 'string' } })),
      ...route.query.map((param) => ({
        name: param.name,
        in: 'query',
        required: false,
        description: param.description,
        schema: streamParamSchema(param),
      })),
    ],
    responses: {
      '200': {
        description: route.whole?.description ?? 'Streamed as it is read from the database (chunked transfer encoding)',
        headers: {
          ...rateLimitHeaders,
          ...(route.whole
            ? Object.fromEntries(
                Object.entries(route.whole.headers).map(([name, description]) => [
                  name,
                  { description, schema: { type: 'string' } },
                ]),
              )
            : { 'Content-Disposition': { description: 'attachment; filename="…"', schema: { type: 'string' } } }),
        },
        content: Object.fromEntries(
          Object.entries(route.media).map(([type, description]) => [type, { schema: { type: 'string', description } }]),
        ),
      },
      ...errorResponsesFor(route),
    },
  };
}

/** A property with what its field or argument declares (src/api/closed-values.ts): its closed values. */
function declaredShape(property: Json, extensions: Readonly<Record<string, unknown>> | null | undefined): Json {
  const values = extensions?.[CLOSED_VALUES_EXTENSION] as readonly string[] | undefined;
  if (!values) return property;
  return property.type === 'array'
    ? { ...property, items: { ...property.items, enum: [...values] } }
    : { ...property, enum: [...values] };
}

/**
 * What GraphQL knows and SOFA's document drops, applied to every component schema named after a
 * GraphQL object or input type:
 * - a field whose type is not non-null is sent as an explicit `null`, so its property is
 *   `nullable` (a `$ref` property becomes `oneOf` the reference or null: nullableReference);
 * - a String field whose values are a closed set declares them with `extensions: { enum }`
 *   (src/api/closed-values.ts) where a GraphQL enum cannot serve (`gateway:execute` is no GraphQL
 *   name, and reason codes grow without breaking GraphQL clients): the property gets the `enum`.
 */
function carryFieldFacts(schemas: Json, schema: GraphQLSchema): void {
  for (const [name, component] of Object.entries<Json>(schemas)) {
    const type = schema.getType(name);
    if (!(isObjectType(type) || isInputObjectType(type)) || !component.properties) continue;
    for (const [fieldName, field] of Object.entries(type.getFields())) {
      if (!component.properties[fieldName]) continue;
      let property = declaredShape(component.properties[fieldName], field.extensions);
      if (!isNonNullType(field.type)) {
        // A nullable enum must list null among its values (OpenAPI 3.0.3), or validators refuse the null.
        if (property.enum) property = { ...property, enum: [...property.enum, null] };
        // A JSON value (no type) already admits null; `nullable` without a `type` means nothing in 3.0.3.
        if (property.$ref) property = nullableReference(property, schemas);
        else if (property.type) property = { ...property, nullable: true };
      }
      component.properties[fieldName] = property;
    }
  }
}

/**
 * A reference that may be null, in terms strict OpenAPI 3.0.3 tools agree on: `nullable` beside
 * a `$ref` is ignored, and with `allOf` the referenced schema still refuses the null; so the
 * value is one of the referenced schema or the null alone (`nullable` needs a `type` to count).
 */
function nullableReference({ $ref, ...siblings }: Json, schemas: Json): Json {
  const type = schemas[refName($ref)]?.type ?? 'object';
  return { ...siblings, oneOf: [{ $ref }, { type, nullable: true, enum: [null] }] };
}

/** What each tag groups, for the documentation's sections. */
const tagDescriptions: Record<string, string> = {
  Organizations: 'Sign-up, the organization and its settings, its users and their roles.',
  Sessions: 'Operator login (bearer JWT), refresh-token rotation and logout.',
  'API keys': "Scoped keys an org's agents call the gateway with; the key itself is shown once.",
  Manifests:
    'Agent manifests: registration, validation, versions and the approve / reject / suspend / reactivate / revoke transitions.',
  Agents: 'The identity behind manifest versions: owner, labels, usage, deactivation.',
  Gateway:
    'Execute and evaluate agent actions: the decision with its reasons, budgets, policies and the signed record.',
  Approvals: 'Actions waiting for a human: operators decide them, agents poll them.',
  Tools: 'Per-org connectors by action type (http, mcp, mock) that execute allowed actions.',
  Policies: 'Org policies over actions (CEL conditions; deny, require approval or rate limit; enforce or shadow).',
  'Capability tokens': 'Ed25519 tokens that narrow what an agent may do, with expiry and use limits.',
  Webhooks: 'Signed event deliveries to operator endpoints, with retries and a delivery log.',
  'Audit logs': 'Every operator write with its actor, before and after; listing and export.',
  Records: 'The signed, hash-chained interaction records; verification and offline export.',
  Marketplace: 'Manifest templates published by orgs and acquired by others (unprefixed paths).',
  Health: 'Liveness and readiness for load balancers and orchestrators; no credentials.',
  Keys: 'The public keys that verify capability tokens and interaction records offline (JWKS).',
  'Single sign-on':
    "Operators sign in with their organization's OpenID provider: its configuration (admins), the browser's start and callback, and the console's exchange of the one-time code.",
  OAuth:
    "OAuth for MCP clients: the authorization server's metadata, each agent's protected-resource metadata, client registration, the authorization, token and revocation endpoints. Errors in OAuth's own format.",
};

/** Operations the service answers outside the GraphQL schema (so SOFA knows nothing of them). */
function serviceOperations(): Json {
  const json = (schema: Json, description = 'Success') => ({
    description,
    content: { 'application/json': { schema } },
  });
  const status = { type: 'object', required: ['status'], properties: { status: { type: 'string', enum: ['ok'] } } };
  const readiness = {
    type: 'object',
    required: ['status', 'checks'],
    properties: {
      status: { type: 'string', enum: ['ok', 'unavailable'] },
      checks: { type: 'object', required: ['database'], properties: { database: { type: 'boolean' } } },
    },
  };
  const jwk = {
    type: 'object',
    required: ['kty', 'kid'],
    properties: {
      kty: { type: 'string', enum: ['OKP'] },
      crv: { type: 'string', enum: ['Ed25519'] },
      x: { type: 'string', description: 'The public key, base64url' },
      kid: { type: 'string' },
      alg: { type: 'string', enum: ['EdDSA'] },
      use: { type: 'string', enum: ['sig'] },
    },
    additionalProperties: true,
  };
  const strings = { type: 'array', items: { type: 'string' } };
  const retryAfter = {
    required: true,
    description: 'Seconds to wait before trying again',
    schema: { type: 'integer' },
  };
  const oauthError = (codes: string[], description: string) =>
    json(
      {
        type: 'object',
        required: ['error', 'error_description'],
        properties: { error: { type: 'string', enum: codes }, error_description: { type: 'string' } },
      },
      description,
    );
  /** 429 and 503 of the OAuth endpoints: OAuth's `temporarily_unavailable`, with `Retry-After`. */
  const oauthRetry = (description: string) => ({
    ...oauthError(['temporarily_unavailable'], description),
    headers: { 'Retry-After': retryAfter },
  });
  const oauthUnavailable = oauthRetry('The database cannot be reached');
  /** A refusal at a browser's step (single sign-on, a tool connection): a page to a browser, the API's error envelope to a program. */
  const browserPage = (description: string) => ({
    description,
    content: {
      'text/html': { schema: { type: 'string' } },
      'application/json': { schema: { $ref: '#/components/schemas/Error' } },
    },
  });
  /** Where an authorization server sends the browser back (OAuth's callback): a redirect onwards, or a refusal page. */
  const browserCallback = ({ redirect, ...operation }: Json & { redirect: string }) => ({
    ...operation,
    security: [],
    parameters: ['state', 'code', 'iss', 'error', 'error_description'].map((name) => ({
      name,
      in: 'query',
      required: false,
      schema: { type: 'string' },
    })),
    responses: {
      '302': { description: redirect, headers: { Location: { required: true, schema: { type: 'string' } } } },
      '405': browserPage('Only GET'),
      '503': browserPage('The database cannot be reached'),
    },
  });
  const clientFields = {
    redirect_uris: {
      ...strings,
      description: 'https URLs, or http on the loopback interface (127.0.0.1, [::1], localhost), at most 10',
    },
    client_name: { type: 'string', maxLength: 200 },
    client_uri: { type: 'string', description: 'An https URL' },
    logo_uri: { type: 'string', description: 'An https URL' },
    scope: { type: 'string' },
    software_id: { type: 'string' },
    software_version: { type: 'string' },
  };
  return {
    '/.well-known/oauth-authorization-server': {
      get: {
        operationId: 'oauth_authorization_server_metadata',
        tags: ['OAuth'],
        summary: 'Authorization-server metadata (RFC 8414)',
        description:
          'The issuer is PUBLIC_URL; MCP clients find the authorization, token, registration and revocation endpoints here.',
        security: [],
        responses: {
          '200': json({
            type: 'object',
            required: [
              'issuer',
              'authorization_endpoint',
              'token_endpoint',
              'registration_endpoint',
              'response_types_supported',
            ],
            properties: {
              issuer: { type: 'string' },
              authorization_endpoint: { type: 'string' },
              token_endpoint: { type: 'string' },
              registration_endpoint: { type: 'string' },
              revocation_endpoint: { type: 'string' },
              jwks_uri: { type: 'string' },
              response_types_supported: strings,
              grant_types_supported: strings,
              code_challenge_methods_supported: strings,
              token_endpoint_auth_methods_supported: strings,
              revocation_endpoint_auth_methods_supported: strings,
              client_id_metadata_document_supported: { type: 'boolean' },
              authorization_response_iss_parameter_supported: { type: 'boolean' },
              scopes_supported: strings,
            },
          }),
          '405': oauthError(['invalid_request'], 'Only GET'),
        },
      },
    },
    '/.well-known/oauth-protected-resource/mcp/{svc_id}': {
      get: {
        operationId: 'oauth_protected_resource_metadata',
        tags: ['OAuth'],
        summary: "An agent's MCP endpoint as an OAuth protected resource (RFC 9728)",
        description: 'Served for any well-formed agent id, without saying whether the agent exists.',
        security: [],
        parameters: [{ name: 'svc_id', in: 'path', required: true, schema: { type: 'string' } }],
        responses: {
          '200': json({
            type: 'object',
            required: [
              'resource',
              'authorization_servers',
              'scopes_supported',
              'bearer_methods_supported',
              'resource_name',
            ],
            properties: {
              resource: { type: 'string' },
              authorization_servers: strings,
              scopes_supported: strings,
              bearer_methods_supported: strings,
              resource_name: { type: 'string' },
            },
          }),
          '404': oauthError(['not_found'], 'Not an agent id'),
          '405': oauthError(['invalid_request'], 'Only GET'),
        },
      },
    },
    '/oauth/register': {
      post: {
        operationId: 'oauth_register_client',
        tags: ['OAuth'],
        summary: 'Register a public OAuth client (RFC 7591)',
        description:
          'Public clients only (`token_endpoint_auth_method: none`, PKCE). Throttled per client address (OAUTH_REGISTRATIONS_PER_ADDRESS an hour); a registration unused for 30 days expires.',
        security: [],
        requestBody: {
          required: true,
          content: {
            'application/json': {
              schema: {
                type: 'object',
                required: ['redirect_uris'],
                properties: {
                  ...clientFields,
                  token_endpoint_auth_method: { type: 'string', enum: ['none'] },
                  grant_types: {
                    type: 'array',
                    items: { type: 'string', enum: ['authorization_code', 'refresh_token'] },
                  },
                  response_types: { type: 'array', items: { type: 'string', enum: ['code'] } },
                },
              },
            },
          },
        },
        responses: {
          '201': json(
            {
              type: 'object',
              required: [
                'client_id',
                'client_id_issued_at',
                'redirect_uris',
                'token_endpoint_auth_method',
                'grant_types',
                'response_types',
              ],
              properties: {
                client_id: { type: 'string' },
                client_id_issued_at: { type: 'integer' },
                ...clientFields,
                token_endpoint_auth_method: { type: 'string', enum: ['none'] },
                grant_types: strings,
                response_types: strings,
              },
            },
            'Registered',
          ),
          '400': oauthError(['invalid_redirect_uri', 'invalid_client_metadata'], 'The metadata is refused'),
          '405': oauthError(['invalid_request'], 'Only POST'),
          '429': oauthRetry('Too many registrations from this address'),
          '503': oauthUnavailable,
        },
      },
    },
    '/oauth/authorize': {
      get: {
        operationId: 'oauth_authorize',
        tags: ['OAuth'],
        summary: 'Start the authorization code flow (visited by the browser)',
        description:
          'Checks the request and sends the browser to the console’s consent page (`/console/authorize` with the same parameters). ' +
          'Once client and redirect URI are known to match, any other problem goes back to the redirect URI with `error`, `state` and `iss` (RFC 9207); ' +
          'while they are not, a page (or, to a program, OAuth JSON) says why and nothing is redirected.',
        security: [],
        parameters: [
          ...[
            'response_type',
            'client_id',
            'redirect_uri',
            'code_challenge',
            'code_challenge_method',
            'state',
            'resource',
          ].map((name) => ({
            name,
            in: 'query',
            required: true,
            schema: { type: 'string' },
          })),
          { name: 'scope', in: 'query', required: false, schema: { type: 'string', enum: ['mcp:tools'] } },
        ],
        responses: {
          '302': {
            description: 'To the consent page, or back to the client with an error',
            headers: { Location: { required: true, schema: { type: 'string' } } },
          },
          '400': {
            description: 'Neither client nor redirect URI can be trusted: nothing is redirected',
            content: {
              'text/html': { schema: { type: 'string' } },
              'application/json': oauthError(['invalid_request'], '').content['application/json'],
            },
          },
          '405': oauthError(['invalid_request'], 'Only GET'),
          '429': oauthRetry('Too many client metadata documents fetched for this address'),
          '503': oauthUnavailable,
        },
      },
    },
    '/oauth/token': {
      post: {
        operationId: 'oauth_token',
        tags: ['OAuth'],
        summary: 'Exchange an authorization code, or rotate a refresh token',
        description:
          'Public clients: `authorization_code` needs `code` (single use, 60 s), `code_verifier` (PKCE S256), the same `redirect_uri` and `client_id`; ' +
          '`refresh_token` needs `refresh_token` (single use: rotation) and `client_id`. A code or refresh token presented a second time revokes its grant. ' +
          'The access token is an RFC 9068 JWT for one agent’s MCP endpoint (`aud`), valid an hour.',
        security: [],
        requestBody: {
          required: true,
          content: {
            'application/x-www-form-urlencoded': {
              schema: {
                type: 'object',
                required: ['grant_type'],
                properties: {
                  grant_type: { type: 'string', enum: ['authorization_code', 'refresh_token'] },
                  code: { type: 'string' },
                  redirect_uri: { type: 'string' },
                  client_id: { type: 'string' },
                  code_verifier: { type: 'string' },
                  resource: { type: 'string', description: 'When sent, the MCP endpoint of the grant (RFC 8707)' },
                  refresh_token: { type: 'string' },
                  scope: { type: 'string', enum: ['mcp:tools'] },
                },
              },
            },
          },
        },
        responses: {
          '200': json(
            {
              type: 'object',
              required: ['access_token', 'token_type', 'expires_in', 'refresh_token', 'scope'],
              properties: {
                access_token: { type: 'string' },
                token_type: { type: 'string', enum: ['Bearer'] },
                expires_in: { type: 'integer' },
                refresh_token: { type: 'string' },
                scope: { type: 'string' },
              },
            },
            'Tokens (never cached)',
          ),
          '400': oauthError(
            ['invalid_request', 'invalid_grant', 'unsupported_grant_type', 'invalid_scope', 'invalid_target'],
            'The request is refused',
          ),
          '405': oauthError(['invalid_request'], 'Only POST'),
          '429': oauthRetry('Too many failed token requests from this address'),
          '503': oauthUnavailable,
        },
      },
    },
    '/oauth/revoke': {
      post: {
        operationId: 'oauth_revoke',
        tags: ['OAuth'],
        summary: 'Revoke a grant with one of its tokens (RFC 7009)',
        description:
          'An access or refresh token revokes its whole grant. A token that names nothing still standing is answered 200 too (RFC 7009 §2.2); ' +
          'one issued to another client than the `client_id` sent is refused.',
        security: [],
        requestBody: {
          required: true,
          content: {
            'application/x-www-form-urlencoded': {
              schema: {
                type: 'object',
                required: ['token'],
                properties: {
                  token: { type: 'string' },
                  token_type_hint: { type: 'string' },
                  client_id: { type: 'string' },
                },
              },
            },
          },
        },
        responses: {
          '200': { description: 'Revoked, or nothing to revoke' },
          '400': oauthError(['invalid_request'], 'The request is refused'),
          '405': oauthError(['invalid_request'], 'Only POST'),
          '503': oauthUnavailable,
        },
      },
    },
    '/auth/sso/{org_slug}': {
      get: {
        operationId: 'sso_start',
        tags: ['Single sign-on'],
        summary: "Start an operator's single sign-on (visited by the browser)",
        description:
          "Sends the browser to the organization's OpenID provider with an authorization code request (PKCE S256, `state`, `nonce`) " +
          'and sets the cookie `agw_sso` that ties the answer to this browser (10 minutes). ' +
          `At most ${SSO_STARTS_PER_ADDRESS_PER_MINUTE} sign-ins per client address a minute.`,
        security: [],
        parameters: [{ name: 'org_slug', in: 'path', required: true, schema: { type: 'string' } }],
        responses: {
          '302': {
            description: "To the provider's authorization endpoint",
            headers: {
              Location: { required: true, schema: { type: 'string' } },
              'Set-Cookie': { required: true, schema: { type: 'string' } },
            },
          },
          '404': browserPage('No organization by this slug signs in with single sign-on'),
          '405': browserPage('Only GET'),
          '429': {
            ...browserPage('Too many sign-ins started from this address'),
            headers: { 'Retry-After': retryAfter },
          },
          '503': browserPage("The provider's discovery document, or the database, cannot be read"),
        },
      },
    },
    '/auth/sso/callback': {
      get: browserCallback({
        operationId: 'sso_callback',
        tags: ['Single sign-on'],
        summary: "The provider's answer (visited by the browser): on to the console",
        description:
          'Checks the answer (the `state` once, the `agw_sso` cookie, `iss`), exchanges the code, checks the ID token (signature by the ' +
          "provider's JWKS, `iss`, `aud`, `exp`, `nonce`, a verified email at an allowed domain), creates the user on a first sign-in " +
          'and sends the browser to `/console/sso#code=<one-time code>`, or `/console/sso#error=<code>&error_description=<text>`.',
        redirect: 'To the console, with the one-time code or the reason in the fragment',
      }),
    },
    [UPSTREAM_START_PATH]: {
      get: {
        operationId: 'tool_connection_start',
        tags: ['Tools'],
        summary: "Open a tool connection's authorization (visited by the browser)",
        description:
          "Where a connection's `authorization_url` points (`POST /api/v1/orgs/{org_id}/tools/{tool_id}/connections`): binds the " +
          'authorization to the first browser that opens it, with the cookie `agw_upstream` (10 minutes), and sends it to the ' +
          "upstream's authorization server. A second browser, an expired or an unknown `state` is refused.",
        security: [],
        parameters: [{ name: 'state', in: 'query', required: true, schema: { type: 'string' } }],
        responses: {
          '302': {
            description: "To the upstream's authorization endpoint",
            headers: {
              Location: { required: true, schema: { type: 'string' } },
              'Set-Cookie': { required: true, schema: { type: 'string' } },
            },
          },
          '400': browserPage('The authorization is unknown, expired or already opened'),
          '405': browserPage('Only GET'),
          '503': browserPage('The database cannot be reached'),
        },
      },
    },
    [UPSTREAM_CALLBACK_PATH]: {
      get: browserCallback({
        operationId: 'tool_connection_callback',
        tags: ['Tools'],
        summary: "The upstream authorization server's answer (visited by the browser): on to the console",
        description:
          'Takes the authorization once by its `state`, from the browser that opened it (the `agw_upstream` cookie), checks `iss` ' +
          'against the server it went to (RFC 9207), exchanges the code (PKCE) and keeps the tokens sealed; then sends the browser ' +
          'to `/console/tools/{tool_id}?connection={connection_id}&result=connected`, or `result=error&reason={code}` (to ' +
          '`/console/tools?result=error&reason=…` when the state names nothing).',
        redirect: "To the console's tool page, saying connected or why not",
      }),
    },
    [UPSTREAM_CLIENT_DOCUMENT_PATH]: {
      get: {
        operationId: 'upstream_client_metadata_document',
        tags: ['Tools'],
        summary: "The gateway's Client ID Metadata Document, for tools' upstream authorization servers",
        description:
          "An authorization server that accepts Client ID Metadata Documents fetches this one when the gateway's `client_id` is its URL " +
          '(offered only by a deployment whose PUBLIC_URL is https): a public client (`none`) whose one redirect URI is ' +
          '`<PUBLIC_URL>/oauth/upstream/callback`.',
        security: [],
        responses: {
          '200': json({
            type: 'object',
            required: [
              'client_id',
              'client_name',
              'redirect_uris',
              'grant_types',
              'response_types',
              'token_endpoint_auth_method',
            ],
            properties: {
              client_id: { type: 'string' },
              client_name: { type: 'string' },
              redirect_uris: strings,
              grant_types: strings,
              response_types: strings,
              token_endpoint_auth_method: { type: 'string', enum: ['none'] },
            },
          }),
          '405': browserPage('Only GET or HEAD'),
        },
      },
    },
    '/healthz': {
      get: {
        operationId: 'healthz',
        tags: ['Health'],
        summary: 'Liveness: the process serves requests',
        description:
          'Answers 200 while the process runs, without touching the database: a restart is the cure for a failure here.',
        security: [],
        responses: { '200': json(status) },
      },
    },
    '/readyz': {
      get: {
        operationId: 'readyz',
        tags: ['Health'],
        summary: 'Readiness: the database answers and the process is not shutting down',
        description:
          'A load balancer sends traffic only while this is 200; 503 while the database does not answer or once shutdown began (SIGTERM).',
        security: [],
        responses: {
          '200': json(readiness),
          '503': json(readiness, 'Not ready: the database does not answer, or shutdown began'),
        },
      },
    },
    '/.well-known/jwks.json': {
      get: {
        operationId: 'jwks',
        tags: ['Keys'],
        summary: 'Public keys of capability tokens and records (retired keys stay listed)',
        description:
          'Ed25519 keys as a JWK Set: verify capability tokens and the signatures of interaction records offline, by `kid`.',
        security: [],
        responses: {
          '200': json({ type: 'object', required: ['keys'], properties: { keys: { type: 'array', items: jwk } } }),
        },
      },
    },
  };
}

/**
 * `serverUrl` is where clients reach the service: the served document names PUBLIC_URL, so a
 * generated client works as is; the committed one names the default address.
 */
export function buildOpenApiDocument(
  schema: GraphQLSchema,
  version: string,
  serverUrl = 'http://localhost:8000',
): Json {
  const router = useSofa({
    schema: restSchema(schema),
    basePath: REST_BASE_PATH,
    routes: sofaRouteConfig(),
    customScalars: sofaCustomScalars(schema),
    openAPI: {},
    swaggerUI: { endpoint: false },
  }) as unknown as { openAPIDocument: Json };
  const generated = structuredClone(router.openAPIDocument);
  const shapes = new Map(shapedScalars(schema));

  const openApiPath = (path: string) => path.replace(/:([^/]+)/g, '{$1}');
  const byPath = new Map<string, [string, RestRoute]>();
  for (const [field, route] of restRoutes) {
    byPath.set(`${route.method.toLowerCase()} ${openApiPath(sofaPath(route))}`, [field, route]);
  }

  // Paths are absolute (the server is the root): the versioned routes under /api/v1 and the
  // secondary listing's at the root share one document without colliding (`/auth/login` is both).
  const paths: Json = {};
  for (const [generatedPath, operations] of Object.entries<Json>(generated.paths ?? {})) {
    for (const [method, operation] of Object.entries<Json>(operations)) {
      const entry = byPath.get(`${method} ${generatedPath}`);
      if (!entry) continue;
      const [field, route] = entry;
      const path = openApiPath(publicPath(route));
      const pathParams = new Set<string>(
        (operation.parameters ?? []).filter((p: Json) => p.in === 'path').map((p: Json) => p.name),
      );
      const hasBody = Boolean(operation.requestBody);
      operation.operationId = field.split('.')[1];
      operation.summary = route.summary;
      // The route's own text, else the GraphQL field's description: one text for both APIs.
      const [rootName, fieldName] = field.split('.');
      const graphqlField = (rootName === 'Query' ? schema.getQueryType() : schema.getMutationType())?.getFields()[
        fieldName
      ];
      const description = route.description ?? graphqlField?.description;
      if (description) operation.description = description;
      else delete operation.description;
      operation.parameters = (operation.parameters ?? []).filter((p: Json) => !(hasBody && p.in === 'query'));
      if (!operation.parameters.length) delete operation.parameters;
      if (route.bodyArg) {
        // The whole body is this argument: its own schema (a shaped scalar's component), not an object holding it.
        const bodyArg = graphqlField?.args.find((arg) => arg.name === route.bodyArg);
        const scalarName = bodyArg && getNamedType(bodyArg.type).name;
        operation.requestBody = {
          required: true,
          content: {
            'application/json': {
              schema: scalarName && shapes.has(scalarName) ? { $ref: `#/components/schemas/${scalarName}` } : {},
            },
          },
        };
      }
      const body = route.bodyArg ? undefined : operation.requestBody?.content?.['application/json']?.schema;
      if (body?.properties) {
        for (const arg of graphqlField?.args ?? []) {
          if (body.properties[arg.name])
            body.properties[arg.name] = declaredShape(body.properties[arg.name], arg.extensions);
        }
      }
      if (body) {
        for (const name of pathParams) delete body.properties?.[name];
        if (body.required) body.required = body.required.filter((n: string) => !pathParams.has(n));
        if (!body.required?.length) {
          delete body.required;
          operation.requestBody.required = false;
        }
      }
      operation.security = securityOf(route.auth);
      const status = String(route.status ?? 200);
      if (status === '204') operation.responses = { '204': { description: 'No content' } };
      if (route.auth.length) operation.responses[status].headers = rateLimitHeaders;
      operation.responses[status].description ||= 'Success';
      Object.assign(operation.responses, errorResponsesFor(route));
      (paths[path] ??= {})[method] = operation;
    }
  }
  for (const route of streamRoutes) {
    (paths[openApiPath(`${REST_BASE_PATH}${route.path}`)] ??= {})[route.method.toLowerCase()] = streamOperation(route);
  }

  const schemas: Json = { ...generated.components?.schemas };
  for (const [name, shape] of shapes) schemas[name] = shape;
  delete schemas.Query;
  delete schemas.Mutation;
  carryFieldFacts(schemas, schema);
  schemas.AuthError = {
    type: 'object',
    required: ['detail'],
    properties: {
      detail: {
        type: 'object',
        required: ['code', 'message'],
        properties: {
          code: { type: 'string', enum: ['AUTHENTICATION_REQUIRED', 'INVALID_TOKEN', 'FORBIDDEN'] },
          message: { type: 'string' },
        },
      },
    },
  };
  schemas.Error = {
    type: 'object',
    required: ['error'],
    properties: {
      error: {
        type: 'object',
        required: ['code', 'message', 'details'],
        properties: {
          // Every code of src/errors.ts but the authentication ones, which use AuthError.
          code: {
            type: 'string',
            enum: (Object.keys(errorStatus) as ErrorCode[]).filter((code) => !authErrorCodes.has(code)),
          },
          message: { type: 'string' },
          details: {
            type: 'object',
            description:
              'VALIDATION_ERROR: {errors: [{field, message}]}; POLICY_VIOLATION: {limit, period, current}; INVALID_STATE_TRANSITION: {from, to}',
            additionalProperties: true,
          },
        },
      },
    },
  };

  const document = {
    openapi: '3.0.3',
    info: {
      title: 'Agent Gateway API',
      version,
      license: { name: 'Apache-2.0', url: 'https://www.apache.org/licenses/LICENSE-2.0' },
      description:
        'Policy gateway between AI agents and their tools. The same operations are available as GraphQL at /graphql. ' +
        'A known path called with a method it does not have answers 405 METHOD_NOT_ALLOWED (the Error envelope) with an ' +
        '`Allow` header; an unknown path under /api/v1 answers 404 NOT_FOUND.',
    },
    servers: [
      {
        url: serverUrl,
        description: `Versioned operations under ${REST_BASE_PATH}; the secondary listing (marketplace, sessions) at the root`,
      },
    ],
    tags: [...new Set([...restRoutes.values(), ...streamRoutes].map((r) => r.tag)), 'Health', 'Keys', 'OAuth'].map(
      (name) => ({
        name,
        ...(tagDescriptions[name] ? { description: tagDescriptions[name] } : {}),
      }),
    ),
    paths: Object.fromEntries(
      Object.entries({ ...paths, ...serviceOperations() }).sort(([a], [b]) => a.localeCompare(b)),
    ),
    components: {
      securitySchemes: {
        bearerAuth: {
          type: 'http',
          scheme: 'bearer',
          bearerFormat: 'JWT',
          description: 'Operator session token from /auth/login',
        },
        apiKeyAuth: { type: 'apiKey', in: 'header', name: 'X-API-Key', description: 'API key (agw_…)' },
      },
      schemas: Object.fromEntries(Object.entries(schemas).sort(([a], [b]) => a.localeCompare(b))),
    },
  };
  describeParameters(document.paths);
  moveRefSiblings(document);
  dropUnusedSchemas(document);
  return document;
}

/**
 * No parameter carries an example: Swagger UI's "Try it out" fills each field with its example and
 * sends it, so an optional filter would narrow every listing to one instant (and answer empty
 * lists). What a value looks like goes into the description instead.
 */
function describeParameters(paths: Json): void {
  for (const operations of Object.values<Json>(paths)) {
    for (const operation of Object.values<Json>(operations)) {
      if (!operation.parameters) continue;
      operation.parameters = operation.parameters.map(
        ({ example: _example, examples: _examples, description, schema, ...parameter }: Json) => {
          const { example: _schemaExample, examples: _schemaExamples, ...bare } = schema ?? {};
          if (bare.format === 'date-time') {
            description = description ? `${description} ${TIMESTAMP_PARAMETER_FORMAT}` : TIMESTAMP_PARAMETER_FORMAT;
          }
          return { ...parameter, ...(description ? { description } : {}), ...(schema ? { schema: bare } : {}) };
        },
      );
    }
  }
}

const refName = (ref: string) => ref.replace('#/components/schemas/', '');

/**
 * OpenAPI 3.0 ignores every keyword beside a `$ref` (a description), so tools that read the
 * document (validators, Redocly, generators) would drop them: the reference moves into an `allOf`
 * the keywords sit beside.
 */
function moveRefSiblings(node: unknown): void {
  if (Array.isArray(node)) {
    for (const item of node) moveRefSiblings(item);
    return;
  }
  if (typeof node !== 'object' || node === null) return;
  const object = node as Json;
  for (const key of Object.keys(object)) if (object[key] === undefined) delete object[key];
  if (typeof object.$ref === 'string' && Object.keys(object).length > 1) {
    const ref = object.$ref;
    delete object.$ref;
    object.allOf = [{ $ref: ref }];
  }
  for (const value of Object.values(object)) moveRefSiblings(value);
}

/** SOFA adds a component for every GraphQL type it meets, some of which it then inlines. */
function dropUnusedSchemas(document: Json): void {
  const schemas: Json = document.components.schemas;
  for (;;) {
    const { schemas: _own, ...rest } = document.components;
    const text = JSON.stringify({ ...document, components: rest }) + JSON.stringify(Object.values(schemas));
    const unused = Object.keys(schemas).filter((name) => !text.includes(`"#/components/schemas/${name}"`));
    if (!unused.length) return;
    for (const name of unused) delete schemas[name];
  }
}
