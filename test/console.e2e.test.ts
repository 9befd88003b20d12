/**
 * The operator console end to end: Debian's Chromium, driven by playwright-core, against the real
 * service (the app on a real port, on the test database: PGlite, or PostgreSQL with DATABASE_URL)
 * with agents calling the gateway through the REST API as they do in production.
 *
 * Each test has its own organization and browser context (no shared session). Screenshots of each
 * page go to test/artifacts/ (git-ignored) for a reviewer to look at. Firefox runs the console in
 * console.firefox.test.ts.
 */
import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { startTestApp, type TestApp } from './support/app.js';
import {
  chromiumTests,
  eventually,
  horizontalOverflow,
  NARROW,
  POLL_WAIT_MS,
  screenshot,
  submitSignIn,
  watchedPage,
  type ConsolePage,
} from './support/console.js';
import {
  addUser,
  createManifest,
  login,
  manifestPayload,
  PASSWORD,
  signUp,
  type OrgFixture,
} from './support/fixtures.js';
import { actionBody, execute, readyAgent, type AgentFixture } from './support/gateway.js';

const { test, newContext } = chromiumTests();

let t: TestApp;
let server: Server;
let base: string;

beforeAll(async () => {
  t = await startTestApp();
  server = createServer(t.app.yoga);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  if (server) await new Promise((resolve) => server.close(resolve));
  await t?.close();
});

async function openConsole(viewport?: typeof NARROW): Promise<ConsolePage> {
  const view = await watchedPage(await newContext(viewport));
  await view.page.goto(`${base}/console`);
  return view;
}

async function signIn({ page }: ConsolePage, email: string) {
  await submitSignIn(page, email);
  await page.getByRole('heading', { level: 1, name: 'Approvals' }).waitFor();
}

async function goTo(
  { page }: ConsolePage,
  title: 'Approvals' | 'Manifests' | 'Agents' | 'Policies' | 'Records' | 'Audit log',
) {
  await page.getByRole('navigation', { name: 'Console' }).getByRole('link', { name: title }).click();
  await page.getByRole('heading', { level: 1, name: title }).waitFor();
  expect(new URL(page.url()).pathname).toBe(`/console/${title === 'Audit log' ? 'audit' : title.toLowerCase()}`);
}

const HUMAN_IN_THE_LOOP = {
  max_actions_per_hour: 1000,
  max_actions_per_day: 10000,
  require_human_approval: ['billing:refund'],
};

async function askForApproval(agent: AgentFixture, params: Record<string, unknown>): Promise<string> {
  const asked = await execute(t, agent, actionBody(agent, 'refund', params));
  expect(asked.status).toBe(200);
  expect(asked.body.reasons.map((r: { code: string }) => r.code)).toEqual(['APPROVAL_REQUIRED']);
  return asked.body.approval_id as string;
}

test('an operator approves in the console what an agent asked for, and the agent then executes it', async () => {
  const org = await signUp(t, 'console');
  const operator = await addUser(t, org, 'operator');
  const agent = await readyAgent(t, org, { constraints: HUMAN_IN_THE_LOOP });
  const view = await openConsole();
  const { page } = view;
  await signIn(view, operator.email);
  await page.getByText('0 pending').waitFor();

  // The agent asks after the inbox is open: polling brings it in without a reload.
  const approvalId = await askForApproval(agent, { invoice: 'inv-7', amount: 120 });
  const card = page.getByRole('article', { name: `Approval ${approvalId}` });
  await card.waitFor({ timeout: POLL_WAIT_MS });
  await page.getByText('1 pending').waitFor();
  const text = await card.innerText();
  expect(text).toContain('billing:refund');
  expect(text).toContain(agent.svcId);
  expect(text).toContain('version 1.0.0');
  expect(text).toContain('APPROVAL_REQUIRED');
  expect(text).toContain('"invoice": "inv-7"');
  expect(text).toContain('"amount": 120');
  await screenshot(page, 'approvals-pending');

  // Keyboard only: from the page heading, Tab reaches the notes, then Approve, with a visible focus ring.
  await page.getByRole('heading', { level: 1, name: 'Approvals' }).focus();
  const notes = card.getByLabel('Notes (approve) or reason (deny)');
  const approve = card.getByRole('button', { name: 'Approve' });
  for (let presses = 0; presses < 40 && !(await notes.evaluate((el) => el === document.activeElement)); presses++) {
    await page.keyboard.press('Tab');
  }
  expect(await notes.evaluate((el) => el === document.activeElement)).toBe(true);
  await page.keyboard.type('refund checked with finance');
  await page.keyboard.press('Tab');
  expect(await approve.evaluate((el) => el === document.activeElement)).toBe(true);
  const ring = await approve.evaluate((el) => {
    const style = getComputedStyle(el);
    return { visible: el.matches(':focus-visible'), style: style.outlineStyle, width: parseFloat(style.outlineWidth) };
  });
  expect(ring).toEqual({ visible: true, style: 'solid', width: 3 });
  await screenshot(page, 'approvals-keyboard-focus');
  await page.keyboard.press('Enter');

  await card.waitFor({ state: 'detached' });
  await page.getByText('0 pending').waitFor();
  const decided = await t.request('GET', `/api/v1/orgs/${org.orgId}/approvals/${approvalId}`, {
    token: org.adminToken,
  });
  expect(decided.body).toMatchObject({
    status: 'approved',
    decided_by: operator.email,
    notes: 'refund checked with finance',
  });

  const run = await execute(t, agent, {
    ...actionBody(agent, 'refund', { invoice: 'inv-7', amount: 120 }),
    approval_id: approvalId,
  });
  expect(run.body).toMatchObject({
    decision: 'allow',
    executed: true,
    approval_id: approvalId,
    result: { success: true },
  });

  // The approval, now used, is in the history with its notes.
  await page.getByLabel('Status').selectOption('consumed');
  await page
    .getByRole('article', { name: `Approval ${approvalId}` })
    .getByText('refund checked with finance')
    .waitFor();
  expect(view.problems).toEqual([]);
});

test('denying needs a reason, and the agent is then refused', async () => {
  const org = await signUp(t, 'console');
  const agent = await readyAgent(t, org, { constraints: HUMAN_IN_THE_LOOP });
  const olderId = await askForApproval(agent, { invoice: 'inv-8', amount: 10 });
  const approvalId = await askForApproval(agent, { invoice: 'inv-9', amount: 5000 });
  const view = await openConsole();
  await signIn(view, org.adminEmail);
  const card = view.page.getByRole('article', { name: `Approval ${approvalId}` });
  await card.getByRole('button', { name: 'Deny' }).click();
  await card.getByRole('alert').getByText('A reason is required to deny.').waitFor();
  expect(
    (await t.request('GET', `/api/v1/orgs/${org.orgId}/approvals/${approvalId}`, { token: org.adminToken })).body
      .status,
  ).toBe('pending');

  await card.getByLabel('Notes (approve) or reason (deny)').fill('too large without a ticket');
  await card.getByRole('button', { name: 'Deny' }).click();
  await card.waitFor({ state: 'detached' });
  const decided = await t.request('GET', `/api/v1/orgs/${org.orgId}/approvals/${approvalId}`, {
    token: org.adminToken,
  });
  expect(decided.body).toMatchObject({ status: 'denied', reason: 'too large without a ticket' });
  const run = await execute(t, agent, {
    ...actionBody(agent, 'refund', { invoice: 'inv-9', amount: 5000 }),
    approval_id: approvalId,
  });
  expect(run.body.decision).toBe('deny');

  // All statuses: the pending one first although the denied one is newer.
  await view.page.getByLabel('Status').selectOption('');
  const order = await eventually(
    () =>
      view.page
        .locator('[data-approval-id]')
        .evaluateAll((cards) => cards.map((card) => card.getAttribute('data-approval-id'))),
    (ids) => ids.length === 2,
  );
  expect(order).toEqual([olderId, approvalId]);
  expect(view.problems).toEqual([]);
});

test('an operator approves a subset of a manifest’s capabilities, then suspends it with a reason', async () => {
  const org = await signUp(t, 'console');
  const operator = await addUser(t, org, 'operator');
  const pending = await createManifest(
    t,
    org,
    'pending',
    manifestPayload({ capabilities: ['billing:read', 'billing:write', 'email:send'] }),
  );
  const view = await openConsole();
  const { page } = view;
  await signIn(view, operator.email);
  await goTo(view, 'Manifests');
  const card = page.locator(`[data-manifest-id="${pending.manifestId}"]`);
  await card.waitFor();
  const boxes = card.getByRole('group', { name: 'Capabilities to approve' }).getByRole('checkbox');
  expect(await boxes.count()).toBe(3);
  await card.getByRole('checkbox', { name: 'email:send' }).uncheck();
  await screenshot(page, 'manifests-review');
  await card.getByRole('button', { name: 'Approve selected' }).click();
  await card.waitFor({ state: 'detached' });

  const approved = await t.request('GET', `/api/v1/orgs/${org.orgId}/manifests/${pending.manifestId}`, {
    token: org.adminToken,
  });
  expect(approved.body.status).toBe('active');
  expect(approved.body.capabilities).toEqual({
    requested: ['billing:read', 'billing:write', 'email:send'],
    approved: ['billing:read', 'billing:write'],
  });

  await page.getByLabel('Status').selectOption('active');
  const active = page.locator(`[data-manifest-id="${pending.manifestId}"]`);
  await active.getByText('not approved').waitFor();
  await active.getByRole('button', { name: 'Suspend' }).click();
  await active.getByRole('alert').getByText('A reason is required.').waitFor();
  await active.getByLabel('Reason (or notes to reactivate)').fill('key leaked in a log');
  await active.getByRole('button', { name: 'Suspend' }).click();
  await active.waitFor({ state: 'detached' });
  const suspended = await t.request('GET', `/api/v1/orgs/${org.orgId}/manifests/${pending.manifestId}`, {
    token: org.adminToken,
  });
  expect(suspended.body).toMatchObject({ status: 'suspended', reason: 'key leaked in a log' });

  await page.getByLabel('Status').selectOption('suspended');
  const history = page.locator(`[data-manifest-id="${pending.manifestId}"]`).getByText('History');
  await history.click();
  await page.locator(`[data-manifest-id="${pending.manifestId}"] .history-list li`).first().waitFor();
  await screenshot(page, 'manifests-history');
  expect(view.problems).toEqual([]);
});

test('an operator sees an agent’s usage against its budgets and deactivates it; the gateway then refuses it', async () => {
  const org = await signUp(t, 'console');
  const operator = await addUser(t, org, 'operator');
  const agent = await readyAgent(t, org, { constraints: { max_actions_per_hour: 50, max_actions_per_day: 500 } });
  for (let i = 0; i < 2; i++) expect((await execute(t, agent)).body.decision).toBe('allow');
  const view = await openConsole();
  const { page } = view;
  await signIn(view, operator.email);
  await goTo(view, 'Agents');
  const card = page.getByRole('article', { name: `Agent ${agent.svcId}` });
  await card.waitFor();
  const usage = await card.innerText();
  expect(usage).toMatch(/This hour\s+2 \/ 50 resets/);
  expect(usage).toMatch(/Today\s+2 \/ 500 resets/);
  expect(await card.getByRole('meter').count()).toBe(2);
  await screenshot(page, 'agents');

  await card.getByLabel('Reason for deactivating').fill('incident 42');
  await card.getByRole('button', { name: 'Deactivate' }).click();
  await card.getByText('incident 42').waitFor();
  expect(await card.getByRole('button', { name: 'Deactivate' }).count()).toBe(0);
  // Reactivating is an admin's decision: no button for an operator.
  expect(await card.getByRole('button', { name: 'Reactivate' }).count()).toBe(0);

  const read = await t.request('GET', `/api/v1/agents/${agent.svcId}`, { token: org.adminToken });
  expect(read.body).toMatchObject({
    status: 'deactivated',
    deactivation_reason: 'incident 42',
    deactivated_by: operator.email,
  });
  const refused = await execute(t, agent);
  expect(refused.body.reasons.map((r: { code: string }) => r.code)).toContain('AGENT_DEACTIVATED');
  expect(view.problems).toEqual([]);

  // An admin can bring it back.
  const admin = await openConsole();
  await signIn(admin, org.adminEmail);
  await goTo(admin, 'Agents');
  const adminCard = admin.page.getByRole('article', { name: `Agent ${agent.svcId}` });
  await adminCard.getByRole('button', { name: 'Reactivate' }).click();
  await adminCard.getByRole('button', { name: 'Deactivate' }).waitFor();
  expect((await t.request('GET', `/api/v1/agents/${agent.svcId}`, { token: org.adminToken })).body.status).toBe(
    'active',
  );
  expect(admin.problems).toEqual([]);
});

describe('a viewer', () => {
  let org: OrgFixture;
  let viewer: { email: string; token: string };
  let approvalId: string;

  beforeAll(async () => {
    org = await signUp(t, 'console');
    viewer = await addUser(t, org, 'viewer');
    const agent = await readyAgent(t, org, { constraints: HUMAN_IN_THE_LOOP });
    approvalId = await askForApproval(agent, { invoice: 'inv-3', amount: 30 });
    await createManifest(t, org, 'pending');
  });

  test('sees approvals, manifests and agents without any decision button, and the API refuses the decision anyway', async () => {
    const view = await openConsole();
    const { page } = view;
    await signIn(view, viewer.email);
    const card = page.getByRole('article', { name: `Approval ${approvalId}` });
    await card.waitFor();
    await screenshot(page, 'viewer-approvals');
    const main = page.getByRole('main');
    expect(await main.getByRole('button').count()).toBe(0);
    expect(await main.getByRole('textbox').count()).toBe(0);

    await goTo(view, 'Manifests');
    await page.locator('[data-manifest-id]').first().waitFor();
    expect(await main.getByRole('checkbox').count()).toBe(0);
    expect(await main.getByRole('button').count()).toBe(0);
    await screenshot(page, 'viewer-manifests');

    await goTo(view, 'Agents');
    await page.locator('[data-agent-id]').first().waitFor();
    expect(await main.getByRole('button').count()).toBe(0);

    await goTo(view, 'Policies');
    await page.getByText('No policies yet.').waitFor();
    expect(await main.getByRole('button').count()).toBe(0);
    // Records may be verified by anyone; the export is for admins and operators.
    await goTo(view, 'Records');
    await page.locator('[data-record-id]').first().waitFor();
    expect(await main.getByRole('button', { name: 'Verify' }).count()).toBeGreaterThan(0);
    expect(await main.getByRole('button', { name: 'Download export' }).count()).toBe(0);

    // The console's own session, used directly: the API refuses a viewer's decision.
    const token = await page.evaluate(
      () => JSON.parse(sessionStorage.getItem('agent-gateway.console.session')!).token as string,
    );
    const refused = await t.graphql(
      'mutation($org_id: ID!, $approval_id: ID!) { approve_approval(org_id: $org_id, approval_id: $approval_id) { status } }',
      { org_id: org.orgId, approval_id: approvalId },
      { token },
    );
    expect(refused.body.errors[0].extensions.code).toBe('FORBIDDEN');
    const still = await t.request('GET', `/api/v1/orgs/${org.orgId}/approvals/${approvalId}`, {
      token: org.adminToken,
    });
    expect(still.body.status).toBe('pending');
    expect(view.problems).toEqual([]);
  });
});

test('the session lives in sessionStorage only, is refreshed when it expires, and sign-out revokes it', async () => {
  const org = await signUp(t, 'console');
  const view = await openConsole();
  const { page } = view;
  await signIn(view, org.adminEmail);
  const storedSession = () => page.evaluate(() => sessionStorage.getItem('agent-gateway.console.session'));
  const first = JSON.parse((await storedSession())!);
  expect(first.user).toMatchObject({ email: org.adminEmail, role: 'admin', org_id: org.orgId });
  expect(await page.evaluate(() => localStorage.length)).toBe(0);

  // A reload keeps the tab's session.
  await page.reload();
  await page.getByRole('heading', { level: 1, name: 'Approvals' }).waitFor();

  // As if the access token were about to expire: the next poll refreshes it first.
  await page.evaluate(() => {
    const key = 'agent-gateway.console.session';
    const session = JSON.parse(sessionStorage.getItem(key)!);
    sessionStorage.setItem(key, JSON.stringify({ ...session, expires: new Date(Date.now() - 1000).toISOString() }));
  });
  await page.reload();
  await page.getByRole('heading', { level: 1, name: 'Approvals' }).waitFor();
  await page.waitForFunction(
    (old) => JSON.parse(sessionStorage.getItem('agent-gateway.console.session')!).token !== old,
    first.token,
  );
  const renewed = JSON.parse((await storedSession())!);
  expect(renewed.refresh_token).not.toBe(first.refresh_token);
  expect((await t.request('GET', '/api/v1/agents', { token: renewed.token })).status).toBe(200);

  await page.getByRole('button', { name: 'Sign out' }).click();
  await page.getByRole('button', { name: 'Sign in', exact: true }).waitFor();
  expect(await storedSession()).toBeNull();
  const afterSignOut = await eventually(
    async () => (await t.request('GET', '/api/v1/agents', { token: renewed.token })).status,
    (status) => status === 401,
  );
  expect(afterSignOut).toBe(401);
  // Sign-out ends the whole session: the first token of this login too.
  expect((await t.request('GET', '/api/v1/agents', { token: first.token })).status).toBe(401);
  const reused = await t.request('POST', '/auth/refresh', { body: { refresh_token: renewed.refresh_token } });
  expect(reused.status).toBe(401);
  expect(view.problems).toEqual([]);
});

test('a refresh the database cannot answer keeps the session: the page says why, and a later poll renews it', async () => {
  const org = await signUp(t, 'console-outage');
  const view = await openConsole();
  const { page } = view;
  await signIn(view, org.adminEmail);
  const key = 'agent-gateway.console.session';
  const before = await page.evaluate((k) => JSON.parse(sessionStorage.getItem(k)!), key);
  // The database goes away for this org's refresh-token rotations (57P03: cannot connect now).
  const sql = t.database.db.sql;
  await sql.query(
    `CREATE FUNCTION away_while_rotating() RETURNS trigger LANGUAGE plpgsql AS $$
     BEGIN
       IF EXISTS (SELECT 1 FROM session_families f WHERE f.id = NEW.family_id AND f.org_id = '${org.orgId}'::uuid) THEN
         RAISE EXCEPTION 'the database went away' USING ERRCODE = '57P03';
       END IF;
       RETURN NEW;
     END $$`,
  );
  await sql.query(
    'CREATE TRIGGER away_while_rotating BEFORE UPDATE ON refresh_tokens FOR EACH ROW EXECUTE FUNCTION away_while_rotating()',
  );
  const alert = page.getByRole('alert');
  try {
    // As if the access token were about to expire: the page's first request refreshes first.
    await page.evaluate((k) => {
      const session = JSON.parse(sessionStorage.getItem(k)!);
      sessionStorage.setItem(k, JSON.stringify({ ...session, expires: new Date(Date.now() - 1000).toISOString() }));
    }, key);
    await page.reload();
    await alert.waitFor();
    await expect(alert.textContent()).resolves.toContain('The database cannot be reached at the moment');
    // Still signed in: the console, not the sign-in page, and the session kept as it was.
    await expect(page.getByRole('button', { name: 'Sign out' }).isVisible()).resolves.toBe(true);
    expect(await page.evaluate((k) => JSON.parse(sessionStorage.getItem(k)!).refresh_token, key)).toBe(
      before.refresh_token,
    );
  } finally {
    await sql.query('DROP TRIGGER away_while_rotating ON refresh_tokens');
    await sql.query('DROP FUNCTION away_while_rotating()');
  }
  // The database back, the next poll renews the session with the same refresh token.
  await page.waitForFunction(
    ([k, old]) => JSON.parse(sessionStorage.getItem(k)!).token !== old,
    [key, before.token as string] as const,
    { timeout: POLL_WAIT_MS },
  );
  await alert.waitFor({ state: 'detached', timeout: POLL_WAIT_MS });
  expect(view.problems).toEqual([]);
});

test('the browser enforces the CSP (an injected inline script does not run) and a wrong password is shown, not thrown', async () => {
  const view = await openConsole();
  const { page } = view;
  await page.getByLabel('Email').fill('nobody@example.com');
  await page.getByLabel('Password').fill('not the password');
  await page.getByRole('button', { name: 'Sign in', exact: true }).click();
  // In words alone: the API's code (INVALID_TOKEN) would only puzzle whoever mistyped.
  await page.getByRole('alert').waitFor();
  expect(await page.getByRole('alert').textContent()).toBe('Email or password is wrong');
  await screenshot(page, 'sign-in-failed');
  expect(view.problems).toEqual([]);

  const ran = await page.evaluate(() => {
    const script = document.createElement('script');
    script.textContent = 'window.inlineRan = true';
    document.head.append(script);
    return (window as unknown as { inlineRan?: boolean }).inlineRan === true;
  });
  expect(ran).toBe(false);
  const reported = await eventually(() => view.problems.some((p) => p.includes('script-src')), Boolean);
  expect(reported).toBe(true);
});

test('a newcomer creates an organization from the sign-in page and lands in the console as its admin', async () => {
  const view = await openConsole();
  const { page } = view;
  const help = page.getByText('No account?');
  await help.getByRole('link', { name: 'Create an organization' }).click();
  await page.getByRole('heading', { level: 1, name: 'Create an organization' }).waitFor();
  expect(new URL(page.url()).pathname).toBe('/console/sign-up');
  const form = page.getByRole('form', { name: 'Create an organization' });
  const slug = `console-new-${Date.now().toString(36)}`;
  const email = `founder@${slug}.example`;
  // What the service refuses is shown at its field, in the service's words, and nothing is created.
  await form.getByLabel('Organization name').fill('Console Newcomers');
  await form.getByLabel('Slug').fill('Not A Slug');
  await form.getByLabel('Admin email').fill(email);
  await form.getByLabel('Password').fill(PASSWORD);
  await form.getByRole('button', { name: 'Create organization' }).click();
  const slugField = form.getByLabel('Slug');
  await form.getByText('must be 1-63 lowercase letters, digits or hyphens').waitFor();
  expect(await slugField.getAttribute('aria-invalid')).toBe('true');
  expect(await slugField.evaluate((el) => el === document.activeElement)).toBe(true);
  expect((await t.request('POST', '/api/v1/auth/login', { body: { email, password: PASSWORD } })).status).toBe(401);
  await screenshot(page, 'sign-up-refused');

  await slugField.fill(slug);
  await form.getByRole('button', { name: 'Create organization' }).click();
  // Signed in as the new admin, at the console's home.
  await page.getByRole('heading', { level: 1, name: 'Approvals' }).waitFor();
  expect(new URL(page.url()).pathname).toBe('/console');
  expect(await page.locator('.who').innerText()).toContain(email);
  expect(await page.locator('.who .role').innerText()).toBe('admin');
  await page.getByRole('navigation', { name: 'Console' }).getByRole('link', { name: 'Users' }).waitFor();
  await screenshot(page, 'sign-up-done');

  // The organization and its admin exist as a sign-up through the API makes them.
  const token = await login(t, email);
  const session = await page.evaluate(() => JSON.parse(sessionStorage.getItem('agent-gateway.console.session')!));
  const org = await t.request('GET', `/api/v1/orgs/${session.user.org_id}`, { token });
  expect(org.body).toMatchObject({ name: 'Console Newcomers', slug, admin_user: { email, role: 'admin' } });
  expect(view.problems).toEqual([]);
});

test('a slug that is taken is shown at its field; Sign in goes back to the sign-in page', async () => {
  const existing = await signUp(t, 'console');
  const view = await openConsole();
  const { page } = view;
  await page.goto(`${base}/console/sign-up`);
  const form = page.getByRole('form', { name: 'Create an organization' });
  await form.getByLabel('Organization name').fill('Second');
  await form.getByLabel('Slug').fill(existing.slug);
  await form.getByLabel('Admin email').fill(`other@${existing.slug}.example`);
  await form.getByLabel('Password').fill(PASSWORD);
  await form.getByRole('button', { name: 'Create organization' }).click();
  await form.getByText('An organization with this slug exists').waitFor();
  expect(await form.getByLabel('Slug').getAttribute('aria-invalid')).toBe('true');
  await page.getByRole('link', { name: 'Sign in' }).click();
  await page.getByRole('button', { name: 'Sign in', exact: true }).waitFor();
  expect(new URL(page.url()).pathname).toBe('/console');
  // And back: the browser's history holds both pages.
  await page.goBack();
  await page.getByRole('heading', { level: 1, name: 'Create an organization' }).waitFor();
  expect(view.problems).toEqual([]);
});

describe('with SIGNUP=closed', () => {
  let closedServer: Server;
  let closedBase: string;
  let closedApp: TestApp | undefined;
  beforeAll(async () => {
    // The same database, served by an app that takes no sign-ups.
    closedApp = await startTestApp({ SIGNUP: 'closed' }, { db: t.database.db });
    closedServer = createServer(closedApp.app.yoga);
    await new Promise<void>((resolve) => closedServer.listen(0, '127.0.0.1', resolve));
    closedBase = `http://127.0.0.1:${(closedServer.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    if (closedServer) await new Promise((resolve) => closedServer.close(resolve));
    await closedApp?.app.stop();
  });

  test('the sign-in page does not offer sign-up, and its address says sign-up is closed without a form', async () => {
    const view = await watchedPage(await newContext());
    const { page } = view;
    await page.goto(`${closedBase}/console`);
    const help = page.getByText('No account?');
    await help.waitFor();
    expect(await help.textContent()).toBe(
      'No account? An admin of your organization adds you; this deployment does not take sign-ups.',
    );
    expect(await page.getByRole('link', { name: 'Create an organization' }).count()).toBe(0);
    expect(await page.getByText('Create an organization').count()).toBe(0);
    await screenshot(page, 'sign-in-sign-up-closed');

    await page.goto(`${closedBase}/console/sign-up`);
    await page.getByText('Sign-up is closed on this deployment').waitFor();
    expect(await page.getByRole('form', { name: 'Create an organization' }).count()).toBe(0);
    expect(await page.getByLabel('Password').count()).toBe(0);
    expect(view.problems).toEqual([]);
  });
});

test('every page fits a 400 px wide window without horizontal scrolling', async () => {
  const org = await signUp(t, 'console');
  const agent = await readyAgent(t, org, { constraints: HUMAN_IN_THE_LOOP });
  // Long unbroken values are where narrow layouts overflow.
  await askForApproval(agent, { invoice: `inv-${'9'.repeat(80)}`, note: 'x'.repeat(200) });
  await createManifest(t, org, 'pending');
  const view = await openConsole(NARROW);
  const { page } = view;
  expect(await horizontalOverflow(page)).toBeLessThanOrEqual(0);
  await screenshot(page, 'narrow-sign-in');
  await signIn(view, org.adminEmail);
  await page.locator('[data-approval-id]').first().waitFor();
  expect(await horizontalOverflow(page)).toBeLessThanOrEqual(0);
  await screenshot(page, 'narrow-approvals');
  await goTo(view, 'Manifests');
  await page.locator('[data-manifest-id]').first().waitFor();
  expect(await horizontalOverflow(page)).toBeLessThanOrEqual(0);
  await screenshot(page, 'narrow-manifests');
  await goTo(view, 'Agents');
  await page.locator('[data-agent-id]').first().waitFor();
  expect(await horizontalOverflow(page)).toBeLessThanOrEqual(0);
  await screenshot(page, 'narrow-agents');
  await goTo(view, 'Policies');
  await page.getByRole('button', { name: 'New policy' }).click();
  await page.getByRole('form', { name: 'New policy' }).getByLabel('Effect').selectOption('rate_limit');
  expect(await horizontalOverflow(page)).toBeLessThanOrEqual(0);
  await screenshot(page, 'narrow-policies');
  await goTo(view, 'Records');
  await page.locator('[data-record-id]').first().waitFor();
  expect(await horizontalOverflow(page)).toBeLessThanOrEqual(0);
  await screenshot(page, 'narrow-records');
  await goTo(view, 'Audit log');
  await page.locator('[data-audit-id]').first().waitFor();
  expect(await horizontalOverflow(page)).toBeLessThanOrEqual(0);
  await screenshot(page, 'narrow-audit');
  expect(view.problems).toEqual([]);
});

test('policies: a CEL error is shown at its position, then the policy is created and its shadow matches are listed', async () => {
  const org = await signUp(t, 'console');
  const agent = await readyAgent(t, org);
  const view = await openConsole();
  const { page } = view;
  await signIn(view, org.adminEmail);
  await goTo(view, 'Policies');
  await page.getByRole('button', { name: 'New policy' }).click();
  const form = page.getByRole('form', { name: 'New policy' });
  await form.getByLabel('Name').fill('big refunds (shadow)');
  await form.getByLabel('Mode').selectOption('shadow');
  const condition = form.getByLabel('Condition (CEL; empty: always)');
  await condition.fill("agent.id == 'x' &&\n  (params.amount > )");
  await form.getByRole('button', { name: 'Create' }).click();
  const problem = form.locator('.cel-error');
  await problem.waitFor();
  expect(await problem.getByRole('paragraph').innerText()).toMatch(/^at line 2, column 20: /);
  // The offending line with a caret under column 20.
  expect(await problem.locator('pre').innerText()).toBe(`  (params.amount > )\n${' '.repeat(19)}^`);
  expect(await condition.getAttribute('aria-invalid')).toBe('true');
  expect(await condition.evaluate((el) => el === document.activeElement)).toBe(true);
  await screenshot(page, 'policies-cel-error');
  const none = await t.request('GET', '/api/v1/policies', { token: org.adminToken });
  expect(none.body.total).toBe(0);

  await condition.fill('params.invoice == "inv-1"');
  await form.getByRole('button', { name: 'Create' }).click();
  const card = page.getByRole('article', { name: 'Policy big refunds (shadow)' });
  await card.waitFor();
  const created = await t.request('GET', '/api/v1/policies', { token: org.adminToken });
  expect(created.body.items).toMatchObject([
    { name: 'big refunds (shadow)', mode: 'shadow', effect: 'deny', condition: 'params.invoice == "inv-1"' },
  ]);

  // A shadow deny never changes the decision, but it is reported and listed as a match.
  const run = await execute(t, agent);
  expect(run.body.decision).toBe('allow');
  await eventually(
    () => card.innerText(),
    (text) => text.includes('1 of the latest 1 decisions'),
  );
  expect(await card.innerText()).toContain('1 of the latest 1 decisions');
  await screenshot(page, 'policies');

  // Edit: a new version.
  await card.getByRole('button', { name: 'Edit' }).click();
  const edit = page.getByRole('form', { name: 'Edit policy big refunds (shadow)' });
  await edit.getByLabel('Priority').fill('7');
  await edit.getByRole('button', { name: 'Save' }).click();
  await page.getByRole('article', { name: 'Policy big refunds (shadow)' }).waitFor();
  const replaced = await t.request('GET', `/api/v1/policies/${created.body.items[0].policy_id}`, {
    token: org.adminToken,
  });
  expect(replaced.body).toMatchObject({ priority: 7, version: 2, mode: 'shadow' });
  expect(view.problems).toEqual([]);
});

test('policies: the trifecta from its examples, in shadow, then enforced; the denied send in records, filtered by label', async () => {
  const org = await signUp(t, 'console');
  const agent = await readyAgent(t, org, { capabilities: ['files:read', 'email:send'] });
  for (const type of ['files', 'email']) {
    const tool = await t.request('POST', `/api/v1/orgs/${org.orgId}/tools`, {
      token: org.adminToken,
      body: { action_type: type, connector: 'mock', config: { response: { ok: true } } },
    });
    expect(tool.status).toBe(201);
  }
  const view = await openConsole();
  const { page } = view;
  await signIn(view, org.adminEmail);
  await goTo(view, 'Policies');
  for (const example of ['Label private reads', 'Nothing out after private data']) {
    await page.getByRole('button', { name: 'New policy' }).click();
    const form = page.getByRole('form', { name: 'New policy' });
    await form.getByRole('group', { name: 'Examples' }).getByRole('button', { name: example }).click();
    await form.getByRole('button', { name: 'Create' }).click();
    await page.getByRole('article', { name: `Policy ${example}` }).waitFor();
  }
  const created = await t.request('GET', '/api/v1/policies', { token: org.adminToken });
  expect(created.body.items).toEqual(
    expect.arrayContaining([
      expect.objectContaining({ effect: 'label', labels: ['private'], mode: 'shadow' }),
      expect.objectContaining({
        effect: 'deny',
        mode: 'shadow',
        history_window_seconds: 3600,
        condition: 'history.exists(h, "private" in h.labels && h.executed)',
      }),
    ]),
  );
  const guard = page.getByRole('article', { name: 'Policy Nothing out after private data' });
  expect(await guard.innerText()).toContain('the agent’s decisions of the last 3600 s');
  await screenshot(page, 'policies-trifecta');
  // Enforced: both edited to enforce, through the form.
  for (const name of ['Label private reads', 'Nothing out after private data']) {
    await page
      .getByRole('article', { name: `Policy ${name}` })
      .getByRole('button', { name: 'Edit' })
      .click();
    const edit = page.getByRole('form', { name: `Edit policy ${name}` });
    await edit.getByLabel('Mode').selectOption('enforce');
    await edit.getByRole('button', { name: 'Save' }).click();
    await page.getByRole('article', { name: `Policy ${name}` }).waitFor();
  }
  const call = (type: string, tool: string) =>
    t.request('POST', '/api/v1/gateway/execute', {
      apiKey: agent.key,
      body: { svc_id: agent.svcId, agent_id: agent.svcId, action: { type, tool, params: {} } },
    });
  expect((await call('files', 'read')).body).toMatchObject({ decision: 'allow', labels: ['private'] });
  expect((await call('email', 'send')).body.reasons[0].code).toBe('POLICY_DENIED');

  await goTo(view, 'Records');
  await page.getByText('2 records', { exact: true }).waitFor();
  await page.getByLabel('Label').fill('private');
  await page.getByText('1 record', { exact: true }).waitFor();
  const labelled = page.locator('[data-record-id]');
  expect(await labelled.innerText()).toContain('files:read');
  expect(await labelled.locator('.label').innerText()).toBe('private');
  await screenshot(page, 'records-labels');
  expect(view.problems).toEqual([]);
});

test('records: filter by agent, verify one, download the export; the audit log filters by action', async () => {
  const org = await signUp(t, 'console');
  const first = await readyAgent(t, org);
  const second = await readyAgent(t, org);
  expect((await execute(t, first)).body.decision).toBe('allow');
  expect((await execute(t, second)).body.decision).toBe('allow');
  expect((await execute(t, second, actionBody(second, 'delete'))).body.decision).toBe('deny');
  const view = await openConsole();
  const { page } = view;
  await signIn(view, org.adminEmail);
  await goTo(view, 'Records');
  await page.getByText('3 records', { exact: true }).waitFor();
  await page.getByLabel('Agent id').fill(second.svcId);
  await page.getByText('2 records', { exact: true }).waitFor();
  await page.getByLabel('Status', { exact: true }).selectOption('denied');
  await page.getByText('1 record', { exact: true }).waitFor();
  const denied = page.locator('[data-record-id]');
  expect(await denied.count()).toBe(1);
  expect(await denied.innerText()).toContain('CAPABILITY_NOT_APPROVED');
  await denied.getByRole('button', { name: 'Verify' }).click();
  await denied.getByRole('status').getByText('Verified: signature ok, hash ok, chain ok').waitFor();
  // The first checkpoint of the org is signed when it is first read, so it covers all three.
  await denied
    .getByRole('status', { name: 'Transparency log' })
    .getByText('In the transparency log: the signed checkpoint of 3 records includes it (checked in this browser)')
    .waitFor();
  await screenshot(page, 'records');

  const [download] = await Promise.all([
    page.waitForEvent('download'),
    page.getByRole('button', { name: 'Download export' }).click(),
  ]);
  expect(download.suggestedFilename()).toMatch(/^records-.*\.jsonl$/);
  const lines = readFileSync((await download.path())!, 'utf8')
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line));
  expect(lines[0]).toMatchObject({ type: 'header', org_id: org.orgId, count: 3 });
  expect(lines.slice(1).map((line) => line.type)).toEqual(['record', 'record', 'record']);

  await goTo(view, 'Audit log');
  await page.getByLabel('Action (e.g. manifest or manifest.approved)').fill('manifest.approved');
  await eventually(
    () => page.locator('[data-audit-id]').count(),
    (count) => count === 2,
  );
  const entries = await page.locator('[data-audit-id]').allInnerTexts();
  expect(entries).toHaveLength(2);
  for (const entry of entries) expect(entry).toContain(`manifest.approved by ${org.adminEmail}`);
  await screenshot(page, 'audit');
  expect(view.problems).toEqual([]);
});
