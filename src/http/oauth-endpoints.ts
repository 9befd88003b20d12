import type { Plugin } from 'graphql-yoga';
import type { Logger } from 'pino';
import { isDatabaseUnavailable } from '../db/unavailable.js';
import { AppError, DATABASE_RETRY_AFTER_SECONDS } from '../errors.js';
import { logUnexpected } from '../logger.js';
import { agentIdPattern } from '../modules/manifest/manifest-document.js';
import { AUTHORIZATION_SERVER_METADATA_PATH, OAUTH_PATHS, PROTECTED_RESOURCE_METADATA_PREFIX } from '../modules/oauth/oauth-metadata.js';
import type { OAuthService } from '../modules/oauth/oauth.service.js';
import { Response } from './fetch-api.js';
import type { ServerContext } from './lifecycle.js';

/**
 * The OAuth edge of the MCP endpoints (docs/decisions/0047-mcp-oauth.md): the metadata documents
 * and client registration. OAuth fixes its own wire: errors are `{error, error_description}`
 * (RFC 6749 §5.2, RFC 7591 §3.2.2), not the API's envelopes. These answers carry no ambient
 * authority (nothing here reads a cookie or a token), so any origin may read them: MCP clients
 * that run in a browser (the MCP Inspector) discover and register from their own origin.
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

type OAuthErrorCode = 'invalid_request' | 'invalid_client_metadata' | 'invalid_redirect_uri' | 'temporarily_unavailable' | 'server_error' | 'not_found';

export function oauthError(status: number, error: OAuthErrorCode, description: string, headers: Record<string, string> = {}): Response {
  return Response.json(
    { error, error_description: description },
    { status, headers: { ...CORS_HEADERS, 'Cache-Control': 'no-store', ...headers } },
  );
}

const json = (body: unknown, status = 200, headers: Record<string, string> = {}) =>
  Response.json(body, { status, headers: { ...CORS_HEADERS, ...headers } });

interface OAuthEndpointDeps {
  oauth: OAuthService;
  logger: Logger;
}

export function useOAuthEndpoints({ oauth, logger }: OAuthEndpointDeps): Plugin<{}, ServerContext> {
  /** The answer of a path this edge serves (`ours`). */
  async function answer(request: Request, pathname: string, clientAddress: string): Promise<Response> {
    const isMetadata = pathname !== OAUTH_PATHS.register;
    if (request.method === 'OPTIONS') return new Response(null, { status: 204, headers: CORS_HEADERS });
    if (isMetadata) {
      if (request.method !== 'GET' && request.method !== 'HEAD') {
        return oauthError(405, 'invalid_request', `${request.method} is not supported here: use GET`, { Allow: 'GET, HEAD, OPTIONS' });
      }
      if (pathname === AUTHORIZATION_SERVER_METADATA_PATH) return json(oauth.authorizationServerMetadata(), 200, { 'Cache-Control': METADATA_CACHE });
      const svcId = pathname.startsWith(PROTECTED_RESOURCE_MCP_PREFIX) ? safeDecode(pathname.slice(PROTECTED_RESOURCE_MCP_PREFIX.length)) : '';
      if (!agentIdPattern.test(svcId)) {
        return oauthError(404, 'not_found', `No protected resource here: the metadata of an agent's MCP endpoint is at ${PROTECTED_RESOURCE_MCP_PREFIX}{svc_id}`);
      }
      return json(oauth.protectedResourceMetadata(svcId), 200, { 'Cache-Control': METADATA_CACHE });
    }
    if (request.method !== 'POST') {
      return oauthError(405, 'invalid_request', `${request.method} is not supported here: register with POST`, { Allow: 'POST, OPTIONS' });
    }
    const mediaType = request.headers.get('content-type')?.split(';')[0].trim().toLowerCase();
    if (mediaType !== 'application/json') {
      return oauthError(400, 'invalid_client_metadata', 'The client metadata must be sent as application/json (RFC 7591)');
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

  return {
    // Synchronous for every other path: the gateway's requests pass here and pay no promise for it.
    onRequest({ request, url, serverContext, endResponse }) {
      if (!ours(url.pathname)) return;
      const state = serverContext.state;
      return answer(request, url.pathname, state?.clientAddress ?? 'unknown').then(
        (response) => respond(response),
        (error: unknown) => respond(failure(error, logger, state?.requestId)),
      );
      function respond(response: Response) {
        if (state) state.route = `${request.method} ${routeOf(url.pathname)}`;
        endResponse(response);
      }
    },
  };
}

/** Whether this edge serves `pathname`: the OAuth metadata documents and client registration. */
const ours = (pathname: string) =>
  pathname === OAUTH_PATHS.register || pathname === AUTHORIZATION_SERVER_METADATA_PATH || pathname.startsWith(PROTECTED_RESOURCE_METADATA_PREFIX);

/** The route pattern for logs and metrics: the agent's id is not part of it. */
const routeOf = (pathname: string) => (pathname.startsWith(PROTECTED_RESOURCE_MCP_PREFIX) ? `${PROTECTED_RESOURCE_MCP_PREFIX}:svc_id` : pathname);

function safeDecode(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    return '';
  }
}

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
