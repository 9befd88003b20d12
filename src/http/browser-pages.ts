import { Response } from '../api/fetch-api.js';
import { type ErrorCode, errorStatus } from '../errors.js';
import { CONSOLE_CSP, CONSOLE_PATH } from './console.js';
import { errorBody } from './envelope.js';

/**
 * What the service's own browser pages share (the OAuth authorization endpoint's refusals, single
 * sign-on's start and callback): headers that keep them out of frames, caches and Referers, and
 * the small text helpers they are built with.
 */

/** Never framed, nothing loaded but from this origin, never cached, no Referer onwards. */
export const PAGE_HEADERS = {
  'Content-Security-Policy': CONSOLE_CSP,
  'X-Frame-Options': 'DENY',
  'X-Content-Type-Options': 'nosniff',
  'Referrer-Policy': 'no-referrer',
  'Cache-Control': 'no-store',
};

export const escapeHtml = (text: string) => text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

/** A path segment decoded, or '' when its escapes are malformed (it then names nothing). */
export function decodedSegment(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    return '';
  }
}

/** The value of a request's cookie `name`. */
export function cookieOf(request: Request, name: string): string | undefined {
  for (const part of (request.headers.get('cookie') ?? '').split(';')) {
    const [key, ...value] = part.trim().split('=');
    if (key === name) return value.join('=');
  }
  return undefined;
}

/**
 * A refusal before anyone else is involved (single sign-on's start, a tool connection's link): a
 * short page to a person, the API's error JSON to a program.
 */
export function refusalPage(
  request: Request,
  code: ErrorCode,
  message: string,
  page: { title: string; heading: string },
  headers: Record<string, string> = {},
): Response {
  const status = errorStatus[code];
  if (!request.headers.get('accept')?.includes('text/html')) {
    return Response.json(errorBody({ code, message, details: {} }), {
      status,
      headers: { ...PAGE_HEADERS, ...headers },
    });
  }
  const html =
    `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>${escapeHtml(page.title)} · Agent Gateway</title></head>` +
    `<body><h1>${escapeHtml(page.heading)}</h1><p>${escapeHtml(message)}</p>` +
    `<p><a href="${CONSOLE_PATH}">Back to the console</a></p></body></html>`;
  return new Response(html, {
    status,
    headers: { ...PAGE_HEADERS, ...headers, 'Content-Type': 'text/html; charset=utf-8' },
  });
}
