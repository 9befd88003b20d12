import type { Plugin } from 'graphql-yoga';
import type { Logger } from 'pino';
import { isDatabaseUnavailable } from '../db/unavailable.js';
import { DATABASE_RETRY_AFTER_SECONDS } from '../errors.js';
import { logUnexpected } from '../logger.js';
import {
  CONNECTION_STATE_TTL_SECONDS,
  UPSTREAM_CALLBACK_PATH,
  UPSTREAM_CLIENT_DOCUMENT_PATH,
  UPSTREAM_START_PATH,
  upstreamClientMetadataDocument,
} from '../modules/tool/tool-connections.service.js';
import type { ToolService } from '../modules/tool/tool.service.js';
import { Response } from '../api/fetch-api.js';
import { cookieOf, PAGE_HEADERS, refusalPage } from './browser-pages.js';
import { useOwnEndpoints } from './own-endpoints.js';
import type { ServerContext } from './lifecycle.js';

/**
 * The browser's side of tools' OAuth connections (docs/decisions/0068-upstream-connections.md):
 * `GET /oauth/upstream/start?state=…` (where a connection's `authorization_url` points) binds the
 * authorization to the browser that opens it first, with a cookie, and sends it to the upstream's
 * authorization server; `GET /oauth/upstream/callback` takes the server's answer from that browser
 * and sends it to the console's tool page (`/console/tools/<tool_id>?connection=…&result=…`).
 * `GET /oauth/upstream-client.json` is the gateway's Client ID Metadata Document for those servers.
 */

const BROWSER_COOKIE = 'agw_upstream';
/** The document changes only with PUBLIC_URL: a server may keep it a while. */
const DOCUMENT_CACHE = 'public, max-age=300';
const PATHS: ReadonlySet<string> = new Set([
  UPSTREAM_START_PATH,
  UPSTREAM_CALLBACK_PATH,
  UPSTREAM_CLIENT_DOCUMENT_PATH,
]);

interface UpstreamOAuthEndpointDeps {
  tools: Pick<ToolService, 'startUpstreamAuthorization' | 'finishUpstreamAuthorization'>;
  publicUrl: string;
  logger: Logger;
}

const page = { title: 'Connecting a tool', heading: 'The tool cannot be connected' };

export function useUpstreamOAuthEndpoints({
  tools,
  publicUrl,
  logger,
}: UpstreamOAuthEndpointDeps): Plugin<{}, ServerContext> {
  // Secure when the service is reached over https (a plain-http PUBLIC_URL is a local setup).
  const secure = publicUrl.startsWith('https:') ? '; Secure' : '';
  // Lax: the authorization server sends the browser back with a top-level GET, which Lax lets it ride.
  const setCookie = (value: string) =>
    `${BROWSER_COOKIE}=${value}; Max-Age=${CONNECTION_STATE_TTL_SECONDS}; Path=/oauth/upstream; HttpOnly; SameSite=Lax${secure}`;
  const document = JSON.stringify(upstreamClientMetadataDocument(publicUrl));

  async function start(request: Request, url: URL): Promise<Response> {
    const states = url.searchParams.getAll('state');
    const outcome = await tools.startUpstreamAuthorization(
      states.length === 1 ? states[0] : undefined,
      cookieOf(request, BROWSER_COOKIE),
    );
    if ('refused' in outcome) return refusalPage(request, 'BAD_REQUEST', outcome.refused, page);
    return new Response(null, {
      status: 302,
      headers: { ...PAGE_HEADERS, Location: outcome.redirect, 'Set-Cookie': setCookie(outcome.browserSecret) },
    });
  }

  async function callback(request: Request, url: URL): Promise<Response> {
    const { location } = await tools.finishUpstreamAuthorization(
      url.search.slice(1),
      cookieOf(request, BROWSER_COOKIE),
    );
    return new Response(null, { status: 302, headers: { ...PAGE_HEADERS, Location: location } });
  }

  async function answer(request: Request, url: URL): Promise<Response> {
    if (url.pathname === UPSTREAM_CLIENT_DOCUMENT_PATH && (request.method === 'GET' || request.method === 'HEAD')) {
      return new Response(request.method === 'HEAD' ? null : document, {
        headers: { 'Content-Type': 'application/json', 'Cache-Control': DOCUMENT_CACHE },
      });
    }
    // GET only, HEAD included: both steps have effects (a browser bound, a state used), and a link
    // checker's HEAD must not use them up.
    if (request.method !== 'GET') {
      const allow = url.pathname === UPSTREAM_CLIENT_DOCUMENT_PATH ? 'GET, HEAD' : 'GET';
      return refusalPage(request, 'METHOD_NOT_ALLOWED', `${request.method} is not supported here: use GET`, page, {
        Allow: allow,
      });
    }
    return url.pathname === UPSTREAM_START_PATH ? start(request, url) : callback(request, url);
  }

  return useOwnEndpoints({
    ours: (pathname) => PATHS.has(pathname),
    answer,
    failure: (request, error, requestId) => {
      logUnexpected(logger, error, { request_id: requestId }, 'tool connection request failed');
      if (isDatabaseUnavailable(error)) {
        return refusalPage(
          request,
          'SERVICE_UNAVAILABLE',
          'The service cannot reach its database; retry shortly',
          page,
          {
            'Retry-After': String(DATABASE_RETRY_AFTER_SECONDS),
          },
        );
      }
      return refusalPage(request, 'INTERNAL_ERROR', 'An internal error occurred', page);
    },
    route: (pathname) => pathname,
  });
}
