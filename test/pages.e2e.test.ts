/**
 * The service's pages in a real browser (Debian's Chromium, driven by playwright-core) against
 * the real service on a real port: Swagger UI at /docs, ReDoc at /redoc, GraphiQL at /graphql and
 * the console at /console load everything from the service's own origin (an operator's browser
 * may reach nothing else, and should tell nobody else it opened them) and nothing they load fails,
 * the icon a browser looks for included.
 *
 * The pages are opened at http://gateway.test:<port>, resolved by Chromium to 127.0.0.1: Swagger
 * UI skips its online validator badge (an image from validator.swagger.io) on a host named
 * localhost or 127.0.0.1, so only a host named otherwise shows whether it is switched off.
 */
import { mkdirSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { chromium, type Browser, type BrowserContext, type Page, type Request } from 'playwright-core';
import { startTestApp, type TestApp } from './support/app.js';
import { ARTIFACTS_DIR, ensureConsoleBuilt, findChromium } from './support/console.js';
import { signUp } from './support/fixtures.js';
import { execute, readyAgent } from './support/gateway.js';
import { testWith } from './support/optional-programs.js';

const chromiumPath = findChromium();
/** Skipped without Chromium (hooks of a file whose tests are all skipped do not run). */
const browserTest = testWith(chromiumPath);
/** Room for settle()'s own deadline when the rest of the suite loads the machine. */
const test = (name: string, fn: () => Promise<void>) => browserTest(name, fn, 120_000);

const HOST = 'gateway.test';

let t: TestApp;
let server: Server;
let base: string;
let browser: Browser;
const contexts: BrowserContext[] = [];
/** Every request the service answered, as the server saw it (the browser's own favicon fetches included). */
const answered: Array<{ url: string; status: number }> = [];

beforeAll(async () => {
  ensureConsoleBuilt();
  mkdirSync(ARTIFACTS_DIR, { recursive: true });
  server = createServer((request, response) => {
    response.on('finish', () => answered.push({ url: request.url ?? '', status: response.statusCode }));
    void t.app.yoga(request, response);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://${HOST}:${(server.address() as AddressInfo).port}`;
  // The address the OpenAPI document names: where Swagger UI's "Try it out" sends its requests.
  t = await startTestApp({ PUBLIC_URL: base });
  browser = await chromium.launch({
    executablePath: chromiumPath,
    // --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start. Every other name
    // resolves to nothing, so a request elsewhere fails fast instead of waiting on the network.
    args: ['--no-sandbox', `--host-resolver-rules=MAP ${HOST} 127.0.0.1, MAP * ~NOTFOUND`, '--no-proxy-server'],
  });
}, 90_000);

afterEach(async () => {
  await Promise.all(contexts.splice(0).map((context) => context.close()));
});

afterAll(async () => {
  await browser?.close();
  if (server) await new Promise((resolve) => server.close(resolve));
  await t?.close();
});

interface Visit {
  page: Page;
  /** Every URL the page asked for, in order. */
  requests: string[];
  /** What answered 400 or more, or never answered. */
  failures: string[];
  /** The page's requests to a server still under way. */
  pending: Set<Request>;
}

async function open(pathname: string): Promise<Visit> {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  contexts.push(context);
  const page = await context.newPage();
  const visit: Visit = { page, requests: [], failures: [], pending: new Set() };
  page.on('request', (request) => {
    visit.requests.push(request.url());
    if (!isInMemory(request.url())) visit.pending.add(request);
  });
  page.on('requestfinished', (request) => visit.pending.delete(request));
  page.on('response', (response) => {
    if (response.status() >= 400) visit.failures.push(`${response.status()} ${response.url()}`);
  });
  page.on('requestfailed', (request) => {
    visit.pending.delete(request);
    visit.failures.push(`${request.failure()?.errorText} ${request.url()}`);
  });
  answered.length = 0;
  await page.goto(`${base}${pathname}`);
  return visit;
}

/**
 * data: and blob: URLs load from the page's memory. Chromium sometimes never reports the end of a
 * blob: worker script GraphiQL starts (seen under load), which kept 'networkidle' from ever coming.
 */
const isInMemory = (url: string) => url.startsWith('data:') || url.startsWith('blob:');

const QUIET_MS = 500;
const SETTLE_TIMEOUT_MS = 60_000;

/**
 * Waits until none of the page's requests to a server has been under way for QUIET_MS: late
 * requests (images, workers, the icon) are in. Counted from the page's own request events rather
 * than Playwright's 'networkidle', which counts in-memory loads too (see isInMemory) and, when it
 * never comes, does not say what is still loading: this names it.
 */
async function settle({ page, pending }: Visit) {
  const deadline = Date.now() + SETTLE_TIMEOUT_MS;
  let quietSince = Date.now();
  while (Date.now() - quietSince < QUIET_MS) {
    if (Date.now() > deadline) {
      throw new Error(
        `still loading after ${SETTLE_TIMEOUT_MS} ms: ${[...pending].map((r) => shown(r.url())).join(', ')}`,
      );
    }
    if (pending.size > 0) quietSince = Date.now();
    await page.waitForTimeout(50);
  }
}

/** A URL as a failure message shows it (GraphiQL's own icon is a 100 KB data: URL). */
const shown = (url: string) => (url.length > 120 ? `${url.slice(0, 120)}…` : url);

/** The page's requests, its declared icon and the service's answers: all this origin, none failed. */
async function expectOwnOriginOnly(visit: Visit) {
  const { page } = visit;
  const elsewhere = visit.requests.filter((url) => !isInMemory(url) && new URL(url).origin !== base);
  expect(elsewhere.map(shown)).toEqual([]);
  expect(visit.failures.map(shown)).toEqual([]);
  // Chromium fetches the icon outside the page (it is not the page's request): the service's own
  // log shows whether it was asked for (/favicon.ico when the page declares none) and how it answered.
  expect(answered.filter(({ status }) => status >= 400)).toEqual([]);
  const icons = await page.$$eval('link[rel~="icon"]', (links) => links.map((link) => (link as HTMLLinkElement).href));
  expect(icons.map(shown)).toEqual([expect.stringMatching(new RegExp(`^${base}/`))]);
  for (const icon of icons) {
    const answer = await page.evaluate(async (url) => {
      const response = await fetch(url);
      return { status: response.status, type: response.headers.get('content-type') };
    }, icon);
    expect({ icon, ...answer }).toEqual({ icon, status: 200, type: 'image/svg+xml' });
  }
  await page.screenshot({ path: path.join(ARTIFACTS_DIR, `page-${new URL(page.url()).pathname.split('/')[1]}.png`) });
}

test('Swagger UI at /docs loads only from this origin, and "Try it out" sends no filter nobody set', async () => {
  const org = await signUp(t, 'docs');
  const agent = await readyAgent(t, org);
  expect((await execute(t, agent)).status).toBe(200);

  const visit = await open('/docs');
  const { page } = visit;
  const operation = page.locator('#operations-Records-records');
  await operation.waitFor();
  await settle(visit);
  await expectOwnOriginOnly(visit);

  // Try it out on GET /api/v1/records, signed in as the org's admin, every field left as it is.
  await page.evaluate((token) => {
    const ui = (window as unknown as { ui: { authActions: { authorize(auth: unknown): void } } }).ui;
    ui.authActions.authorize({
      bearerAuth: { name: 'bearerAuth', schema: { type: 'http', scheme: 'bearer' }, value: token },
    });
  }, org.adminToken);
  await operation.locator('.opblock-summary').click();
  await operation.getByRole('button', { name: 'Try it out' }).click();
  const sent = page.waitForRequest((request) => new URL(request.url()).pathname === '/api/v1/records');
  await operation.getByRole('button', { name: 'Execute' }).click();
  const request = await sent;
  expect(new URL(request.url()).origin).toBe(base);
  expect([...new URL(request.url()).searchParams.keys()]).toEqual([]);
  const response = await request.response();
  expect(response?.status()).toBe(200);
  const listed = await response!.json();
  expect(listed.total).toBe(1);
  expect(listed.items).toHaveLength(1);
  await operation.locator('.live-responses-table').waitFor();
  expect(visit.requests.filter((url) => new URL(url).origin !== base)).toEqual([]);
});

test('ReDoc at /redoc loads only from this origin (no Redocly logo from its CDN)', async () => {
  const visit = await open('/redoc');
  const { page } = visit;
  await page.getByText('API docs by Redocly').waitFor();
  await page.locator('[data-section-id="tag/Records"]').waitFor({ state: 'attached' });
  await settle(visit);
  await expectOwnOriginOnly(visit);
});

test('GraphiQL at /graphql loads only from this origin', async () => {
  const visit = await open('/graphql');
  const { page } = visit;
  await page.locator('.graphiql-container').first().waitFor();
  await page.getByText('mutation Login').first().waitFor();
  await settle(visit);
  await expectOwnOriginOnly(visit);
  // It introspected the schema from here.
  expect(visit.requests.filter((url) => new URL(url).pathname === '/graphql').length).toBeGreaterThanOrEqual(2);
});

test('the console at /console loads only from this origin', async () => {
  const visit = await open('/console');
  const { page } = visit;
  await page.getByRole('button', { name: 'Sign in', exact: true }).waitFor();
  await settle(visit);
  await expectOwnOriginOnly(visit);
});
