import { CONSOLE_CSP } from './console.js';

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
