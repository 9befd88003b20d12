/**
 * The operator console at /console: the files scripts/build-console.mjs wrote to console/dist/.
 *
 * - `/console` and every `/console/<page>` (the console's own routes) answer the index page with
 *   `Cache-Control: no-cache` and an ETag, so a browser revalidates it and sees a new build at once.
 * - `/console/assets/<name>-<hash>.<ext>` answers the built file with a year of immutable caching:
 *   its name changes whenever its content does. Any other asset name is a 404; a path is only
 *   ever looked up in the map of built files, never joined onto a directory, so nothing outside
 *   the build can be reached.
 * - Brotli or gzip (precompressed by the build) after `Accept-Encoding`; HEAD like GET without the
 *   body; other methods 405.
 * - Every answer carries a strict Content-Security-Policy: scripts, styles and connections only
 *   from this origin, no inline script or style, no framing.
 *
 * The files are read on the first request and kept (about 80 KB with both compressions), and read
 * again when a page load finds a new build.json. An install without a build (a production install
 * from a checkout: building needs the dev dependencies) has the console off: /console answers 503
 * `CONSOLE_NOT_BUILT` saying so and how to get it, and start-up does not advertise it; a build
 * made later beside the running service is served from the next request on.
 */
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import type { Plugin } from 'graphql-yoga';
import { Response } from '../api/fetch-api.js';
import { chooseEncoding } from './graphiql-page.js';
import { currentRequest } from './request-state.js';

export const CONSOLE_PATH = '/console';
const ASSETS_PREFIX = `${CONSOLE_PATH}/assets/`;
/** Two levels up from src/http/ and from dist/http/ alike. */
const DEFAULT_BUILD_DIR = fileURLToPath(new URL('../../console/dist/', import.meta.url));

export const CONSOLE_NOT_BUILT_MESSAGE =
  'The operator console is off: it was not built in this install (console/dist/ is missing). To get it, ' +
  'build it where the dev dependencies are installed (npm ci, then npm run build:console; a running service ' +
  'serves the build without a restart), or run the Docker image, which includes it.';

/** Whether `buildDir` holds a complete console build: build.json is written after every file it lists. */
export function consoleIsBuilt(buildDir: string = DEFAULT_BUILD_DIR): boolean {
  return existsSync(`${buildDir}build.json`);
}

export const CONSOLE_CSP = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self'",
  "font-src 'self'",
  "connect-src 'self'",
  "object-src 'none'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join('; ');

const SECURITY_HEADERS: Record<string, string> = {
  'Content-Security-Policy': CONSOLE_CSP,
  'X-Content-Type-Options': 'nosniff',
  'X-Frame-Options': 'DENY',
  'Referrer-Policy': 'no-referrer',
  'Cross-Origin-Opener-Policy': 'same-origin',
};

const CONTENT_TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.woff2': 'font/woff2',
};

type Encoding = 'br' | 'gzip' | 'identity';

interface BuiltFile {
  type: string;
  /** Bytes and strong ETag per encoding; identity always, br and gzip when the build wrote them. */
  variants: Map<Encoding, { body: Buffer; etag: string }>;
}

interface ConsoleBuild {
  /** The text of the build.json it was read from. */
  stamp: string;
  index: BuiltFile;
  /** By path under /console/ (`assets/console-AB12CD34.js`). */
  assets: Map<string, BuiltFile>;
}

async function readBuiltFile(dir: string, file: string): Promise<BuiltFile> {
  const extension = file.slice(file.lastIndexOf('.'));
  const identity = await readFile(`${dir}${file}`);
  const hash = createHash('sha256').update(identity).digest('base64url').slice(0, 22);
  const variants: BuiltFile['variants'] = new Map([['identity', { body: identity, etag: `"${hash}"` }]]);
  for (const [encoding, suffix] of [
    ['br', '.br'],
    ['gzip', '.gz'],
  ] as const) {
    const body = await readFile(`${dir}${file}${suffix}`).catch(() => undefined);
    if (body) variants.set(encoding, { body, etag: `"${hash}-${encoding}"` });
  }
  return { type: CONTENT_TYPES[extension] ?? 'application/octet-stream', variants };
}

async function loadBuild(dir: string): Promise<ConsoleBuild> {
  // build.json is written last, after every file it lists: its presence means a complete build.
  const stamp = await readFile(`${dir}build.json`, 'utf8');
  const { files } = JSON.parse(stamp) as { files: Record<string, unknown> };
  const assets = new Map<string, BuiltFile>();
  for (const file of Object.keys(files)) {
    if (file.startsWith('assets/')) assets.set(file, await readBuiltFile(dir, file));
  }
  return { stamp, index: await readBuiltFile(dir, 'index.html'), assets };
}

/** ETags of If-None-Match (weak comparison); `*` matches any. */
function matches(ifNoneMatch: string, etag: string): boolean {
  return ifNoneMatch.split(',').some((tag) => {
    const t = tag.trim();
    return t === '*' || t.replace(/^W\//, '') === etag;
  });
}

function errorResponse(status: number, code: string, message: string, headers: Record<string, string> = {}): Response {
  return Response.json(
    { error: { code, message, details: {} } },
    { status, headers: { ...SECURITY_HEADERS, ...headers } },
  );
}

function fileResponse(request: Request, file: BuiltFile, cacheControl: string): Response {
  const wanted = chooseEncoding(request.headers.get('accept-encoding'));
  const encoding: Encoding = file.variants.has(wanted) ? wanted : 'identity';
  const { body, etag } = file.variants.get(encoding)!;
  const headers: Record<string, string> = {
    ...SECURITY_HEADERS,
    'Cache-Control': cacheControl,
    ETag: etag,
    Vary: 'Accept-Encoding',
  };
  const ifNoneMatch = request.headers.get('if-none-match');
  if (ifNoneMatch && matches(ifNoneMatch, etag)) return new Response(null, { status: 304, headers });
  if (encoding !== 'identity') headers['Content-Encoding'] = encoding;
  headers['Content-Type'] = file.type;
  headers['Content-Length'] = String(body.length);
  const payload =
    request.method === 'HEAD'
      ? null
      : (new Uint8Array(body.buffer, body.byteOffset, body.length) as Uint8Array<ArrayBuffer>);
  return new Response(payload, { status: 200, headers });
}

export function useConsole(buildDir: string = DEFAULT_BUILD_DIR): Plugin {
  let build: Promise<ConsoleBuild> | undefined;
  const load = async (recheck: boolean) => {
    if (build && recheck) {
      // A page load looks whether the console was rebuilt since (`npm run build:console` beside a
      // running service): one small read per page, none per asset. Unreadable (a build being
      // swapped in) keeps what is loaded.
      const stamp = await readFile(`${buildDir}build.json`, 'utf8').catch(() => undefined);
      if (stamp !== undefined && stamp !== (await build.catch(() => undefined))?.stamp) build = undefined;
    }
    if (!build) {
      const loading = loadBuild(buildDir);
      build = loading;
      // Not kept when it fails: a build made after the start is picked up by the next request.
      loading.catch(() => {
        if (build === loading) build = undefined;
      });
    }
    return build;
  };

  return {
    async onRequest({ request, url, endResponse }) {
      const { pathname } = url;
      if (pathname !== CONSOLE_PATH && !pathname.startsWith(`${CONSOLE_PATH}/`)) return;
      const isAsset = pathname.startsWith(ASSETS_PREFIX);
      // Two route patterns for logs and metrics, whatever the page or file (labels carry no names).
      const state = currentRequest();
      if (state) state.route = `${request.method} ${isAsset ? `${ASSETS_PREFIX}:file` : CONSOLE_PATH}`;

      if (request.method !== 'GET' && request.method !== 'HEAD') {
        return endResponse(
          errorResponse(405, 'METHOD_NOT_ALLOWED', `${request.method} is not allowed on the console; use GET`, {
            Allow: 'GET, HEAD',
          }),
        );
      }
      let loaded: ConsoleBuild;
      try {
        loaded = await load(!isAsset);
      } catch {
        return endResponse(errorResponse(503, 'CONSOLE_NOT_BUILT', CONSOLE_NOT_BUILT_MESSAGE));
      }
      if (isAsset) {
        const file = loaded.assets.get(pathname.slice(CONSOLE_PATH.length + 1));
        if (!file) return endResponse(errorResponse(404, 'NOT_FOUND', 'No such console asset'));
        return endResponse(fileResponse(request, file, 'public, max-age=31536000, immutable'));
      }
      // Console pages are words (`/console/approvals`); a file name elsewhere is not one of them.
      if (/\.[^/]*$/.test(pathname)) return endResponse(errorResponse(404, 'NOT_FOUND', 'No such console file'));
      endResponse(fileResponse(request, loaded.index, 'no-cache'));
    },
  };
}
