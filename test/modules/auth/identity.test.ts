import { decodeJwt, decodeProtectedHeader } from 'jose';
import { isWellFormedApiKey } from '../../../src/modules/api-key/api-key-format.js';
import { startTestApp, type TestApp, type TestResponse } from '../../support/app.js';
import { PASSWORD, addUser, createKey, login, signUp } from '../../support/fixtures.js';
import { passwordHashes } from '../../support/metrics.js';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ LOGIN_MAX_FAILURES_PER_EMAIL: '3', LOGIN_MAX_FAILURES_PER_ADDRESS: '5' });
});
afterAll(() => t.close());

const auditActions = async (orgId: string) =>
  (
    await t.database.db.sql.query<{ action: string; target_id: string; actor_label: string }>(
      'SELECT action, target_id, actor_label FROM audit_logs WHERE org_id = $1 ORDER BY created_at, id',
      [orgId],
    )
  ).map((r) => r.action);

describe('organizations', () => {
  test('sign-up creates the org and its admin, and reads back the same shape', async () => {
    const created = await t.request('POST', '/api/v1/orgs', {
      body: {
        name: 'Acme Robotics',
        slug: 'acme-robotics',
        admin_email: 'Ops@Acme.Example ',
        admin_password: PASSWORD,
      },
    });
    expect(created.status).toBe(201);
    expect(created.body).toEqual({
      org_id: expect.stringMatching(/^[0-9a-f-]{36}$/),
      name: 'Acme Robotics',
      slug: 'acme-robotics',
      operator_rate_limit_per_minute: 1000,
      approval_ttl_seconds: 86400,
      record_params: true,
      admin_user: {
        user_id: expect.stringMatching(/^[0-9a-f-]{36}$/),
        email: 'ops@acme.example',
        org_id: created.body.org_id,
        role: 'admin',
        created_at: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/),
      },
      created_at: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/),
    });
    const token = await login(t, 'ops@acme.example');
    const read = await t.request('GET', `/api/v1/orgs/${created.body.org_id}`, { token });
    expect(read.status).toBe(200);
    expect(read.body).toEqual(created.body);
    expect(await auditActions(created.body.org_id)).toEqual(['org.created', 'user.created']);
  });

  test.each([
    [{ slug: 'Upper' }, 'slug'],
    [{ slug: '-lead' }, 'slug'],
    [{ slug: 'has space' }, 'slug'],
    [{ admin_email: 'not-an-email' }, 'admin_email'],
    [{ admin_password: 'elevenchars' }, 'admin_password'],
    [{ name: '  ' }, 'name'],
  ])('sign-up with %j is a 422 naming %s', async (override, field) => {
    const body = {
      name: 'X',
      slug: 'valid-slug-x',
      admin_email: 'x@valid.example',
      admin_password: PASSWORD,
      ...override,
    };
    const response = await t.request('POST', '/api/v1/orgs', { body });
    expect(response.status).toBe(422);
    expect(response.body.error.code).toBe('VALIDATION_ERROR');
    expect(response.body.error.details.errors).toEqual([{ field, message: expect.any(String) }]);
  });

  test('a missing field and a wrong type are 422 with the field named', async () => {
    const missing = await t.request('POST', '/api/v1/orgs', { body: { name: 'X', slug: 'x-missing' } });
    expect(missing.status).toBe(422);
    expect(missing.body.error.details.errors.map((e: { field: string }) => e.field).sort()).toEqual([
      'admin_email',
      'admin_password',
    ]);
    const wrongType = await t.request('POST', '/api/v1/orgs', {
      body: { name: 'X', slug: 42, admin_email: 'w@x.example', admin_password: PASSWORD },
    });
    expect(wrongType.status).toBe(422);
    expect(wrongType.body.error.details.errors[0].field).toBe('slug');
  });

  test('slug and admin email are unique: 409 CONFLICT', async () => {
    const org = await signUp(t);
    const sameSlug = await t.request('POST', '/api/v1/orgs', {
      body: { name: 'Y', slug: org.slug, admin_email: 'other@y.example', admin_password: PASSWORD },
    });
    expect(sameSlug.status).toBe(409);
    expect(sameSlug.body.error).toMatchObject({ code: 'CONFLICT', details: { field: 'slug' } });
    const sameEmail = await t.request('POST', '/api/v1/orgs', {
      body: { name: 'Y', slug: `${org.slug}-2`, admin_email: org.adminEmail.toUpperCase(), admin_password: PASSWORD },
    });
    expect(sameEmail.status).toBe(409);
    expect(sameEmail.body.error).toMatchObject({ code: 'CONFLICT', details: { field: 'admin_email' } });
  });

  test('admins change the name and operator rate limit; bad values are 422', async () => {
    const org = await signUp(t);
    const updated = await t.request('PATCH', `/api/v1/orgs/${org.orgId}`, {
      token: org.adminToken,
      body: { name: 'Renamed', operator_rate_limit_per_minute: 250 },
    });
    expect(updated.status).toBe(200);
    expect(updated.body).toMatchObject({ name: 'Renamed', operator_rate_limit_per_minute: 250, slug: org.slug });
    const bad = await t.request('PATCH', `/api/v1/orgs/${org.orgId}`, {
      token: org.adminToken,
      body: { operator_rate_limit_per_minute: 0 },
    });
    expect(bad.status).toBe(422);
    expect(bad.body.error.details.errors[0].field).toBe('operator_rate_limit_per_minute');
    expect(await auditActions(org.orgId)).toContain('org.updated');
  });
});

describe('sign-up throttling', () => {
  // A second app on the same database, allowing 5 sign-ups per client address an hour.
  let throttled: TestApp;
  beforeAll(async () => {
    throttled = await startTestApp({ SIGNUP_MAX_PER_ADDRESS: '5' }, { db: t.database.db });
  });
  afterAll(() => throttled.app.stop());

  const newOrg = (slug: string, extra: Record<string, unknown> = {}) => ({
    name: `Org ${slug}`,
    slug,
    admin_email: `admin@${slug}.example`,
    admin_password: PASSWORD,
    ...extra,
  });
  const signUpFrom = (clientAddress: string, body: Record<string, unknown>) =>
    throttled.request('POST', '/api/v1/orgs', { body, clientAddress });
  const orgsWithSlugPrefix = async (prefix: string) =>
    (
      await t.database.db.sql.query<{ n: number }>('SELECT count(*)::int AS n FROM organizations WHERE slug LIKE $1', [
        `${prefix}%`,
      ])
    )[0].n;

  test('30 concurrent sign-ups from one address: exactly 5 orgs, 25 refused with Retry-After and no argon2; another address is unaffected', async () => {
    const prefix = `flood-${Date.now().toString(36)}`;
    const hashed = await passwordHashes(throttled, 'hash');
    const responses = await Promise.all(
      Array.from({ length: 30 }, (_, i) => signUpFrom('198.18.20.1', newOrg(`${prefix}-${i}`))),
    );
    expect(responses.filter((r) => r.status === 201)).toHaveLength(5);
    const refused = responses.filter((r) => r.status === 429);
    expect(refused).toHaveLength(25);
    for (const response of refused) {
      expect(response.body.error).toMatchObject({
        code: 'POLICY_VIOLATION',
        details: { limit: 5, period: '1h', current: expect.any(Number) },
      });
      expect(response.body.error.details.current).toBeGreaterThan(5);
      expect(Number(response.headers.get('retry-after'))).toBeGreaterThan(0);
    }
    expect(await orgsWithSlugPrefix(prefix)).toBe(5);
    expect((await passwordHashes(throttled, 'hash')) - hashed).toBe(5);

    // The GraphQL mutation behind the route is the same sign-up, counted the same.
    const graphql = await throttled.graphql(
      'mutation ($slug: String!, $email: String!, $password: String!) { create_organization(name: "G", slug: $slug, admin_email: $email, admin_password: $password) { org_id } }',
      { slug: `${prefix}-graphql`, email: `admin@${prefix}-graphql.example`, password: PASSWORD },
      { clientAddress: '198.18.20.1' },
    );
    expect(graphql.status).toBe(429);
    expect(graphql.body.errors[0].extensions).toMatchObject({
      code: 'POLICY_VIOLATION',
      details: { limit: 5, period: '1h' },
    });
    expect((await signUpFrom('198.18.20.2', newOrg(`${prefix}-elsewhere`))).status).toBe(201);
  });

  test('a taken slug or email is 409 without hashing the password and counts; bad input (422) does not count', async () => {
    const prefix = `taken-${Date.now().toString(36)}`;
    const address = '198.18.21.1';
    const first = await signUpFrom(address, newOrg(`${prefix}-a`));
    expect(first.status).toBe(201);
    const hashed = await passwordHashes(throttled, 'hash');
    const sameSlug = await signUpFrom(address, newOrg(`${prefix}-a`, { admin_email: `other@${prefix}.example` }));
    expect(sameSlug.status).toBe(409);
    expect(sameSlug.body.error).toMatchObject({ code: 'CONFLICT', details: { field: 'slug' } });
    const sameEmail = await signUpFrom(address, newOrg(`${prefix}-b`, { admin_email: `ADMIN@${prefix}-a.example` }));
    expect(sameEmail.status).toBe(409);
    expect(sameEmail.body.error).toMatchObject({ code: 'CONFLICT', details: { field: 'admin_email' } });
    expect((await passwordHashes(throttled, 'hash')) - hashed).toBe(0);

    for (const bad of [{ slug: 'Not A Slug' }, { admin_email: 'nope' }, { admin_password: 'short' }]) {
      expect((await signUpFrom(address, newOrg(`${prefix}-c`, bad))).status).toBe(422);
    }
    // Counted so far: one created and two conflicts, of 5. Two more fit, then 429.
    expect((await signUpFrom(address, newOrg(`${prefix}-d`))).status).toBe(201);
    expect((await signUpFrom(address, newOrg(`${prefix}-e`))).status).toBe(201);
    expect((await signUpFrom(address, newOrg(`${prefix}-f`))).status).toBe(429);
    expect((await passwordHashes(throttled, 'hash')) - hashed).toBe(2);
  });

  test('concurrent sign-ups for one slug: the unique constraint decides, one 201 and the rest 409', async () => {
    const slug = `race-${Date.now().toString(36)}`;
    const responses = await Promise.all(
      Array.from({ length: 5 }, (_, i) =>
        signUpFrom(`198.18.22.${i}`, newOrg(slug, { admin_email: `admin${i}@${slug}.example` })),
      ),
    );
    expect(responses.map((r) => r.status).sort()).toEqual([201, 409, 409, 409, 409]);
    for (const loser of responses.filter((r) => r.status === 409))
      expect(loser.body.error.details).toEqual({ field: 'slug' });
    expect(await orgsWithSlugPrefix(slug)).toBe(1);
  });
});

describe('users', () => {
  test('admins add users with a role and list them; the new user can log in', async () => {
    const org = await signUp(t);
    const operator = await addUser(t, org, 'operator');
    const list = await t.request('GET', `/api/v1/orgs/${org.orgId}/users`, { token: org.adminToken });
    expect(list.status).toBe(200);
    expect(list.body.total).toBe(2);
    expect(list.body.items.map((u: { email: string; role: string }) => [u.email, u.role])).toEqual([
      [org.adminEmail, 'admin'],
      [operator.email, 'operator'],
    ]);
    expect(JSON.stringify(list.body)).not.toMatch(/password/i);
  });

  test('an unknown role and a duplicate email are refused', async () => {
    const org = await signUp(t);
    const badRole = await t.request('POST', `/api/v1/orgs/${org.orgId}/users`, {
      token: org.adminToken,
      body: { email: 'r@x.example', password: PASSWORD, role: 'owner' },
    });
    expect(badRole.status).toBe(422);
    expect(badRole.body.error.details.errors[0].field).toBe('role');
    const dup = await t.request('POST', `/api/v1/orgs/${org.orgId}/users`, {
      token: org.adminToken,
      body: { email: org.adminEmail, password: PASSWORD, role: 'viewer' },
    });
    expect(dup.status).toBe(409);
  });
});

describe('sessions', () => {
  test('login returns an EdDSA session JWT valid for 3600 s, a refresh token and the user', async () => {
    const org = await signUp(t);
    const response = await t.request('POST', '/api/v1/auth/login', {
      body: { email: org.adminEmail, password: PASSWORD },
    });
    expect(response.status).toBe(200);
    expect(response.body).toEqual({
      access_token: expect.any(String),
      token_type: 'bearer',
      expires_in: 3600,
      refresh_token: expect.stringMatching(/^agr_[A-Za-z0-9_-]{43}$/),
      user: expect.objectContaining({
        user_id: org.adminUserId,
        email: org.adminEmail,
        org_id: org.orgId,
        role: 'admin',
      }),
    });
    const header = decodeProtectedHeader(response.body.access_token);
    expect(header).toMatchObject({ alg: 'EdDSA', typ: 'session+jwt' });
    const claims = decodeJwt(response.body.access_token);
    expect(claims.exp! - claims.iat!).toBe(3600);
    expect(claims.aud).toBe('agent-gateway:session');
  });

  test('wrong password and unknown email give the same 401', async () => {
    const org = await signUp(t);
    const wrong = await t.request('POST', '/api/v1/auth/login', {
      body: { email: org.adminEmail, password: 'wrong password!!' },
      clientAddress: '198.51.100.7',
    });
    const unknown = await t.request('POST', '/api/v1/auth/login', {
      body: { email: 'nobody@nowhere.example', password: 'wrong password!!' },
      clientAddress: '198.51.100.7',
    });
    expect(wrong.status).toBe(401);
    expect(unknown.status).toBe(401);
    expect(wrong.body).toEqual(unknown.body);
    expect(wrong.body).toEqual({ detail: { code: 'INVALID_TOKEN', message: expect.any(String) } });
  });

  test('refresh returns a new token and revokes the old one', async () => {
    const org = await signUp(t);
    const refreshed = await t.request('POST', '/api/v1/auth/refresh', { token: org.adminToken });
    expect(refreshed.status).toBe(200);
    expect(refreshed.body).toEqual({ access_token: expect.any(String), token_type: 'bearer', expires_in: 3600 });
    expect(refreshed.body.access_token).not.toBe(org.adminToken);
    const old = await t.request('GET', `/api/v1/orgs/${org.orgId}`, { token: org.adminToken });
    expect(old.status).toBe(401);
    expect(old.body.detail.code).toBe('INVALID_TOKEN');
    const fresh = await t.request('GET', `/api/v1/orgs/${org.orgId}`, { token: refreshed.body.access_token });
    expect(fresh.status).toBe(200);
  });

  test('logout answers 204 without a body and revokes the token', async () => {
    const org = await signUp(t);
    const out = await t.request('POST', '/api/v1/auth/logout', { token: org.adminToken });
    expect(out.status).toBe(204);
    expect(out.text).toBe('');
    const after = await t.request('GET', `/api/v1/orgs/${org.orgId}`, { token: org.adminToken });
    expect(after.status).toBe(401);
    expect(after.body.detail.code).toBe('INVALID_TOKEN');
  });

  test('an expired token is INVALID_TOKEN', async () => {
    const org = await signUp(t);
    const expired = await t.app.services.sessions.startSession(
      { id: org.adminUserId, orgId: org.orgId, email: org.adminEmail, role: 'admin' },
      'password',
      -1,
    );
    const response = await t.request('GET', `/api/v1/orgs/${org.orgId}`, { token: expired.access_token });
    expect(response.status).toBe(401);
    expect(response.body.detail).toEqual({ code: 'INVALID_TOKEN', message: 'The bearer token has expired' });
  });

  test('logins are throttled per email after repeated failures, even with the right password', async () => {
    const org = await signUp(t);
    for (let i = 0; i < 3; i++) {
      const failed = await t.request('POST', '/api/v1/auth/login', {
        body: { email: org.adminEmail, password: `wrong password ${i}` },
        clientAddress: `203.0.113.${i + 1}`,
      });
      expect(failed.status).toBe(401);
    }
    const blocked = await t.request('POST', '/api/v1/auth/login', {
      body: { email: org.adminEmail, password: PASSWORD },
      clientAddress: '203.0.113.99',
    });
    expect(blocked.status).toBe(429);
    // Attempts are counted before the password is checked: the refused one is the fourth.
    expect(blocked.body.error).toMatchObject({
      code: 'POLICY_VIOLATION',
      details: { limit: 3, period: '15m', current: 4 },
    });
    expect(Number(blocked.headers.get('retry-after'))).toBeGreaterThan(0);
  });

  test('logins are throttled per client address across emails', async () => {
    const address = '198.51.100.200';
    for (let i = 0; i < 5; i++) {
      const failed = await t.request('POST', '/api/v1/auth/login', {
        body: { email: `guess${i}@x.example`, password: 'guess guess guess' },
        clientAddress: address,
      });
      expect(failed.status).toBe(401);
    }
    const org = await signUp(t);
    const blocked = await t.request('POST', '/api/v1/auth/login', {
      body: { email: org.adminEmail, password: PASSWORD },
      clientAddress: address,
    });
    expect(blocked.status).toBe(429);
    const elsewhere = await t.request('POST', '/api/v1/auth/login', {
      body: { email: org.adminEmail, password: PASSWORD },
      clientAddress: '198.51.100.201',
    });
    expect(elsewhere.status).toBe(200);
  });
});

describe('login throttling under concurrency', () => {
  // This file's app allows 3 failed logins per email and 5 per client address in 15 minutes.
  const attempt = (email: string, password: string, clientAddress: string) =>
    t.request('POST', '/api/v1/auth/login', { body: { email, password }, clientAddress });
  const statusCounts = (responses: { status: number }[]) =>
    responses.reduce<Record<number, number>>((counts, r) => {
      counts[r.status] = (counts[r.status] ?? 0) + 1;
      return counts;
    }, {});

  function expectThrottled(refused: TestResponse[], limit: number) {
    for (const response of refused) {
      expect(response.body.error).toMatchObject({
        code: 'POLICY_VIOLATION',
        details: { limit, period: '15m', current: expect.any(Number) },
      });
      expect(response.body.error.details.current).toBeGreaterThan(limit);
      expect(Number(response.headers.get('retry-after'))).toBeGreaterThan(0);
    }
  }

  test('60 concurrent wrong passwords for one email: 3 are checked, 57 refused without running argon2', async () => {
    const org = await signUp(t);
    const verified = await passwordHashes(t, 'verify');
    // Each from its own address, so that only the email's limit applies.
    const responses = await Promise.all(
      Array.from({ length: 60 }, (_, i) => attempt(org.adminEmail, `wrong password ${i}`, `198.18.1.${i}`)),
    );
    expect(statusCounts(responses)).toEqual({ 401: 3, 429: 57 });
    expectThrottled(
      responses.filter((r) => r.status === 429),
      3,
    );
    expect((await passwordHashes(t, 'verify')) - verified).toBe(3);
    // The right password is refused too until the window ends, still without argon2.
    expect((await attempt(org.adminEmail, PASSWORD, '198.18.1.200')).status).toBe(429);
    expect((await passwordHashes(t, 'verify')) - verified).toBe(3);
  });

  test('60 concurrent unknown emails from one address: 5 are checked, 55 refused without running argon2', async () => {
    const org = await signUp(t);
    const verified = await passwordHashes(t, 'verify');
    const responses = await Promise.all(
      Array.from({ length: 60 }, (_, i) => attempt(`nobody-${i}@nowhere.example`, 'guess guess guess', '198.18.2.1')),
    );
    expect(statusCounts(responses)).toEqual({ 401: 5, 429: 55 });
    expectThrottled(
      responses.filter((r) => r.status === 429),
      5,
    );
    expect((await passwordHashes(t, 'verify')) - verified).toBe(5);
    // Unknown email and wrong password: the same 401 after the same argon2 work.
    const [unknown, wrong] = await Promise.all([
      attempt('nobody@nowhere.example', 'guess guess guess', '198.18.2.2'),
      attempt(org.adminEmail, 'guess guess guess', '198.18.2.3'),
    ]);
    expect(unknown.status).toBe(401);
    expect(wrong.body).toEqual(unknown.body);
    expect((await passwordHashes(t, 'verify')) - verified).toBe(7);
    // Another address is not affected.
    expect((await attempt(org.adminEmail, PASSWORD, '198.18.2.4')).status).toBe(200);
  });

  test('a correct password below the limit logs in and gives back what the attempt took', async () => {
    const org = await signUp(t);
    const address = '198.18.3.1';
    // Two failures for the email (limit 3), then the right password: it gets in and clears them.
    for (const response of await Promise.all(
      [1, 2].map((i) => attempt(org.adminEmail, `wrong password ${i}`, address)),
    )) {
      expect(response.status).toBe(401);
    }
    expect((await attempt(org.adminEmail, PASSWORD, address)).status).toBe(200);
    for (let i = 3; i <= 5; i++)
      expect((await attempt(org.adminEmail, `wrong password ${i}`, `198.18.3.${i}`)).status).toBe(401);
    // The address counted 2 failures and no success (limit 5): 3 more failures fit, not 4.
    const more = await Promise.all(
      [6, 7, 8, 9].map((i) => attempt(`nobody-${i}@nowhere.example`, 'guess guess guess', address)),
    );
    expect(statusCounts(more)).toEqual({ 401: 3, 429: 1 });
  });
});

describe('API keys', () => {
  test('the secret is shown once, has the agw_ prefix and a valid checksum; listings show only the prefix', async () => {
    const org = await signUp(t);
    const created = await t.request('POST', `/api/v1/orgs/${org.orgId}/api-keys`, {
      token: org.adminToken,
      body: {
        name: 'ci bot',
        description: 'reads manifests',
        scopes: ['manifests:read', 'logs:read'],
        expires_in_days: 30,
        svc_ids: ['billing-agent'],
      },
    });
    expect(created.status).toBe(201);
    const key = created.body.key as string;
    expect(key).toMatch(/^agw_[0-9A-Za-z]{49}$/);
    expect(isWellFormedApiKey(key)).toBe(true);
    expect(created.body).toMatchObject({
      key_id: expect.stringMatching(/^key_/),
      name: 'ci bot',
      description: 'reads manifests',
      key_prefix: key.slice(0, 12),
      scopes: ['manifests:read', 'logs:read'],
      svc_ids: ['billing-agent'],
    });
    const days = (Date.parse(created.body.expires_at) - Date.parse(created.body.created_at)) / 86_400_000;
    expect(Math.round(days)).toBe(30);

    const list = await t.request('GET', `/api/v1/orgs/${org.orgId}/api-keys`, { token: org.adminToken });
    expect(list.status).toBe(200);
    expect(list.body.total).toBe(1);
    expect(list.body.items[0]).toEqual({
      key_id: created.body.key_id,
      name: 'ci bot',
      description: 'reads manifests',
      key_prefix: key.slice(0, 12),
      scopes: ['manifests:read', 'logs:read'],
      svc_ids: ['billing-agent'],
      user_id: null,
      last_used_at: null,
      expires_at: created.body.expires_at,
      created_at: created.body.created_at,
    });
    expect(list.text).not.toContain(key);
    const [stored] = await t.database.db.sql.query<{ key_hash: string }>(
      'SELECT key_hash FROM api_keys WHERE id = $1',
      [created.body.key_id],
    );
    expect(stored.key_hash).toMatch(/^[0-9a-f]{64}$/);
    expect(stored.key_hash).not.toContain(key.slice(4, 20));
  });

  test('default lifetime is 90 days; scopes and lifetime are validated', async () => {
    const org = await signUp(t);
    const created = await t.request('POST', `/api/v1/orgs/${org.orgId}/api-keys`, {
      token: org.adminToken,
      body: { name: 'default', scopes: ['gateway:execute'] },
    });
    expect(created.status).toBe(201);
    const days = (Date.parse(created.body.expires_at) - Date.parse(created.body.created_at)) / 86_400_000;
    expect(Math.round(days)).toBe(90);
    for (const [body, field] of [
      [{ name: 'x', scopes: ['admin:everything'] }, 'scopes[0]'],
      [{ name: 'x', scopes: [] }, 'scopes'],
      [{ name: 'x', scopes: ['logs:read'], expires_in_days: 0 }, 'expires_in_days'],
      [{ name: 'x', scopes: ['logs:read'], expires_in_days: 3651 }, 'expires_in_days'],
      [{ name: 'x', scopes: ['logs:read'], svc_ids: ['Not An Id'] }, 'svc_ids[0]'],
    ] as const) {
      const response = await t.request('POST', `/api/v1/orgs/${org.orgId}/api-keys`, { token: org.adminToken, body });
      expect({ body, status: response.status }).toEqual({ body, status: 422 });
      expect(response.body.error.details.errors.map((e: { field: string }) => e.field)).toContain(field);
    }
  });

  test('a key authenticates by SHA-256 lookup, records last use, and stops working once deleted', async () => {
    const org = await signUp(t);
    const { key, keyId } = await createKey(t, org, ['manifests:read']);
    // A key may not read API keys (admins only): the request authenticates, then is forbidden.
    const used = await t.request('GET', `/api/v1/orgs/${org.orgId}/api-keys`, { apiKey: key });
    expect(used.status).toBe(403);
    let lastUsed: string | null = null;
    for (let i = 0; i < 50 && !lastUsed; i++) {
      const list = await t.request('GET', `/api/v1/orgs/${org.orgId}/api-keys`, { token: org.adminToken });
      lastUsed = list.body.items.find((k: { key_id: string }) => k.key_id === keyId).last_used_at;
      if (!lastUsed) await new Promise((r) => setTimeout(r, 20));
    }
    expect(lastUsed).not.toBeNull();

    const deleted = await t.request('DELETE', `/api/v1/orgs/${org.orgId}/api-keys/${keyId}`, { token: org.adminToken });
    expect(deleted.status).toBe(204);
    expect(deleted.text).toBe('');
    const after = await t.request('GET', `/api/v1/orgs/${org.orgId}/api-keys`, { apiKey: key });
    expect(after.status).toBe(401);
    expect(after.body.detail.code).toBe('INVALID_TOKEN');
    const again = await t.request('DELETE', `/api/v1/orgs/${org.orgId}/api-keys/${keyId}`, { token: org.adminToken });
    expect(again.status).toBe(404);
    expect(await auditActions(org.orgId)).toEqual(expect.arrayContaining(['api_key.created', 'api_key.deleted']));
  });

  test('a key with a wrong checksum is rejected without a database read', async () => {
    const org = await signUp(t);
    const { key } = await createKey(t, org, ['manifests:read']);
    const mistyped = key.slice(0, 10) + (key[10] === 'A' ? 'B' : 'A') + key.slice(11);
    expect(isWellFormedApiKey(mistyped)).toBe(false);
    const response = await t.request('GET', `/api/v1/orgs/${org.orgId}`, { apiKey: mistyped });
    expect(response.status).toBe(401);
    expect(response.body.detail.code).toBe('INVALID_TOKEN');
  });
});
