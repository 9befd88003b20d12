/**
 * The console in Firefox (Debian's ESR, over WebDriver BiDi: test/support/firefox-bidi.ts) against
 * the real service: its JavaScript modules load and run under the CSP, an operator signs in and
 * the approvals inbox shows what an agent asked for, and the consent page of an OAuth client
 * renders. The flows themselves are tested in Chromium (console.e2e.test.ts,
 * console-consent.e2e.test.ts); this shows the same bundle works in the other engine.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { startTestApp, type TestApp } from './support/app.js';
import { ensureConsoleBuilt } from './support/console.js';
import { findFirefox, FirefoxPage } from './support/firefox-bidi.js';
import { addUser, PASSWORD, signUp } from './support/fixtures.js';
import { actionBody, execute, readyAgent } from './support/gateway.js';
import { authorizationParams, authorizeUrl, pkce, REDIRECT_URI, registerClient } from './support/oauth.js';
import { testWith } from './support/optional-programs.js';

const firefoxPath = findFirefox();
/** Skipped without Firefox (hooks of a file whose tests are all skipped do not run). */
const test = testWith(firefoxPath);

let t: TestApp;
let server: Server;
let base: string;
let firefox: FirefoxPage | undefined;

beforeAll(async () => {
  ensureConsoleBuilt();
  t = await startTestApp();
  server = createServer(t.app.yoga);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  firefox = await FirefoxPage.launch(firefoxPath!);
}, 90_000);

afterAll(async () => {
  await firefox?.close();
  if (server) await new Promise((resolve) => server.close(resolve));
  await t?.close();
});

/** `expression`'s value once `done` accepts it, else its last value after `timeoutMs`. */
async function eventually<T>(expression: string, done: (value: T) => boolean, timeoutMs = 15_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await firefox!.evaluate<T>(expression);
    if (done(value) || Date.now() > deadline) return value;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** Types into a field as a user would: Preact's `onInput` hears the input event. */
const typeInto = (selector: string, value: string) => `(() => {
  const field = document.querySelector(${JSON.stringify(selector)});
  field.value = ${JSON.stringify(value)};
  field.dispatchEvent(new Event('input', { bubbles: true }));
  return true;
})()`;

test('Firefox runs the console: sign in, the inbox shows the agent’s request, the CSP holds', async () => {
  const org = await signUp(t, 'console-firefox');
  const operator = await addUser(t, org, 'operator');
  const agent = await readyAgent(t, org, {
    constraints: { max_actions_per_hour: 100, max_actions_per_day: 1000, require_human_approval: ['billing:refund'] },
  });
  const asked = await execute(t, agent, actionBody(agent, 'refund', { invoice: 'inv-9', amount: 40 }));
  expect(asked.body.reasons.map((r: { code: string }) => r.code)).toEqual(['APPROVAL_REQUIRED']);

  await firefox!.goto(`${base}/console`);
  // The sign-in form is drawn by the module script: without it the page is empty.
  expect(await eventually<boolean>(`!!document.querySelector('input[type=password]')`, Boolean)).toBe(true);
  expect(await firefox!.evaluate<string[]>(`[...document.scripts].map((s) => s.type)`)).toEqual(['module']);
  expect(await firefox!.evaluate<string>('navigator.userAgent')).toMatch(/Firefox\//);

  await firefox!.evaluate(typeInto('input[type=email]', operator.email));
  await firefox!.evaluate(typeInto('input[type=password]', PASSWORD));
  await firefox!.evaluate(`(document.querySelector('button[type=submit]').click(), true)`);

  const inbox = await eventually<{ heading: string; text: string }>(
    `({ heading: document.querySelector('h1')?.textContent ?? '', text: document.body.innerText })`,
    (page) => page.heading === 'Approvals' && page.text.includes('1 pending') && page.text.includes('billing:refund'),
  );
  expect(inbox.heading).toBe('Approvals');
  expect(inbox.text).toContain('1 pending');
  expect(inbox.text).toContain('billing:refund');
  expect(inbox.text).toContain(agent.svcId);
  // A decision button is there for an operator.
  expect(
    await firefox!.evaluate<string[]>(`[...document.querySelectorAll('button')].map((b) => b.textContent)`),
  ).toEqual(expect.arrayContaining(['Approve', 'Deny']));
  // The session is in sessionStorage, nothing in localStorage.
  expect(await firefox!.evaluate<number>('sessionStorage.length')).toBeGreaterThan(0);
  expect(await firefox!.evaluate<number>('localStorage.length')).toBe(0);

  // An inline script added to the page does not run: Firefox enforces the console's CSP.
  await firefox!.evaluate(`(() => {
    const script = document.createElement('script');
    script.textContent = 'window.inlineRan = true';
    document.body.append(script);
    return true;
  })()`);
  await new Promise((resolve) => setTimeout(resolve, 200));
  expect(await firefox!.evaluate<boolean>('window.inlineRan === true')).toBe(false);
}, 90_000);

test('Firefox shows the consent page: /oauth/authorize leads to it, its sign-in keeps the request, the client and agent are shown', async () => {
  const org = await signUp(t, 'consent-firefox');
  const agent = await readyAgent(t, org);
  const clientId = await registerClient(t, [REDIRECT_URI], 'Claude (test)');
  const params = authorizationParams(t.app.env.publicUrl, clientId, agent.svcId, pkce().challenge);
  // Not the previous test's session: this tab's sessionStorage is the one the console reads.
  await firefox!.evaluate('(sessionStorage.clear(), true)');
  await firefox!.goto(`${base}${authorizeUrl(params)}`);
  expect(await eventually<boolean>(`!!document.querySelector('input[type=password]')`, Boolean)).toBe(true);
  await firefox!.evaluate(typeInto('input[type=email]', org.adminEmail));
  await firefox!.evaluate(typeInto('input[type=password]', PASSWORD));
  await firefox!.evaluate(`(document.querySelector('button[type=submit]').click(), true)`);

  const consent = await eventually<{ heading: string; text: string; buttons: string[]; address: string }>(
    `({
      heading: document.querySelector('h1')?.textContent ?? '',
      text: document.querySelector('main')?.innerText ?? '',
      buttons: [...document.querySelectorAll('main button')].map((b) => b.textContent + (b.disabled ? ' (disabled)' : '')),
      address: location.pathname + location.search,
    })`,
    (page) => page.heading === 'Connect an MCP client to an agent?' && page.buttons.length === 2,
  );
  expect(consent.heading).toBe('Connect an MCP client to an agent?');
  expect(consent.text).toContain('After your answer, the browser goes to 127.0.0.1:33418.');
  expect(consent.text).toContain(clientId);
  expect(consent.text).toContain(agent.svcId);
  expect(consent.text).toContain('every call is still decided by policy and recorded');
  expect(consent.buttons).toEqual(['Allow', 'Deny']);
  expect(consent.address).toBe(authorizeUrl(params).replace('/oauth/authorize', '/console/authorize'));
}, 90_000);
