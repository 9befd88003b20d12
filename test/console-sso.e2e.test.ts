/**
 * "Sign in with SSO" in the console, end to end in Debian's Chromium: the console's button, the
 * service's redirect to a real OpenID provider (panva's `oidc-provider` with its development login
 * form, on a loopback port), the provider's forms, the callback, and the console's exchange of the
 * one-time code. The service runs on a real port whose address is its PUBLIC_URL, as the
 * provider's registered redirect URI requires.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { LOOPBACK_UPSTREAMS, startTestApp, type TestApp } from './support/app.js';
import { chromiumTests, screenshot, submitSignIn, watchedPage, type ConsolePage } from './support/console.js';
import { addUser, signUp, type OrgFixture } from './support/fixtures.js';
import { readyAgent } from './support/gateway.js';
import { authorizationParams, authorizeUrl, pkce, registerClient } from './support/oauth.js';
import { startIdentityProvider, type TestIdentityProvider } from './support/oidc-provider.js';

const { test, newContext } = chromiumTests();

let t: TestApp;
let server: Server;
let base: string;
let idp: TestIdentityProvider;
let org: OrgFixture;

beforeAll(async () => {
  // The port first: the service's PUBLIC_URL, and so its redirect URI, names it.
  server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  t = await startTestApp({ ...LOOPBACK_UPSTREAMS, PUBLIC_URL: base });
  server.on('request', t.app.yoga);
  idp = await startIdentityProvider({ redirectUri: `${base}/auth/sso/callback` });
  org = await signUp(t, 'console-sso');
  const configured = await t.request('PUT', `/api/v1/orgs/${org.orgId}/sso`, {
    token: org.adminToken,
    body: {
      issuer: idp.issuer,
      client_id: idp.clientId,
      client_secret: idp.clientSecret,
      allowed_domains: [`${org.slug}.example`],
      default_role: 'operator',
      allow_private_network: true,
    },
  });
  expect(configured.status).toBe(200);
});

afterAll(async () => {
  if (server) {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
  await idp?.close();
  await t?.close();
});

/** From the console's sign-in page (or `start`) through the provider's login and consent forms, as `login`. */
async function signInWithSso({ page }: ConsolePage, login: string, start = `${base}/console`) {
  await page.goto(start);
  await page.getByLabel('Organization').fill(org.slug);
  await page.getByRole('button', { name: 'Sign in with SSO' }).click();
  // The provider's development login form.
  await page.waitForURL((url) => url.href.startsWith(idp.issuer));
  await page.locator('input[name="login"]').fill(login);
  await page.locator('input[name="password"]').fill('any password');
  await page.locator('button[type="submit"]').click();
  // Its consent form.
  await page.getByRole('button', { name: 'Continue' }).click();
}

test('an operator signs in with SSO from the console button and lands in the console, the code gone from the address', async () => {
  const email = `ada@${org.slug}.example`;
  idp.accounts.set('ada', { email, email_verified: true });
  const view = await watchedPage(await newContext());
  await signInWithSso(view, 'ada');
  const { page } = view;
  await page.getByRole('heading', { level: 1, name: 'Approvals' }).waitFor();
  await expect(page.locator('.who').textContent()).resolves.toContain(email);
  await expect(page.locator('.who .role').textContent()).resolves.toBe('operator');
  // The one-time code never stays in the address or its history entry.
  expect(page.url()).toBe(`${base}/console`);
  expect(new URL(page.url()).hash).toBe('');
  await screenshot(page, 'sso-signed-in');
  // The session works like a password one: another page loads its data.
  await page.getByRole('navigation', { name: 'Console' }).getByRole('link', { name: 'Agents' }).click();
  await page.getByRole('heading', { level: 1, name: 'Agents' }).waitFor();
  // The slug is offered again next time.
  await page.getByRole('button', { name: 'Sign out' }).click();
  await expect(page.getByLabel('Organization').inputValue()).resolves.toBe(org.slug);
  expect(view.problems).toEqual([]);
});

test('a refused sign-in (an unverified email) is explained on the sign-in page', async () => {
  idp.accounts.set('unverified', { email: `unverified@${org.slug}.example`, email_verified: false });
  const view = await watchedPage(await newContext());
  await signInWithSso(view, 'unverified');
  const { page } = view;
  const alert = page.getByRole('alert');
  await alert.waitFor();
  await expect(alert.textContent()).resolves.toContain('has not verified');
  expect(new URL(page.url()).pathname).toBe('/console/sso');
  expect(new URL(page.url()).hash).toBe('');
  // The password form is still there.
  await expect(page.getByLabel('Password').isVisible()).resolves.toBe(true);
  await screenshot(page, 'sso-refused');
  expect(view.problems).toEqual([]);
});

test('signed in with SSO from the consent page of an MCP client, the operator comes back to that request', async () => {
  idp.accounts.set('grace', { email: `grace@${org.slug}.example`, email_verified: true });
  const agent = await readyAgent(t, org);
  const clientId = await registerClient(t, ['http://127.0.0.1:33418/callback'], 'Claude (test)');
  const params = authorizationParams(base, clientId, agent.svcId, pkce().challenge);
  const view = await watchedPage(await newContext());
  await signInWithSso(view, 'grace', `${base}${authorizeUrl(params)}`);
  const { page } = view;
  await page.getByRole('heading', { level: 1, name: 'Connect an MCP client to an agent?' }).waitFor();
  const address = new URL(page.url());
  expect(address.pathname).toBe('/console/authorize');
  expect(address.searchParams.get('state')).toBe(params.state);
  await expect(page.getByRole('button', { name: 'Allow' }).isEnabled()).resolves.toBe(true);
  expect(view.problems).toEqual([]);
});

test('an operator signed in with a password, when the organization turns enforce on, is back on the sign-in page told why', async () => {
  const operator = await addUser(t, org, 'operator');
  const view = await watchedPage(await newContext());
  const { page } = view;
  await page.goto(`${base}/console`);
  await submitSignIn(page, operator.email);
  await page.getByRole('heading', { level: 1, name: 'Approvals' }).waitFor();
  const settings = { issuer: idp.issuer, client_id: idp.clientId, allowed_domains: [`${org.slug}.example`] };
  const turnOn = (enforce: boolean) =>
    t.request('PUT', `/api/v1/orgs/${org.orgId}/sso`, {
      token: org.adminToken,
      body: { ...settings, default_role: 'operator', allow_private_network: true, enforce },
    });
  expect((await turnOn(true)).status).toBe(200);
  try {
    // The next request is refused, and so is the refresh it tries: the session is over, and the
    // sign-in page says what the service said.
    await page.getByRole('navigation', { name: 'Console' }).getByRole('link', { name: 'Agents' }).click();
    const notice = page.getByRole('status');
    await notice.waitFor();
    await expect(notice.textContent()).resolves.toBe(
      'Your session ended. This organization now signs in with single sign-on: sign in again through it',
    );
    await expect(page.getByRole('button', { name: 'Sign in with SSO' }).isVisible()).resolves.toBe(true);
    await screenshot(page, 'sso-enforced');
    // A sign-in that follows clears it: signing out says nothing about why.
    idp.accounts.set('lin', { email: `lin@${org.slug}.example`, email_verified: true });
    await signInWithSso(view, 'lin');
    await page.getByRole('heading', { level: 1, name: 'Approvals' }).waitFor();
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.getByLabel('Organization').waitFor();
    await expect(page.getByRole('status').count()).resolves.toBe(0);
    expect(view.problems).toEqual([]);
  } finally {
    expect((await turnOn(false)).status).toBe(200);
  }
});

test('an organization without single sign-on gets a page saying so', async () => {
  const view = await watchedPage(await newContext());
  const { page } = view;
  await page.goto(`${base}/console`);
  await page.getByLabel('Organization').fill('no-such-org');
  await page.getByRole('button', { name: 'Sign in with SSO' }).click();
  await page.getByRole('heading', { name: 'Single sign-on cannot start' }).waitFor();
  await expect(page.locator('body').textContent()).resolves.toContain('No organization "no-such-org"');
});
