/** What the console tests need besides the service: a current build, a browser, and pages watched for problems. */
import { spawnSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { PASSWORD } from './fixtures.js';
import { optionalProgram, testWith } from './optional-programs.js';

const root = fileURLToPath(new URL('../..', import.meta.url));

/**
 * Builds console/dist/ when its sources changed (`npm test` has done it already; a test file run
 * alone may not have), so the tests never run against an older build.
 */
export function ensureConsoleBuilt(): void {
  const result = spawnSync(process.execPath, ['scripts/build-console.mjs', '--if-stale'], {
    cwd: root,
    encoding: 'utf8',
    env: { ...process.env, NODE_OPTIONS: '' },
  });
  if (result.status !== 0) throw new Error(`the console build failed:\n${result.stderr}`);
}

/**
 * Debian's Chromium (playwright's own browser builds cannot be downloaded here), or CHROMIUM_PATH;
 * undefined, after a notice, when there is none (the browser tests are skipped then, except under CI).
 */
export function findChromium(): string | undefined {
  return optionalProgram('Chromium', ['/usr/bin/chromium', '/usr/bin/chromium-browser'], 'apt-get install chromium', {
    variable: 'CHROMIUM_PATH',
    value: process.env.CHROMIUM_PATH,
  });
}

export const ARTIFACTS_DIR = fileURLToPath(new URL('../artifacts/', import.meta.url));

export const WIDE = { width: 1280, height: 900 };
/** A phone's width: where long unbroken values overflow. */
export const NARROW = { width: 400, height: 850 };

export interface ConsolePage {
  page: Page;
  /** Uncaught errors, CSP violations and failed loads seen so far. */
  problems: string[];
}

/** A new page of `context` that collects its problems. */
export async function watchedPage(context: BrowserContext): Promise<ConsolePage> {
  const page = await context.newPage();
  const problems: string[] = [];
  // Reported by the browser whatever the page does: an init script runs before the page's own.
  await page.addInitScript(() => {
    document.addEventListener('securitypolicyviolation', (event) => {
      console.error(`CSP violation: ${event.violatedDirective} ${event.blockedURI}`);
    });
  });
  page.on('console', (message) => {
    if (message.type() === 'error' && /Content Security Policy|CSP violation/i.test(message.text()))
      problems.push(message.text());
  });
  page.on('pageerror', (error) => problems.push(`uncaught: ${error.message}`));
  // Every file the page loads exists (the icon included: no /favicon.ico guess). GraphQL answers
  // refusals with their own statuses, which the pages show.
  page.on('response', (response) => {
    if (response.status() >= 400 && new URL(response.url()).pathname !== '/graphql')
      problems.push(`${response.status()} ${response.url()}`);
  });
  return { page, problems };
}

/** Fills the console's sign-in form and sends it (the caller waits for the page it expects). */
export async function submitSignIn(page: Page, email: string) {
  await page.getByLabel('Email').fill(email);
  await page.getByLabel('Password').fill(PASSWORD);
  await page.getByRole('button', { name: 'Sign in', exact: true }).click();
}

export const screenshot = (page: Page, name: string) =>
  page.screenshot({ path: path.join(ARTIFACTS_DIR, `console-${name}.png`), fullPage: true });

/** Nothing wider than the window: no horizontal scrolling. */
export const horizontalOverflow = (page: Page) =>
  page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);

/** Longer than the console's polling interval (3 s), shorter than the test timeout. */
export const POLL_WAIT_MS = 10_000;

/** `read()` once it satisfies `done`, else its last value after `timeoutMs` (so the assertion after it shows what it was). */
export async function eventually<T>(
  read: () => Promise<T> | T,
  done: (value: T) => boolean,
  timeoutMs = POLL_WAIT_MS,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await read();
    if (done(value) || Date.now() > deadline) return value;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/**
 * A browser test file's Chromium: `test` (test.skip without Chromium, after a notice; a file whose
 * tests are all skipped runs none of its hooks), a current console build and test/artifacts/
 * before its tests, and `newContext`: a new browser context (no shared session) each call, closed
 * after the test that made it. Call it at the top level of the file (it registers hooks).
 */
export function chromiumTests() {
  const executablePath = findChromium();
  let browser: Browser | undefined;
  const contexts: BrowserContext[] = [];
  beforeAll(async () => {
    ensureConsoleBuilt();
    mkdirSync(ARTIFACTS_DIR, { recursive: true });
    // --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start.
    browser = await chromium.launch({ executablePath, args: ['--no-sandbox'] });
  });
  afterEach(async () => {
    await Promise.all(contexts.splice(0).map((context) => context.close()));
  });
  afterAll(async () => {
    await browser?.close();
  });
  return {
    test: testWith(executablePath),
    async newContext(viewport: { width: number; height: number } = WIDE): Promise<BrowserContext> {
      const context = await browser!.newContext({ viewport });
      contexts.push(context);
      return context;
    },
  };
}
