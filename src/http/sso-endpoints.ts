import type { Plugin } from 'graphql-yoga';
import type { Logger } from 'pino';
import { isDatabaseUnavailable } from '../db/unavailable.js';
import { AppError, DATABASE_RETRY_AFTER_SECONDS, type ErrorCode } from '../errors.js';
import { logUnexpected } from '../logger.js';
import type { SsoRefusal } from '../modules/sso/sso-identity.js';
import { isRefusal } from '../modules/sso/sso-identity.js';
import {
  SSO_CALLBACK_PATH,
  SSO_LOGIN_TTL_SECONDS,
  SSO_START_PREFIX,
  type SsoCallbackParams,
  type SsoService,
} from '../modules/sso/sso.service.js';
import { cookieOf, decodedSegment, PAGE_HEADERS, refusalPage as pageOf } from './browser-pages.js';
import { CONSOLE_PATH } from './console.js';
import { Response } from '../api/fetch-api.js';
import { useOwnEndpoints } from './own-endpoints.js';
import type { ServerContext } from './lifecycle.js';

/**
 * The browser's side of operators' single sign-on (docs/decisions/0061-operator-single-sign-on.md):
 * `GET /auth/sso/{org_slug}` sends the browser to the org's provider, `GET /auth/sso/callback`
 * takes its answer and sends the browser to the console, `/console/sso#code=…` or `#error=…&
 * error_description=…` (a fragment: it never reaches a server or a Referer). A cookie, set by
 * the first and read by the second, ties the answer to the browser that asked: a sign-in link
 * taken from someone else's browser signs in no one.
 */

/** Where the callback sends the browser: the console page that exchanges the code. */
export const SSO_CONSOLE_PATH = `${CONSOLE_PATH}/sso`;
const BROWSER_COOKIE = 'agw_sso';
const ssoPage = { title: 'Single sign-on', heading: 'Single sign-on cannot start' };
const refusalPage = (request: Request, code: ErrorCode, message: string, headers: Record<string, string> = {}) =>
  pageOf(request, code, message, ssoPage, headers);

/** How a refusal to start reads to a program: an org without single sign-on, or a provider that cannot be read. */
const startRefusalCode = (refusal: SsoRefusal): ErrorCode =>
  refusal.code === 'sso_not_configured' ? 'NOT_FOUND' : 'SERVICE_UNAVAILABLE';

interface SsoEndpointDeps {
  sso: SsoService;
  publicUrl: string;
  logger: Logger;
}

export function useSsoEndpoints({ sso, publicUrl, logger }: SsoEndpointDeps): Plugin<{}, ServerContext> {
  // Secure when the service is reached over https (a plain-http PUBLIC_URL is a local setup).
  const secure = publicUrl.startsWith('https:') ? '; Secure' : '';
  // Lax: the provider sends the browser back with a top-level GET, which Lax lets the cookie ride.
  const cookieAttributes = `Path=${SSO_CALLBACK_PATH}; HttpOnly; SameSite=Lax${secure}`;
  const setCookie = (value: string) =>
    `${BROWSER_COOKIE}=${value}; Max-Age=${SSO_LOGIN_TTL_SECONDS}; ${cookieAttributes}`;
  const clearCookie = `${BROWSER_COOKIE}=; Max-Age=0; ${cookieAttributes}`;

  const toConsole = (fragment: Record<string, string>) =>
    new Response(null, {
      status: 302,
      headers: {
        ...PAGE_HEADERS,
        Location: `${SSO_CONSOLE_PATH}#${new URLSearchParams(fragment).toString()}`,
        'Set-Cookie': clearCookie,
      },
    });

  async function start(request: Request, slug: string, clientAddress: string): Promise<Response> {
    const outcome = await sso.start(slug, clientAddress);
    if (isRefusal(outcome)) return refusalPage(request, startRefusalCode(outcome), outcome.description);
    return new Response(null, {
      status: 302,
      headers: { ...PAGE_HEADERS, Location: outcome.redirect, 'Set-Cookie': setCookie(outcome.browserSecret) },
    });
  }

  async function callback(request: Request, url: URL): Promise<Response> {
    const params: SsoCallbackParams = {};
    for (const name of ['state', 'code', 'error', 'error_description', 'iss'] as const) {
      const values = url.searchParams.getAll(name);
      if (values.length > 1)
        return toConsole({ error: 'invalid_request', error_description: `The parameter ${name} is repeated` });
      if (values.length === 1) params[name] = values[0];
    }
    const outcome = await sso.callback(params, cookieOf(request, BROWSER_COOKIE));
    if (isRefusal(outcome)) return toConsole({ error: outcome.code, error_description: outcome.description });
    return toConsole({ code: outcome.code });
  }

  async function answer(request: Request, url: URL, clientAddress: string): Promise<Response> {
    // GET only, HEAD included: both steps have effects (a stored sign-in, a used state), and a
    // link checker's HEAD must not use up the state the browser's GET brings back.
    if (request.method !== 'GET') {
      return refusalPage(request, 'METHOD_NOT_ALLOWED', `${request.method} is not supported here: use GET`, {
        Allow: 'GET',
      });
    }
    if (url.pathname === SSO_CALLBACK_PATH) return callback(request, url);
    return start(request, decodedSegment(url.pathname.slice(SSO_START_PREFIX.length)), clientAddress);
  }

  return useOwnEndpoints({
    ours,
    answer,
    failure: (request, error, requestId) => failure(request, error, logger, requestId),
    route: (pathname) => (pathname === SSO_CALLBACK_PATH ? SSO_CALLBACK_PATH : `${SSO_START_PREFIX}:org_slug`),
  });
}

/** `/auth/sso/callback` and `/auth/sso/{org_slug}`: one segment after the prefix (`exchange` is the API's, under /api/v1). */
const ours = (pathname: string) =>
  pathname.startsWith(SSO_START_PREFIX) && !pathname.slice(SSO_START_PREFIX.length).includes('/');

/** A refusal by a rule (429) or a database that cannot be reached (503); never a stack. */
function failure(request: Request, error: unknown, logger: Logger, requestId: string | undefined): Response {
  if (error instanceof AppError && error.code === 'POLICY_VIOLATION') {
    return refusalPage(request, error.code, error.message, error.extensions.http?.headers ?? {});
  }
  logUnexpected(logger, error, { request_id: requestId }, 'single sign-on request failed');
  if (isDatabaseUnavailable(error)) {
    return refusalPage(request, 'SERVICE_UNAVAILABLE', 'The service cannot reach its database; retry shortly', {
      'Retry-After': String(DATABASE_RETRY_AFTER_SECONDS),
    });
  }
  return refusalPage(request, 'INTERNAL_ERROR', 'An internal error occurred');
}
