/**
 * The console's Users page end to end: Debian's Chromium against the real service on a real port.
 * An admin changes a role and removes a user; the organization's last admin is refused both, and
 * the page shows the service's 409 message; operators are not offered the page.
 *
 * Conventions of console.e2e.test.ts: each test has its own organization and browser context,
 * screenshots go to test/artifacts/, skipped with a notice without Chromium (failing under CI).
 */
import {
  chromiumTests,
  horizontalOverflow,
  NARROW,
  screenshot,
  submitSignIn,
  watchedPage,
  type ConsolePage,
} from '../../support/console.js';
import { addUser, signUp, type OrgFixture } from '../../support/fixtures.js';
import { servedApp } from '../../support/served-app.js';

const { test, newContext } = chromiumTests();
const served = servedApp();

async function openAs(email: string, viewport?: typeof NARROW): Promise<ConsolePage> {
  const view = await watchedPage(await newContext(viewport));
  await view.page.goto(`${served.base}/console`);
  await submitSignIn(view.page, email);
  await view.page.getByRole('heading', { level: 1, name: 'Approvals' }).waitFor();
  return view;
}

const usersLink = ({ page }: ConsolePage) =>
  page.getByRole('navigation', { name: 'Console' }).getByRole('link', { name: 'Users' });

async function goToUsers(view: ConsolePage) {
  await usersLink(view).click();
  await view.page.getByRole('heading', { level: 1, name: 'Users' }).waitFor();
  expect(new URL(view.page.url()).pathname).toBe('/console/users');
}

const card = ({ page }: ConsolePage, email: string) => page.getByRole('article', { name: `User ${email}` });

/** A new org with a second admin, signed in on the Users page with their own card at hand. */
async function secondAdminOnUsers() {
  const org = await signUp(served.t, 'console-users');
  const second = await addUser(served.t, org, 'admin');
  const view = await openAs(second.email);
  await goToUsers(view);
  return { org, second, view, page: view.page, mine: card(view, second.email) };
}

/** The org's users as the API lists them: [email, role]. */
const rolesOf = async (org: OrgFixture) =>
  (await served.t.request('GET', `/api/v1/orgs/${org.orgId}/users`, { token: org.adminToken })).body.items.map(
    (u: { email: string; role: string }) => [u.email, u.role],
  );

test('an admin lists the users with their roles, changes a role and removes a user', async () => {
  const org = await signUp(served.t, 'console-users');
  const operator = await addUser(served.t, org, 'operator');
  const viewer = await addUser(served.t, org, 'viewer');
  const view = await openAs(org.adminEmail);
  const { page } = view;
  await goToUsers(view);
  await page.getByText('3 users').waitFor();
  for (const [email, role] of [
    [org.adminEmail, 'admin'],
    [operator.email, 'operator'],
    [viewer.email, 'viewer'],
  ]) {
    expect(await card(view, email).locator('.status').textContent()).toBe(role);
  }
  expect(await card(view, org.adminEmail).getByRole('heading').textContent()).toBe(`${org.adminEmail} (you)`);
  await screenshot(page, 'users');

  const operatorCard = card(view, operator.email);
  const change = operatorCard.getByRole('button', { name: 'Change role' });
  // Nothing to change until another role is chosen.
  expect(await change.isDisabled()).toBe(true);
  await operatorCard.getByLabel('Role').selectOption('viewer');
  await change.click();
  await operatorCard.locator('.status', { hasText: 'viewer' }).waitFor();
  expect(await change.isDisabled()).toBe(true);
  // The operator's session, already open, has a viewer's rights now.
  const tool = await served.t.request('POST', `/api/v1/orgs/${org.orgId}/tools`, {
    token: operator.token,
    body: { action_type: 'billing', connector: 'mock' },
  });
  expect(tool.status).toBe(403);

  const viewerCard = card(view, viewer.email);
  await viewerCard.getByRole('button', { name: 'Remove' }).click();
  const question = viewerCard.getByRole('group', { name: `Remove ${viewer.email}?` });
  // The question's focus rests on Cancel: an Enter pressed by habit removes nobody.
  expect(await question.getByRole('button', { name: 'Cancel' }).evaluate((el) => el === document.activeElement)).toBe(
    true,
  );
  await question.getByRole('button', { name: 'Yes, remove' }).click();
  await viewerCard.waitFor({ state: 'detached' });
  await page.getByText('2 users').waitFor();
  expect(await rolesOf(org)).toEqual([
    [org.adminEmail, 'admin'],
    [operator.email, 'viewer'],
  ]);
  expect((await served.t.request('GET', `/api/v1/orgs/${org.orgId}`, { token: viewer.token })).status).toBe(401);
  expect(view.problems).toEqual([]);
});

test("the last admin is refused demotion and removal, and the page shows the service's reason", async () => {
  const org = await signUp(served.t, 'console-users');
  const view = await openAs(org.adminEmail);
  const { page } = view;
  await goToUsers(view);
  const mine = card(view, org.adminEmail);
  await mine.getByLabel('Role').selectOption('operator');
  await mine.getByRole('button', { name: 'Change role' }).click();
  const alert = mine.getByRole('alert');
  await alert.waitFor();
  expect(await alert.textContent()).toBe(
    "The organization's last admin cannot be demoted: make another user admin first (CONFLICT)",
  );
  await screenshot(page, 'users-last-admin');

  await mine.getByRole('button', { name: 'Remove' }).click();
  await mine
    .getByRole('group', { name: `Remove ${org.adminEmail}?` })
    .getByRole('button', { name: 'Yes, remove' })
    .click();
  await mine.getByRole('alert').filter({ hasText: 'cannot be removed' }).waitFor();
  expect(await mine.getByRole('alert').textContent()).toBe(
    "The organization's last admin cannot be removed: make another user admin first (CONFLICT)",
  );
  // Still signed in, still the admin.
  expect(await mine.locator('.status').textContent()).toBe('admin');
  expect(await rolesOf(org)).toEqual([[org.adminEmail, 'admin']]);
  expect(view.problems).toEqual([]);
});

test('an admin who demotes themself is no longer offered the page; operators never are', async () => {
  const { org, second, view, page, mine } = await secondAdminOnUsers();
  await mine.getByLabel('Role').selectOption('operator');
  await mine.getByRole('button', { name: 'Change role' }).click();
  await page.getByText("The organization's users and their roles are shown to admins only.").waitFor();
  expect(await usersLink(view).count()).toBe(0);
  expect(await page.locator('.who .role').textContent()).toBe('operator');
  expect(await rolesOf(org)).toEqual([
    [org.adminEmail, 'admin'],
    [second.email, 'operator'],
  ]);

  const operator = await openAs((await addUser(served.t, org, 'operator')).email);
  expect(await usersLink(operator).count()).toBe(0);
  await operator.page.goto(`${served.base}/console/users`);
  await operator.page.getByText("The organization's users and their roles are shown to admins only.").waitFor();
  expect(await operator.page.getByRole('main').getByRole('button').count()).toBe(0);
  expect([...view.problems, ...operator.problems]).toEqual([]);
});

test('an admin who removes themself is signed out', async () => {
  const { org, second, view, page, mine } = await secondAdminOnUsers();
  await mine.getByRole('button', { name: 'Remove' }).click();
  await mine
    .getByRole('group', { name: `Remove ${second.email}?` })
    .getByRole('button', { name: 'Yes, remove' })
    .click();
  await page.getByRole('button', { name: 'Sign in', exact: true }).waitFor();
  expect(await page.evaluate(() => sessionStorage.getItem('agent-gateway.console.session'))).toBeNull();
  expect(await rolesOf(org)).toEqual([[org.adminEmail, 'admin']]);
  expect(view.problems).toEqual([]);
});

test('the Users page fits a 400 px wide window without horizontal scrolling', async () => {
  const org = await signUp(served.t, 'console-users');
  await addUser(served.t, org, 'viewer');
  const view = await openAs(org.adminEmail, NARROW);
  await goToUsers(view);
  await view.page.getByText('2 users').waitFor();
  expect(await horizontalOverflow(view.page)).toBeLessThanOrEqual(0);
  await screenshot(view.page, 'narrow-users');
  expect(view.problems).toEqual([]);
});
