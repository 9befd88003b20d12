/**
 * How the service serves the console (src/http/console.ts), without a browser: the index for every
 * console route with a strict CSP and revalidation, hashed assets cached for good and compressed,
 * 404 for anything not built, 405 for other methods; and CORS on the API closed to other origins
 * unless CORS_ALLOWED_ORIGINS names them. The browser tests are in console.e2e.test.ts.
 */
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { brotliDecompressSync, gunzipSync } from 'node:zlib';
import { createSchema, createYoga } from 'graphql-yoga';
import { CONSOLE_NOT_BUILT_MESSAGE, consoleIsBuilt, useConsole } from '../src/http/console.js';
import { startTestApp, type TestApp } from './support/app.js';
import { ensureConsoleBuilt } from './support/console.js';

let t: TestApp;

beforeAll(async () => {
  ensureConsoleBuilt();
  t = await startTestApp();
});

afterAll(async () => {
  await t.close();
});

/** The raw response, for bytes and encodings (t.request decodes text). */
const raw = (path: string, init: RequestInit = {}) =>
  t.app.yoga.fetch(`http://localhost${path}`, init, { clientAddress: '192.0.2.1' } as never);

async function assetPaths(): Promise<{ script: string; stylesheet: string }> {
  const html = await (await raw('/console')).text();
  const script = html.match(/<script type="module" src="(\/console\/assets\/[^"]+\.js)"/)?.[1];
  const stylesheet = html.match(/<link rel="stylesheet" href="(\/console\/assets\/[^"]+\.css)"/)?.[1];
  if (!script || !stylesheet) throw new Error(`the index names no script or stylesheet:\n${html}`);
  return { script, stylesheet };
}

test('the index page is served for /console and its client routes with a strict CSP and revalidation', async () => {
  const index = await raw('/console');
  expect(index.status).toBe(200);
  expect(index.headers.get('content-type')).toBe('text/html; charset=utf-8');
  expect(index.headers.get('cache-control')).toBe('no-cache');
  expect(index.headers.get('x-content-type-options')).toBe('nosniff');
  const csp = index.headers.get('content-security-policy') ?? '';
  const directives = new Map(
    csp
      .split(';')
      .map((d) => d.trim().split(/\s+/))
      .map(([name, ...values]) => [name, values]),
  );
  expect(directives.get('script-src')).toEqual(["'self'"]);
  expect(directives.get('style-src')).toEqual(["'self'"]);
  expect(directives.get('connect-src')).toEqual(["'self'"]);
  expect(directives.get('default-src')).toEqual(["'self'"]);
  expect(directives.get('frame-ancestors')).toEqual(["'none'"]);
  expect(directives.get('base-uri')).toEqual(["'none'"]);
  expect(csp).not.toContain('unsafe');
  const html = await index.text();
  // No inline script: every <script> has a src.
  expect(html.match(/<script\b[^>]*>/g)?.every((tag) => / src="/.test(tag))).toBe(true);

  for (const route of ['/console/', '/console/approvals', '/console/agents/']) {
    const page = await raw(route);
    expect([route, page.status, await page.text()]).toEqual([route, 200, html]);
  }

  const etag = index.headers.get('etag')!;
  expect(etag).toMatch(/^"[^"]+"$/);
  const again = await raw('/console', { headers: { 'if-none-match': etag } });
  expect(again.status).toBe(304);
  expect(await again.text()).toBe('');
});

test('hashed assets are immutable, compressed when accepted, and unknown files are 404', async () => {
  const { script, stylesheet } = await assetPaths();
  const plain = await raw(script, { headers: { 'accept-encoding': 'identity' } });
  expect(plain.status).toBe(200);
  expect(plain.headers.get('content-type')).toBe('text/javascript; charset=utf-8');
  expect(plain.headers.get('cache-control')).toBe('public, max-age=31536000, immutable');
  expect(plain.headers.get('content-encoding')).toBeNull();
  const bytes = Buffer.from(await plain.arrayBuffer());
  expect(bytes.length).toBe(Number(plain.headers.get('content-length')));

  const br = await raw(script, { headers: { 'accept-encoding': 'gzip, br' } });
  expect(br.headers.get('content-encoding')).toBe('br');
  expect(brotliDecompressSync(Buffer.from(await br.arrayBuffer())).equals(bytes)).toBe(true);
  const gz = await raw(script, { headers: { 'accept-encoding': 'gzip' } });
  expect(gz.headers.get('content-encoding')).toBe('gzip');
  expect(gunzipSync(Buffer.from(await gz.arrayBuffer())).equals(bytes)).toBe(true);
  expect(new Set([plain, br, gz].map((r) => r.headers.get('etag'))).size).toBe(3);

  const css = await raw(stylesheet);
  expect([css.status, css.headers.get('content-type')]).toEqual([200, 'text/css; charset=utf-8']);

  for (const missing of [
    '/console/assets/console-AAAAAAAA.js',
    '/console/assets/',
    '/console/favicon.ico',
    '/console/assets/..%2f..%2fpackage.json',
    '/console/assets/..%2Fbuild.json',
  ]) {
    const response = await raw(missing);
    const body = await response.json().catch(() => undefined);
    expect([missing, response.status, body?.error?.code]).toEqual([missing, 404, 'NOT_FOUND']);
  }
  // Dot segments are resolved by URL parsing before routing: this one asks for /package.json,
  // which is not a console path and not a file the service serves.
  const dotted = await raw('/console/assets/%2e%2e/%2e%2e/package.json');
  expect(dotted.status).toBe(404);
  expect(await dotted.text()).not.toContain('devDependencies');
});

test('HEAD answers like GET without a body; other methods are 405', async () => {
  const { script } = await assetPaths();
  const get = await raw(script, { headers: { 'accept-encoding': 'identity' } });
  const head = await raw(script, { method: 'HEAD', headers: { 'accept-encoding': 'identity' } });
  expect(head.status).toBe(200);
  expect(head.headers.get('content-length')).toBe(get.headers.get('content-length'));
  expect(await head.text()).toBe('');

  for (const method of ['POST', 'PUT', 'DELETE']) {
    const response = await raw('/console/approvals', { method, body: method === 'DELETE' ? undefined : '{}' });
    expect([method, response.status, response.headers.get('allow')]).toEqual([method, 405, 'GET, HEAD']);
    expect((await response.json()).error.code).toBe('METHOD_NOT_ALLOWED');
  }
});

test('an install without a console build says the console is off and how to get it: 503, not 500', async () => {
  const yoga = createYoga({
    schema: createSchema({ typeDefs: 'type Query { ok: Boolean }' }),
    plugins: [useConsole('/nonexistent/console-build/')],
  });
  for (const pathname of ['/console', '/console/approvals', '/console/assets/console-AAAA1111.js']) {
    const response = await yoga.fetch(`http://localhost${pathname}`);
    expect([pathname, response.status]).toEqual([pathname, 503]);
    const body = await response.json();
    expect(body.error.code).toBe('CONSOLE_NOT_BUILT');
    expect(body.error.message).toBe(CONSOLE_NOT_BUILT_MESSAGE);
  }
  // Plain about it: off in this install; built where the dev dependencies are, or the image.
  expect(CONSOLE_NOT_BUILT_MESSAGE).toMatch(/^The operator console is off: it was not built in this install/);
  expect(CONSOLE_NOT_BUILT_MESSAGE).toContain('npm ci, then npm run build:console');
  expect(CONSOLE_NOT_BUILT_MESSAGE).toContain('Docker image');
  // What start-up looks at before it advertises /console (src/main.ts).
  expect(consoleIsBuilt('/nonexistent/console-build/')).toBe(false);
  expect(consoleIsBuilt()).toBe(true);
});

test('a rebuild beside a running service is served from the next page load on; files without compressed copies go as they are', async () => {
  const dir = `${await mkdtemp(path.join(tmpdir(), 'console-build-'))}/`;
  /** A build as scripts/build-console.mjs lays it out, with one script and no compressed copies. */
  const writeBuild = async (script: string, content: string) => {
    await rm(`${dir}assets`, { recursive: true, force: true });
    await mkdir(`${dir}assets`);
    await writeFile(`${dir}assets/${script}`, content);
    await writeFile(`${dir}index.html`, `<script type="module" src="/console/assets/${script}"></script>`);
    await writeFile(
      `${dir}build.json`,
      JSON.stringify({ inputs: script, files: { 'index.html': {}, [`assets/${script}`]: {} } }),
    );
  };
  const yoga = createYoga({
    schema: createSchema({ typeDefs: 'type Query { ok: Boolean }' }),
    plugins: [useConsole(dir)],
  });
  const get = (pathname: string) =>
    yoga.fetch(`http://localhost${pathname}`, { headers: { 'accept-encoding': 'br, gzip' } });
  try {
    await writeBuild('console-AAAA1111.js', 'first build');
    expect(await (await get('/console')).text()).toContain('console-AAAA1111.js');
    const first = await get('/console/assets/console-AAAA1111.js');
    expect([first.status, first.headers.get('content-encoding'), await first.text()]).toEqual([
      200,
      null,
      'first build',
    ]);

    await writeBuild('console-BBBB2222.js', 'second build');
    // An asset request does not look for a new build (no read per asset) …
    expect((await get('/console/assets/console-BBBB2222.js')).status).toBe(404);
    // … a page load does, and then serves the new files only.
    expect(await (await get('/console/approvals')).text()).toContain('console-BBBB2222.js');
    expect(await (await get('/console/assets/console-BBBB2222.js')).text()).toBe('second build');
    expect((await get('/console/assets/console-AAAA1111.js')).status).toBe(404);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

describe('CORS on the API', () => {
  const preflight = (app: TestApp, origin: string) =>
    app.request('OPTIONS', '/graphql', {
      headers: {
        origin,
        'access-control-request-method': 'POST',
        'access-control-request-headers': 'authorization, content-type',
      },
    });

  test('is closed to other origins by default: no Access-Control-Allow-Origin on preflights or answers', async () => {
    const origin = 'https://elsewhere.example';
    const options = await preflight(t, origin);
    expect(options.headers.get('access-control-allow-origin')).toBeNull();
    const post = await t.request('POST', '/graphql', { headers: { origin }, body: { query: '{ __typename }' } });
    expect(post.status).toBe(200);
    expect(post.headers.get('access-control-allow-origin')).toBeNull();
    const rest = await t.request('GET', '/api/v1/agents', { headers: { origin } });
    expect(rest.headers.get('access-control-allow-origin')).toBeNull();
  });

  test('CORS_ALLOWED_ORIGINS opens it to exactly the origins named', async () => {
    const allowed = 'https://dashboard.example';
    const open = await startTestApp({ CORS_ALLOWED_ORIGINS: allowed }, { db: t.database.db });
    try {
      const yes = await preflight(open, allowed);
      expect(yes.headers.get('access-control-allow-origin')).toBe(allowed);
      expect(yes.headers.get('access-control-allow-credentials')).toBeNull();
      const no = await preflight(open, 'https://elsewhere.example');
      expect(no.headers.get('access-control-allow-origin')).not.toBe('https://elsewhere.example');
      const post = await open.request('POST', '/graphql', {
        headers: { origin: allowed },
        body: { query: '{ __typename }' },
      });
      expect(post.headers.get('access-control-allow-origin')).toBe(allowed);
    } finally {
      await open.app.stop();
    }
  });

  test('a CORS_ALLOWED_ORIGINS entry that is not an origin stops the start', async () => {
    await expect(
      startTestApp({ CORS_ALLOWED_ORIGINS: 'https://dashboard.example/' }, { db: t.database.db }),
    ).rejects.toThrow(/CORS_ALLOWED_ORIGINS: "https:\/\/dashboard.example\/" is not an origin/);
  });
});
