import type { Plugin } from 'graphql-yoga';
import type { Logger } from 'pino';
import { isDatabaseUnavailable } from '../db/unavailable.js';
import { AppError, DATABASE_RETRY_AFTER_SECONDS } from '../errors.js';
import type { TokenError } from '../modules/oauth/token-endpoint.js';
import { logUnexpected } from '../logger.js';
import { agentIdPattern } from '../modules/manifest/manifest-document.js';
import {
  AUTHORIZATION_SERVER_METADATA_PATH,
  OAUTH_PATHS,
  PROTECTED_RESOURCE_METADATA_PREFIX,
} from '../modules/oauth/oauth-metadata.js';
import { AUTHORIZATION_PARAM_NAMES, type AuthorizationParams } from '../modules/oauth/authorization-request.js';
import type { OAuthService } from '../modules/oauth/oauth.service.js';
import { TOKEN_FORM_FIELDS, type TokenForm } from '../modules/oauth/token-endpoint.js';
import { decodedSegment, escapeHtml, PAGE_HEADERS } from './browser-pages.js';
import { CONSOLE_PATH } from './console.js';
import { Response } from '../api/fetch-api.js';
import { useOwnEndpoints } from './own-endpoints.js';
import type { ServerContext } from './lifecycle.js';

/**
 * The OAuth edge of the MCP endpoints (docs/decisions/0047-mcp-oauth.md): the metadata documents,
 * client registration, the authorization endpoint (to the console's consent page), the token
 * endpoint and revocation (RFC 7009). OAuth fixes its own wire: errors are `{error,
 * error_description}` (RFC 6749 §5.2, RFC 7591 §3.2.2), not the API's envelopes. These answers
 * carry no ambient authority (nothing here reads a cookie), so any origin may read them: MCP
 * clients that run in a browser (the MCP Inspector) discover, register and get tokens from their
 * own origin. The authorization endpoint is a browser navigation, not read by scripts.
 */

const CORS_HEADERS = {
  'Access-Control-Allow-Origin': '*',
  'Access-Control-Allow-Methods': 'GET, POST, OPTIONS',
  'Access-Control-Allow-Headers': 'Content-Type, Authorization, MCP-Protocol-Version',
  'Access-Control-Max-Age': '600',
};
/** The documents change only with PUBLIC_URL: a client may keep them a while. */
const METADATA_CACHE = 'public, max-age=300';
const PROTECTED_RESOURCE_MCP_PREFIX = `${PROTECTED_RESOURCE_METADATA_PREFIX}/mcp/`;

type OAuthErrorCode =
  | 'invalid_request'
  | 'invalid_client_metadata'
  | 'invalid_redirect_uri'
  | 'temporarily_unavailable'
  | 'server_error'
  | 'not_found'
  | TokenError['error'];

/** The consent page of the console: `/oauth/authorize` sends the browser there with its parameters. */
export const CONSENT_PATH = `${CONSOLE_PATH}/authorize`;

export function oauthError(
  status: number,
  error: OAuthErrorCode,
  description: string,
  headers: Record<string, string> = {},
): Response {
  return Response.json(
    { error, error_description: description },
    { status, headers: { ...CORS_HEADERS, 'Cache-Control': 'no-store', ...headers } },
  );
}

const json = (body: unknown, status = 200, headers: Record<string, string> = {}) =>
  Response.json(body, { status, headers: { ...CORS_HEADERS, ...headers } });

/** The parameters of a query string or form, once each; a repeated one is named (RFC 6749 §3.1, §3.2). */
function singleParams<Name extends string>(
  params: URLSearchParams,
  names: readonly Name[],
): { values: Partial<Record<Name, string>> } | { repeated: string } {
  const values: Partial<Record<Name, string>> = {};
  for (const name of names) {
    const all = params.getAll(name);
    if (all.length > 1) return { repeated: name };
    if (all.length === 1) values[name] = all[0];
  }
  return { values };
}

/**
 * Why an authorization request cannot be answered, to the person in the browser (the client
 * cannot be trusted with a redirect): a short page, or OAuth's JSON to a program.
 */
function refusalPage(request: Request, description: string): Response {
  if (!request.headers.get('accept')?.includes('text/html')) {
    // A copy: Response.json adds its Content-Type to the headers object it is given.
    return Response.json(
      { error: 'invalid_request', error_description: description },
      { status: 400, headers: { ...PAGE_HEADERS } },
    );
  }
  const html =
    '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Authorization request refused · Agent Gateway</title></head>' +
    `<body><h1>This authorization request cannot be answered</h1><p>${escapeHtml(description)}</p>` +
    '<p>The application that sent you here made a mistake; you can close this page.</p></body></html>';
  return new Response(html, { status: 400, headers: { ...PAGE_HEADERS, 'Content-Type': 'text/html; charset=utf-8' } });
}

const redirect = (location: string) =>
  new Response(null, { status: 302, headers: { ...PAGE_HEADERS, Location: location } });

interface OAuthEndpointDeps {
  oauth: OAuthService;
  logger: Logger;
}

export function useOAuthEndpoints({ oauth, logger }: OAuthEndpointDeps): Plugin<{}, ServerContext> {
  /** `GET /oauth/authorize`: to the consent page, back to the client with an error, or a page saying why. */
  async function authorize(request: Request, url: URL, clientAddress: string): Promise<Response> {
    if (request.method !== 'GET' && request.method !== 'HEAD') {
      return oauthError(
        405,
        'invalid_request',
        `${request.method} is not supported here: the authorization endpoint is visited with GET`,
        { Allow: 'GET, HEAD' },
      );
    }
    const params = singleParams(url.searchParams, AUTHORIZATION_PARAM_NAMES);
    if ('repeated' in params) return refusalPage(request, `The parameter ${params.repeated} is repeated.`);
    const outcome = await oauth.authorize(params.values as AuthorizationParams, CONSENT_PATH, clientAddress);
    if ('shown' in outcome) return refusalPage(request, outcome.shown);
    return redirect('consent' in outcome ? outcome.consent : outcome.redirect);
  }

  /** The form of a token or revocation request, or the error that refuses it. */
  async function formOf<Name extends string>(
    request: Request,
    names: readonly Name[],
  ): Promise<Partial<Record<Name, string>> | Response> {
    const mediaType = request.headers.get('content-type')?.split(';')[0].trim().toLowerCase();
    if (mediaType !== 'application/x-www-form-urlencoded') {
      return oauthError(
        400,
        'invalid_request',
        'The request must be sent as application/x-www-form-urlencoded (RFC 6749 §3.2)',
      );
    }
    const form = singleParams(new URLSearchParams(await request.text()), names);
    if ('repeated' in form) return oauthError(400, 'invalid_request', `The parameter ${form.repeated} is repeated`);
    return form.values;
  }

  /** `POST /oauth/token`: a token response, never cached (RFC 6749 §5.1), or OAuth's error. */
  async function token(request: Request, clientAddress: string): Promise<Response> {
    const form = await formOf(request, TOKEN_FORM_FIELDS);
    if (form instanceof Response) return form;
    const answer = await oauth.token(form as TokenForm, clientAddress);
    if ('error' in answer) return oauthError(400, answer.error, answer.error_description);
    return json(answer, 200, { 'Cache-Control': 'no-store', Pragma: 'no-cache' });
  }

  /** `POST /oauth/revoke` (RFC 7009): 200 whether or not the token named anything still standing. */
  async function revoke(request: Request): Promise<Response> {
    const form = await formOf(request, ['token', 'token_type_hint', 'client_id'] as const);
    if (form instanceof Response) return form;
    const refusal = await oauth.revokeToken(form);
    if (refusal) return oauthError(400, refusal.error, refusal.error_description);
    return new Response(null, { status: 200, headers: { ...CORS_HEADERS, 'Cache-Control': 'no-store' } });
  }

  /** A path that takes a POST (registration, tokens, revocation): the method checked, preflights answered. */
  function postOnly(request: Request, serve: () => Promise<Response>): Promise<Response> | Response {
    if (request.method === 'OPTIONS') return new Response(null, { status: 204, headers: CORS_HEADERS });
    if (request.method !== 'POST')
      return oauthError(405, 'invalid_request', `${request.method} is not supported here: use POST`, {
        Allow: 'POST, OPTIONS',
      });
    return serve();
  }

  /** The answer of a path this edge serves (`ours`). */
  async function answer(request: Request, url: URL, clientAddress: string): Promise<Response> {
    const { pathname } = url;
    if (pathname === OAUTH_PATHS.authorize) return authorize(request, url, clientAddress);
    if (pathname === OAUTH_PATHS.token) return postOnly(request, () => token(request, clientAddress));
    if (pathname === OAUTH_PATHS.revoke) return postOnly(request, () => revoke(request));
    if (pathname === OAUTH_PATHS.register) return postOnly(request, () => register(request, clientAddress));
    if (request.method === 'OPTIONS') return new Response(null, { status: 204, headers: CORS_HEADERS });
    if (request.method !== 'GET' && request.method !== 'HEAD') {
      return oauthError(405, 'invalid_request', `${request.method} is not supported here: use GET`, {
        Allow: 'GET, HEAD, OPTIONS',
      });
    }
    if (pathname === AUTHORIZATION_SERVER_METADATA_PATH)
      return json(oauth.authorizationServerMetadata(), 200, { 'Cache-Control': METADATA_CACHE });
    const svcId = pathname.startsWith(PROTECTED_RESOURCE_MCP_PREFIX)
      ? decodedSegment(pathname.slice(PROTECTED_RESOURCE_MCP_PREFIX.length))
      : '';
    if (!agentIdPattern.test(svcId)) {
      return oauthError(
        404,
        'not_found',
        `No protected resource here: the metadata of an agent's MCP endpoint is at ${PROTECTED_RESOURCE_MCP_PREFIX}{svc_id}`,
      );
    }
    return json(oauth.protectedResourceMetadata(svcId), 200, { 'Cache-Control': METADATA_CACHE });
  }

  /** `POST /oauth/register` (RFC 7591). */
  async function register(request: Request, clientAddress: string): Promise<Response> {
    const mediaType = request.headers.get('content-type')?.split(';')[0].trim().toLowerCase();
    if (mediaType !== 'application/json') {
      return oauthError(
        400,
        'invalid_client_metadata',
        'The client metadata must be sent as application/json (RFC 7591)',
      );
    }
    let body: unknown;
    try {
      body = JSON.parse(await request.text());
    } catch {
      return oauthError(400, 'invalid_client_metadata', 'The body is not valid JSON');
    }
    const result = await oauth.registerClient(body, clientAddress);
    if ('error' in result) return oauthError(400, result.error, result.error_description);
    return json(result, 201, { 'Cache-Control': 'no-store' });
  }

  return useOwnEndpoints({
    ours,
    answer,
    failure: (_request, error, requestId) => failure(error, logger, requestId),
    route: routeOf,
  });
}

const OAUTH_ENDPOINTS: ReadonlySet<string> = new Set(Object.values(OAUTH_PATHS));

/** Whether this edge serves `pathname`: the OAuth metadata documents and endpoints. */
const ours = (pathname: string) =>
  OAUTH_ENDPOINTS.has(pathname) ||
  pathname === AUTHORIZATION_SERVER_METADATA_PATH ||
  pathname.startsWith(PROTECTED_RESOURCE_METADATA_PREFIX);

/** The route pattern for logs and metrics: the agent's id is not part of it. */
const routeOf = (pathname: string) =>
  pathname.startsWith(PROTECTED_RESOURCE_MCP_PREFIX) ? `${PROTECTED_RESOURCE_MCP_PREFIX}:svc_id` : pathname;

/** A refusal by a rule (429) or a database that cannot be reached (503), in OAuth's format; never a stack. */
function failure(error: unknown, logger: Logger, requestId: string | undefined): Response {
  if (error instanceof AppError && error.code === 'POLICY_VIOLATION') {
    return oauthError(429, 'temporarily_unavailable', error.message, error.extensions.http?.headers ?? {});
  }
  logUnexpected(logger, error, { request_id: requestId }, 'OAuth request failed');
  if (isDatabaseUnavailable(error)) {
    return oauthError(503, 'temporarily_unavailable', 'The service cannot reach its database; retry shortly', {
      'Retry-After': String(DATABASE_RETRY_AFTER_SECONDS),
    });
  }
  return oauthError(500, 'server_error', 'An internal error occurred');
}
