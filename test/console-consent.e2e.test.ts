/**
 * The console's consent page for OAuth clients (/console/authorize) and the connected clients of
 * the agents page, end to end: Debian's Chromium against the real service on a real port, an MCP
 * client's redirect URI served by a local server of the test, and "another site" served on a
 * second origin (http://localhost:<port>, where the service is http://127.0.0.1:<port>) to show
 * that a page elsewhere can neither answer for a signed-in operator nor frame the consent page
 * (docs/decisions/0047-mcp-oauth.md#consent-page).
 *
 * Conventions of console.e2e.test.ts: each test has its own organization and browser context,
 * screenshots go to test/artifacts/, skipped with a notice without Chromium (failing under CI).
 */
import { createServer, type RequestListener, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { startTestApp, type TestApp } from './support/app.js';
import {
  chromiumTests,
  eventually,
  horizontalOverflow,
  NARROW,
  screenshot,
  submitSignIn,
  watchedPage,
  type ConsolePage,
} from './support/console.js';
import { addUser, signUp, type OrgFixture } from './support/fixtures.js';
import { readyAgent, type AgentFixture } from './support/gateway.js';
import {
  authorizationParams,
  authorizeUrl,
  connectClient,
  form,
  pkce,
  registerClient,
  type AuthorizationRequestParams,
} from './support/oauth.js';

const { test, newContext } = chromiumTests();

let t: TestApp;
let service: Server;
let base: string;
/** The MCP client's side: its redirect URI, and every request that reached it. */
let client: Server;
let clientBase: string;
const arrivals: URL[] = [];
/** Another site: the pages of `elsewherePages`, on another origin than the service's. */
let elsewhere: Server;
let elsewhereBase: string;
const elsewherePages = new Map<string, string>();

const listen = async (server: Server) => {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return (server.address() as AddressInfo).port;
};
const close = (server: Server | undefined) => (server ? new Promise((resolve) => server.close(resolve)) : undefined);

beforeAll(async () => {
  // The port first, so PUBLIC_URL (the issuer, and the agents' resource URLs) is the address the
  // browser uses, as in production.
  let app: RequestListener | undefined;
  service = createServer((request, response) => app!(request, response));
  base = `http://127.0.0.1:${await listen(service)}`;
  t = await startTestApp({ PUBLIC_URL: base, OAUTH_REGISTRATIONS_PER_ADDRESS: '10000' });
  app = t.app.yoga;

  client = createServer((request, response) => {
    arrivals.push(new URL(request.url!, clientBase));
    response
      .writeHead(200, { 'content-type': 'text/html; charset=utf-8' })
      .end('<!doctype html><title>MCP client</title><p>The client has the answer.</p>');
  });
  clientBase = `http://127.0.0.1:${await listen(client)}`;

  elsewhere = createServer((request, response) => {
    const page = elsewherePages.get(new URL(request.url!, 'http://elsewhere').pathname);
    response.writeHead(page ? 200 : 404, { 'content-type': 'text/html; charset=utf-8' }).end(page ?? 'no such page');
  });
  // localhost, not 127.0.0.1: the same machine, another origin.
  elsewhereBase = `http://localhost:${await listen(elsewhere)}`;
});

afterAll(async () => {
  await close(elsewhere);
  await close(client);
  await close(service);
  await t?.close();
});

const CONSENT_HEADING = 'Connect an MCP client to an agent?';

/** An organization with an active agent, an operator, and an MCP client registered with its redirect URI on the test's client server. */
async function setUp(prefix: string): Promise<{
  org: OrgFixture;
  agent: AgentFixture;
  operator: { email: string; token: string };
  clientId: string;
  redirectUri: string;
}> {
  const org = await signUp(t, prefix);
  const agent = await readyAgent(t, org);
  const operator = await addUser(t, org, 'operator');
  const redirectUri = `${clientBase}/callback`;
  const clientId = await registerClient(t, [redirectUri], 'Claude (test)');
  return { org, agent, operator, clientId, redirectUri };
}

/** Opens the authorization endpoint as an MCP client would, signs in on the consent page it leads to. */
async function consentPage(
  params: AuthorizationRequestParams,
  email: string,
  viewport?: typeof NARROW,
): Promise<ConsolePage> {
  const view = await watchedPage(await newContext(viewport));
  const { page } = view;
  await page.goto(`${base}${authorizeUrl(params)}`);
  await page.getByText('An MCP client asks to connect to an agent of your organization.').waitFor();
  await submitSignIn(page, email);
  await page.getByRole('heading', { level: 1, name: CONSENT_HEADING }).waitFor();
  return view;
}

const grantsOf = async (org: OrgFixture, svcId: string) =>
  (await t.request('GET', `/api/v1/agents/${svcId}/grants`, { token: org.adminToken })).body.total as number;

/** The status of an MCP request with `token` at the agent's endpoint, over HTTP. */
async function mcpStatus(svcId: string, token: string): Promise<number> {
  const response = await fetch(`${base}/mcp/${svcId}`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      'mcp-protocol-version': '2025-06-18',
      authorization: `Bearer ${token}`,
    },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list', params: {} }),
  });
  await response.arrayBuffer();
  return response.status;
}

/** Waits for the client's redirect URI to be reached `count` times in all; the last arrival. */
async function arrival(count: number): Promise<URL | undefined> {
  await eventually(
    () => arrivals.length,
    (n) => n >= count,
  );
  return arrivals[count - 1];
}

test('an operator signs in on the consent page, keeps the request through it, allows with the keyboard; the code gives tokens that call the agent', async () => {
  const { agent, operator, clientId, redirectUri } = await setUp('consent');
  const { verifier, challenge } = pkce();
  const params = authorizationParams(base, clientId, agent.svcId, challenge, { redirect_uri: redirectUri });
  const view = await newContext().then(watchedPage);
  const { page } = view;

  // /oauth/authorize sends the browser to the console's consent page; not signed in, its sign-in form first.
  await page.goto(`${base}${authorizeUrl(params)}`);
  await page.getByText('An MCP client asks to connect to an agent of your organization.').waitFor();
  expect(new URL(page.url()).pathname).toBe('/console/authorize');
  await screenshot(page, 'consent-sign-in');
  await submitSignIn(page, operator.email);
  await page.getByRole('heading', { level: 1, name: CONSENT_HEADING }).waitFor();
  // The request survived the sign-in: the same address, every parameter as the client sent it.
  const address = new URL(page.url());
  expect(address.pathname).toBe('/console/authorize');
  expect(Object.fromEntries(address.searchParams)).toEqual(params);
  expect(await page.title()).toBe('Connect a client? · Agent Gateway console');

  const main = page.getByRole('main');
  const host = new URL(redirectUri).host;
  await main.getByText(host, { exact: true }).first().waitFor();
  const clientCard = main.getByRole('article', { name: 'The client' });
  const clientText = await clientCard.innerText();
  expect(clientText).toMatch(/Name\s+Claude \(test\) \(as the client calls itself\)/);
  expect(clientText).toMatch(new RegExp(`Client id\\s+${clientId}`));
  expect(clientText).toMatch(/Known as\s+a client registered with this gateway/);
  expect(clientText).toMatch(new RegExp(`Redirect host\\s+${host.replace(/\./g, '\\.')}`));
  expect(await main.locator('.redirect-host').innerText()).toBe(
    `After your answer, the browser goes to ${host}. Allow only if you recognise it as the application you are connecting.`,
  );
  const agentText = await main.getByRole('article', { name: 'The agent' }).innerText();
  expect(agentText).toMatch(/Name\s+Test agent/);
  expect(agentText).toMatch(new RegExp(`Id\\s+${agent.svcId}`));
  expect(agentText).toMatch(/Status\s+active/);
  expect(agentText).toContain(`${base}/mcp/${agent.svcId}`);
  expect(await main.getByRole('article', { name: 'Access asked for' }).innerText()).toMatch(
    /Scope\s+mcp:tools\s+Call this agent’s tools through Agent Gateway; every call is still decided by policy and recorded\./,
  );
  // No navigation away from the request, and the page does not poll: one read, nothing after it.
  expect(await page.getByRole('navigation').count()).toBe(0);
  const graphqlRequests: string[] = [];
  page.on('request', (request) => {
    if (new URL(request.url()).pathname === '/graphql') graphqlRequests.push(request.postData() ?? '');
  });
  await screenshot(page, 'consent');

  // The page starts on its heading, not on Allow: an Enter pressed by habit answers nothing.
  expect(await page.getByRole('heading', { level: 1 }).evaluate((el) => el === document.activeElement)).toBe(true);
  await new Promise((resolve) => setTimeout(resolve, 4000));
  expect(graphqlRequests).toEqual([]);
  const allow = main.getByRole('button', { name: 'Allow' });
  for (let presses = 0; presses < 20 && !(await allow.evaluate((el) => el === document.activeElement)); presses++) {
    await page.keyboard.press('Tab');
  }
  expect(await allow.evaluate((el) => el === document.activeElement && el.matches(':focus-visible'))).toBe(true);
  const before = arrivals.length;
  await page.keyboard.press('Enter');

  // The browser lands on the client's redirect URI with the code, the state and the issuer (RFC 9207).
  await page.waitForURL((url) => url.href.startsWith(redirectUri));
  const landed = await arrival(before + 1);
  expect(landed?.pathname).toBe('/callback');
  expect(Object.fromEntries(landed!.searchParams)).toEqual({
    code: expect.stringMatching(/^oac_/),
    state: params.state,
    iss: base,
  });
  expect(graphqlRequests).toHaveLength(1);
  expect(graphqlRequests[0]).toContain('decide_oauth_authorization');

  // The client exchanges the code at the token endpoint with its PKCE verifier, as a form.
  const exchanged = await fetch(`${base}/oauth/token`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: form({
      grant_type: 'authorization_code',
      code: landed!.searchParams.get('code')!,
      redirect_uri: redirectUri,
      client_id: clientId,
      code_verifier: verifier,
      resource: params.resource,
    }),
  });
  expect(exchanged.status).toBe(200);
  const tokens = (await exchanged.json()) as {
    access_token: string;
    refresh_token: string;
    token_type: string;
    scope: string;
  };
  expect(tokens).toMatchObject({
    token_type: 'Bearer',
    scope: 'mcp:tools',
    refresh_token: expect.stringMatching(/^ort_/),
  });
  expect(await mcpStatus(agent.svcId, tokens.access_token)).toBe(200);
  expect(view.problems).toEqual([]);
});

test('Deny sends the client access_denied with its state and the issuer; no grant is made', async () => {
  const { org, agent, clientId, redirectUri } = await setUp('consent-deny');
  const params = authorizationParams(base, clientId, agent.svcId, pkce().challenge, { redirect_uri: redirectUri });
  // An admin, on a phone-sized window.
  const view = await consentPage(params, org.adminEmail, NARROW);
  const { page } = view;
  expect(await horizontalOverflow(page)).toBeLessThanOrEqual(0);
  await screenshot(page, 'consent-narrow');
  const before = arrivals.length;
  await page.getByRole('button', { name: 'Deny' }).click();
  await page.waitForURL((url) => url.href.startsWith(redirectUri));
  const landed = await arrival(before + 1);
  expect(Object.fromEntries(landed!.searchParams)).toEqual({
    error: 'access_denied',
    error_description: 'The operator denied access',
    state: params.state,
    iss: base,
  });
  expect(await grantsOf(org, agent.svcId)).toBe(0);
  expect(view.problems).toEqual([]);
});

test('a viewer, or an org without the agent, sees Allow disabled with the reason; a viewer forcing the button is refused', async () => {
  const { org, agent, clientId, redirectUri } = await setUp('consent-viewer');
  const viewer = await addUser(t, org, 'viewer');
  const params = authorizationParams(base, clientId, agent.svcId, pkce().challenge, { redirect_uri: redirectUri });
  const view = await consentPage(params, viewer.email);
  const { page } = view;
  const allow = page.getByRole('button', { name: 'Allow' });
  expect(await allow.isDisabled()).toBe(true);
  expect(await page.getByRole('button', { name: 'Deny' }).isEnabled()).toBe(true);
  const refusal = 'Only an admin or an operator can allow a client; a viewer can only deny.';
  expect(await page.locator('.refusal').innerText()).toBe(refusal);
  // The reason is the disabled button's description for a screen reader.
  expect(await allow.evaluate((el) => document.getElementById(el.getAttribute('aria-describedby')!)?.textContent)).toBe(
    refusal,
  );
  await screenshot(page, 'consent-viewer');

  // Enabled by hand (the page's own script cannot be trusted to be the only one): the service refuses.
  const before = arrivals.length;
  await allow.evaluate((el) => {
    (el as HTMLButtonElement).disabled = false;
  });
  await allow.click();
  await page
    .getByRole('alert')
    .getByText(/^Only an admin or an operator can allow a client.*\(FORBIDDEN\)$/)
    .waitFor();
  expect(new URL(page.url()).pathname).toBe('/console/authorize');
  expect(arrivals.length).toBe(before);
  expect(await grantsOf(org, agent.svcId)).toBe(0);
  expect(view.problems).toEqual([]);

  // Another organization's admin: nothing of this org's agent is shown, and Allow is disabled.
  const other = await signUp(t, 'consent-other');
  const outsider = await consentPage(params, other.adminEmail);
  const agentCard = outsider.page.getByRole('article', { name: 'The agent' });
  expect(await agentCard.innerText()).toContain(`Your organization has no agent ${agent.svcId}.`);
  expect(await agentCard.innerText()).not.toContain('Test agent');
  expect(await outsider.page.getByRole('button', { name: 'Allow' }).isDisabled()).toBe(true);
  expect(await outsider.page.locator('.refusal').innerText()).toBe(`Your organization has no agent "${agent.svcId}".`);
  await screenshot(outsider.page, 'consent-no-such-agent');
  expect(outsider.problems).toEqual([]);
});

test('a redirect URI the client did not register never redirects: not from /oauth/authorize, not from the consent page', async () => {
  const { agent, operator, clientId } = await setUp('consent-invalid');
  const unregistered = `${clientBase}/elsewhere`;
  const params = authorizationParams(base, clientId, agent.svcId, pkce().challenge, { redirect_uri: unregistered });
  const before = arrivals.length;

  // The authorization endpoint answers a page saying why, and stays there.
  const { page, problems } = await newContext().then(watchedPage);
  const answered = await page.goto(`${base}${authorizeUrl(params)}`);
  expect(answered?.status()).toBe(400);
  expect(new URL(page.url()).pathname).toBe('/oauth/authorize');
  expect(await page.locator('body').innerText()).toMatch(/not one the client registered/);
  expect(problems).toEqual([`400 ${page.url()}`]);

  // The consent page opened directly with that request: the service's reason, and no button at all.
  await page.goto(`${base}/console/authorize?${new URLSearchParams(params)}`);
  await submitSignIn(page, operator.email);
  const alert = page.getByRole('alert');
  await alert.waitFor();
  expect(await alert.innerText()).toBe(
    'This authorization request cannot be answered: The redirect_uri is not one the client registered; the browser is not sent there. (BAD_REQUEST)',
  );
  expect(await page.getByRole('main').getByRole('button').count()).toBe(0);
  await screenshot(page, 'consent-invalid');

  // A parameter given twice is refused by the page itself, as /oauth/authorize refuses it.
  const valid = authorizationParams(base, clientId, agent.svcId, pkce().challenge, {
    redirect_uri: `${clientBase}/callback`,
  });
  await page.goto(
    `${base}/console/authorize?${new URLSearchParams(valid)}&redirect_uri=${encodeURIComponent(unregistered)}`,
  );
  await page
    .getByRole('alert')
    .getByText('This authorization request cannot be answered: the parameter redirect_uri is repeated.')
    .waitFor();
  expect(await page.getByRole('main').getByRole('button').count()).toBe(0);

  await new Promise((resolve) => setTimeout(resolve, 500));
  expect(arrivals.length).toBe(before);
  expect(new URL(page.url()).origin).toBe(base);
});

test('another site cannot frame the consent page: nothing of it renders, not even for a signed-in operator', async () => {
  const { agent, operator, clientId, redirectUri } = await setUp('consent-frame');
  const params = authorizationParams(base, clientId, agent.svcId, pkce().challenge, { redirect_uri: redirectUri });
  const consentUrl = `${base}/console/authorize?${new URLSearchParams(params)}`;
  const context = await newContext();
  // The operator is signed in on the consent page in one tab of this browser.
  const signedIn = await watchedPage(context);
  await signedIn.page.goto(consentUrl);
  await submitSignIn(signedIn.page, operator.email);
  await signedIn.page.getByRole('heading', { level: 1, name: CONSENT_HEADING }).waitFor();

  // Another site's page in a second tab puts the consent page under a harmless-looking button.
  elsewherePages.set(
    '/frame',
    `<!doctype html><title>Win a prize</title><button>Claim</button><iframe id="consent" src="${consentUrl}" width="800" height="600"></iframe>`,
  );
  const attacker = await context.newPage();
  const fromFrame: string[] = [];
  attacker.on('request', (request) => {
    if (request.frame() !== attacker.mainFrame()) fromFrame.push(request.url());
  });
  const loaded = attacker.waitForEvent('framenavigated', (frame) => frame !== attacker.mainFrame());
  await attacker.goto(`${elsewhereBase}/frame`);
  await loaded;
  await new Promise((resolve) => setTimeout(resolve, 500));
  const frame = attacker.frames().find((f) => f !== attacker.mainFrame())!;
  // The browser refused to render it (frame-ancestors 'none', X-Frame-Options DENY): an error
  // page instead, so neither the console's script nor its GraphQL requests ever ran.
  expect(frame.url()).not.toContain('/console/');
  expect(fromFrame.filter((url) => url.includes('/console/assets/') || url.endsWith('/graphql'))).toEqual([]);
  expect(await frame.locator('button').count()).toBe(0);
  await screenshot(attacker, 'consent-framed');
  expect(signedIn.problems).toEqual([]);
});

test('another site cannot answer for a signed-in operator: its form posts and fetches reach /graphql without a credential and make no grant', async () => {
  const { org, agent, operator, clientId, redirectUri } = await setUp('consent-csrf');
  const params = authorizationParams(base, clientId, agent.svcId, pkce().challenge, { redirect_uri: redirectUri });
  const mutation = `mutation { decide_oauth_authorization(${Object.entries(params)
    .map(([name, value]) => `${name}: ${JSON.stringify(value)}`)
    .join(', ')}, allow: true) { redirect_to } }`;
  const context = await newContext();
  // The operator is signed in on the consent page of this very request, in another tab of this browser.
  const signedIn = await watchedPage(context);
  await signedIn.page.goto(`${base}/console/authorize?${new URLSearchParams(params)}`);
  await submitSignIn(signedIn.page, operator.email);
  await signedIn.page.getByRole('heading', { level: 1, name: CONSENT_HEADING }).waitFor();

  const html = (text: string) =>
    text.replace(/&/g, '&amp;').replace(/"/g, '&quot;').replace(/'/g, '&#39;').replace(/</g, '&lt;');
  const graphqlUrl = `${base}/graphql`;
  elsewherePages.set(
    '/csrf',
    `<!doctype html><title>Win a prize</title>
<form id="urlencoded" method="post" action="${graphqlUrl}"><input type="hidden" name="query" value="${html(mutation)}"></form>
<form id="plain" method="post" enctype="text/plain" action="${graphqlUrl}"><input type="hidden" name='${html(`{"query":${JSON.stringify(mutation)},"x":"`)}' value='"}'></form>
<script>
  window.attempt = async () => {
    const url = ${JSON.stringify(graphqlUrl)};
    const body = JSON.stringify({ query: ${JSON.stringify(mutation)} });
    const results = {};
    try {
      const response = await fetch(url, { method: 'POST', credentials: 'include', headers: { 'content-type': 'application/json' }, body });
      results.cors = 'read: ' + (await response.text());
    } catch {
      results.cors = 'blocked';
    }
    results.noCorsPost = (await fetch(url, { method: 'POST', mode: 'no-cors', credentials: 'include', headers: { 'content-type': 'text/plain' }, body })).type;
    const get = url + '?query=' + encodeURIComponent(${JSON.stringify(mutation)});
    results.noCorsGet = (await fetch(get, { mode: 'no-cors', credentials: 'include' })).type;
    return results;
  };
</script>`,
  );
  const attacker = await context.newPage();
  const answers: Array<{ method: string; status: number; body: string }> = [];
  attacker.on('response', async (response) => {
    if (!response.url().startsWith(graphqlUrl)) return;
    const body = await response.text().catch(() => '');
    answers.push({ method: response.request().method(), status: response.status(), body });
  });
  const open = async () => {
    await attacker.goto(`${elsewhereBase}/csrf`);
    await attacker.locator('#plain').waitFor({ state: 'attached' });
  };

  // fetch: a JSON post needs a CORS preflight, which the service does not grant (CORS is closed);
  // no-cors requests are sent, unreadable, and carry no Authorization header: none is ambient.
  await open();
  expect(await attacker.evaluate(() => (window as unknown as { attempt: () => Promise<unknown> }).attempt())).toEqual({
    cors: 'blocked',
    noCorsPost: 'opaque',
    noCorsGet: 'opaque',
  });
  // Form posts, which a browser sends with whatever it holds for the target (cookies): it holds nothing.
  await Promise.all([
    attacker.waitForURL(graphqlUrl),
    attacker.locator('#urlencoded').evaluate((f) => (f as HTMLFormElement).submit()),
  ]);
  expect(JSON.parse(await attacker.locator('body').innerText())).toEqual({
    errors: [
      { message: 'This operation needs a bearer token or an API key', extensions: { code: 'AUTHENTICATION_REQUIRED' } },
    ],
  });
  await open();
  await Promise.all([
    attacker.waitForResponse((response) => response.url() === graphqlUrl && response.request().method() === 'POST'),
    attacker.locator('#plain').evaluate((f) => (f as HTMLFormElement).submit()),
  ]);

  // Every one reached the service and was refused: no answer carries a redirect_to.
  const sent = await eventually(
    () => answers.filter((answer) => answer.method !== 'OPTIONS'),
    (list) => list.length === 4,
  );
  expect(
    sent
      .map(({ method, status }) => ({ method, status }))
      .sort((x, y) => x.status - y.status || x.method.localeCompare(y.method)),
  ).toEqual([
    { method: 'POST', status: 401 },
    { method: 'GET', status: 405 },
    { method: 'POST', status: 415 },
    { method: 'POST', status: 415 },
  ]);
  for (const answer of answers) expect(answer.body).not.toContain('redirect_to');
  expect(await grantsOf(org, agent.svcId)).toBe(0);
  const audited = await t.request('GET', `/api/v1/orgs/${org.orgId}/audit-logs?action=oauth.grant_created`, {
    token: org.adminToken,
  });
  expect(audited.body.items).toEqual([]);

  // The forged request itself was a good one: sent with the operator's bearer token, as the
  // console sends it from its tab, it makes the grant. Only the credential was missing.
  const token = await signedIn.page.evaluate(
    () => JSON.parse(sessionStorage.getItem('agent-gateway.console.session')!).token as string,
  );
  const genuine = await t.graphql(mutation, {}, { token });
  expect(genuine.body.data.decide_oauth_authorization.redirect_to).toMatch(new RegExp(`^${redirectUri}\\?code=oac_`));
  expect(await grantsOf(org, agent.svcId)).toBe(1);
  expect(signedIn.problems).toEqual([]);
});

test('the agents page lists connected clients; a viewer has no button; Revoke, confirmed, removes the grant and its token is refused at /mcp', async () => {
  const org = await signUp(t, 'console-clients');
  const agent = await readyAgent(t, org);
  const operator = await addUser(t, org, 'operator');
  const viewer = await addUser(t, org, 'viewer');
  const connected = await connectClient(t, base, operator.token, agent.svcId);
  expect(await mcpStatus(agent.svcId, connected.accessToken)).toBe(200);

  const openClients = async (email: string): Promise<ConsolePage> => {
    const view = await newContext().then(watchedPage);
    await view.page.goto(`${base}/console/agents`);
    await submitSignIn(view.page, email);
    const card = view.page.getByRole('article', { name: `Agent ${agent.svcId}` });
    await card.getByText('Connected clients').click();
    await card.locator(`[data-grant-id="${connected.grantId}"]`).waitFor();
    return view;
  };

  // A viewer sees the list, without a button.
  const watcher = await openClients(viewer.email);
  const viewerCard = watcher.page.getByRole('article', { name: `Agent ${agent.svcId}` });
  expect(await viewerCard.locator('.connected').getByRole('button').count()).toBe(0);
  expect(watcher.problems).toEqual([]);

  const view = await openClients(operator.email);
  const { page } = view;
  const row = page.locator(`[data-grant-id="${connected.grantId}"]`);
  const text = await row.innerText();
  expect(text).toContain('Test MCP client');
  expect(text).toMatch(new RegExp(`Client id\\s+${connected.clientId}`));
  expect(text).toMatch(/Redirect host\s+127\.0\.0\.1:33418/);
  expect(text).toMatch(new RegExp(`Approved by\\s+${operator.email.replace(/\./g, '\\.')}`));
  expect(text).toMatch(/Created\s+\S/);
  expect(text).toMatch(/Last used\s+\S/);
  await screenshot(page, 'agents-connected-clients');

  // Revoking asks first; the question takes the focus on Cancel, and Cancel changes nothing.
  await row.getByRole('button', { name: 'Revoke' }).click();
  const question = row.getByRole('group', { name: 'Revoke Test MCP client?' });
  await question.waitFor();
  expect(await question.getByRole('button', { name: 'Cancel' }).evaluate((el) => el === document.activeElement)).toBe(
    true,
  );
  await screenshot(page, 'agents-revoke-confirm');
  await question.getByRole('button', { name: 'Cancel' }).click();
  expect(await row.getByRole('button', { name: 'Revoke' }).evaluate((el) => el === document.activeElement)).toBe(true);
  expect(await grantsOf(org, agent.svcId)).toBe(1);
  await row.getByRole('button', { name: 'Revoke' }).click();
  await row.getByRole('button', { name: 'Yes, revoke' }).click();
  await row.waitFor({ state: 'detached' });
  await page.getByText('No MCP client is connected with OAuth.').waitFor();
  expect(await grantsOf(org, agent.svcId)).toBe(0);

  // Its access token stops working at the agent's endpoint (every process within a poll of the config cache).
  const status = await eventually(
    () => mcpStatus(agent.svcId, connected.accessToken),
    (s) => s === 401,
  );
  expect(status).toBe(401);
  expect(view.problems).toEqual([]);
});
