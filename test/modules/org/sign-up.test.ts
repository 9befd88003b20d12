/**
 * SIGNUP: open by default; `closed` refuses every sign-up, through REST and GraphQL alike, with 403
 * FORBIDDEN before any work (nothing created, the per-address throttle not counted); a value that
 * is neither refuses to start (docs/decisions/0063-closed-sign-up-and-create-org.md).
 */
import { EnvError, parseEnv } from '../../../src/env.js';
import { startTestApp, type TestApp } from '../../support/app.js';
import { PASSWORD } from '../../support/fixtures.js';

const CLOSED = 'sign-up is closed on this deployment';

let open: TestApp;
/** A second app on the same database, as a deployment that closed sign-up and restarted would be. */
let closed: TestApp;
beforeAll(async () => {
  // One sign-up per address an hour on the open app: a single counted refusal would show.
  open = await startTestApp({ SIGNUP_MAX_PER_ADDRESS: '1' });
  closed = await startTestApp({ SIGNUP: 'closed', SIGNUP_MAX_PER_ADDRESS: '1' }, { db: open.database.db });
});
afterAll(async () => {
  await closed?.app.stop();
  await open?.close();
});

let addresses = 0;
/** A client address of its own per call, so the open app's limit of one never gets in the way by accident. */
const freshAddress = () => `198.18.40.${++addresses}`;

const newOrg = (slug: string, extra: Record<string, unknown> = {}) => ({
  name: `Org ${slug}`,
  slug,
  admin_email: `admin@${slug}.example`,
  admin_password: PASSWORD,
  ...extra,
});

const CREATE = `mutation ($name: String!, $slug: String!, $admin_email: String!, $admin_password: String!) {
  create_organization(name: $name, slug: $slug, admin_email: $admin_email, admin_password: $admin_password) { org_id }
}`;

/** An org signed up on the open app, from an address of its own. */
async function openSignUp(prefix: string) {
  const slug = `${prefix}-${Date.now().toString(36)}`;
  const created = await open.request('POST', '/api/v1/orgs', { body: newOrg(slug), clientAddress: freshAddress() });
  expect(created.status).toBe(201);
  return { orgId: created.body.org_id as string, slug, adminEmail: `admin@${slug}.example` };
}

const counts = async () =>
  (
    await open.database.db.sql.query<{ orgs: number; users: number; audit: number }>(
      `SELECT (SELECT count(*)::int FROM organizations) AS orgs, (SELECT count(*)::int FROM users) AS users,
              (SELECT count(*)::int FROM audit_logs) AS audit`,
    )
  )[0];

describe('SIGNUP', () => {
  test('is open by default: parseEnv says so and a sign-up creates the org', async () => {
    expect(parseEnv({}).signup).toBe('open');
    expect(parseEnv({ SIGNUP: 'closed' }).signup).toBe('closed');
    const org = await openSignUp('open');
    const login = await open.request('POST', '/api/v1/auth/login', {
      body: { email: org.adminEmail, password: PASSWORD },
    });
    const read = await open.request('GET', `/api/v1/orgs/${org.orgId}`, { token: login.body.access_token });
    expect(read.body).toMatchObject({ slug: org.slug, admin_user: { email: org.adminEmail, role: 'admin' } });
  });

  test('any value but open or closed refuses to start, naming the variable and the value', () => {
    for (const value of ['close', 'no', 'true', 'opened']) {
      expect(() => parseEnv({ SIGNUP: value })).toThrow(EnvError);
      expect(() => parseEnv({ SIGNUP: value })).toThrow(`SIGNUP must be "open"`);
      expect(() => parseEnv({ SIGNUP: value })).toThrow(`got "${value}"`);
    }
  });

  test('closed: POST /api/v1/orgs is 403 FORBIDDEN with the message, and nothing is created', async () => {
    const before = await counts();
    const slug = `closed-rest-${Date.now().toString(36)}`;
    const refused = await closed.request('POST', '/api/v1/orgs', { body: newOrg(slug), clientAddress: freshAddress() });
    expect({ status: refused.status, body: refused.body }).toEqual({
      status: 403,
      body: { detail: { code: 'FORBIDDEN', message: CLOSED } },
    });
    expect(await counts()).toEqual(before);
    // No admin came of it: the email and password that were sent do not log in.
    const login = await open.request('POST', '/api/v1/auth/login', {
      body: { email: `admin@${slug}.example`, password: PASSWORD },
    });
    expect(login.status).toBe(401);
  });

  test('closed: GraphQL create_organization is 403 FORBIDDEN with the message, and nothing is created', async () => {
    const before = await counts();
    const slug = `closed-gql-${Date.now().toString(36)}`;
    const refused = await closed.graphql(CREATE, newOrg(slug), { clientAddress: freshAddress() });
    expect(refused.status).toBe(403);
    expect(refused.body.data).toBeNull();
    expect(refused.body.errors).toHaveLength(1);
    expect(refused.body.errors[0]).toMatchObject({ message: CLOSED, extensions: { code: 'FORBIDDEN' } });
    expect(await counts()).toEqual(before);
    expect(
      (
        await open.request('POST', '/api/v1/auth/login', {
          body: { email: `admin@${slug}.example`, password: PASSWORD },
        })
      ).status,
    ).toBe(401);
  });

  test('closed: values the API would refuse (422) or a taken slug (409) are the same 403: nothing is looked at', async () => {
    const taken = await openSignUp('taken');
    for (const body of [newOrg('Not A Slug', { admin_password: 'short' }), newOrg(taken.slug)]) {
      const refused = await closed.request('POST', '/api/v1/orgs', { body, clientAddress: freshAddress() });
      expect([refused.status, refused.body.detail?.message]).toEqual([403, CLOSED]);
    }
  });

  test('closed: refused sign-ups do not count against the address (SIGNUP_MAX_PER_ADDRESS)', async () => {
    const address = freshAddress();
    const prefix = `throttle-${Date.now().toString(36)}`;
    for (let i = 0; i < 3; i++) {
      const refused = await closed.request('POST', '/api/v1/orgs', {
        body: newOrg(`${prefix}-${i}`),
        clientAddress: address,
      });
      expect(refused.status).toBe(403);
    }
    // Once sign-up is open again, the address still has its one sign-up of the hour, and only one.
    const first = await open.request('POST', '/api/v1/orgs', { body: newOrg(`${prefix}-a`), clientAddress: address });
    expect(first.status).toBe(201);
    const second = await open.request('POST', '/api/v1/orgs', { body: newOrg(`${prefix}-b`), clientAddress: address });
    expect(second.status).toBe(429);
    expect(second.body.error).toMatchObject({ code: 'POLICY_VIOLATION', details: { limit: 1, current: 2 } });
  });

  test('GET /api/v1/signup and GraphQL signup say whether sign-up is open, without credentials', async () => {
    for (const [app, isOpen] of [
      [open, true],
      [closed, false],
    ] as const) {
      const rest = await app.request('GET', '/api/v1/signup');
      expect({ status: rest.status, body: rest.body }).toEqual({ status: 200, body: { open: isOpen } });
      const graphql = await app.graphql('{ signup { open } }');
      expect({ status: graphql.status, body: graphql.body }).toEqual({
        status: 200,
        body: { data: { signup: { open: isOpen } } },
      });
    }
  });

  test('closed: everything else still works (logins, an org read)', async () => {
    const org = await openSignUp('still');
    const login = await closed.request('POST', '/api/v1/auth/login', {
      body: { email: org.adminEmail, password: PASSWORD },
    });
    expect(login.status).toBe(200);
    const read = await closed.request('GET', `/api/v1/orgs/${org.orgId}`, { token: login.body.access_token });
    expect(read.status).toBe(200);
    expect(read.body.slug).toBe(org.slug);
  });
});
