/**
 * Rotating refresh tokens (docs/decisions/0012-rotating-refresh-tokens.md, RFC 9700 §4.14): a login starts a session
 * family; `refresh_session` exchanges a single-use refresh token for a new pair of the same family;
 * a used refresh token presented again revokes the whole family, refresh and access tokens alike;
 * logout revokes the family too. Over the real service: REST for login and for using access
 * tokens, GraphQL for `refresh_session` and `session_login` (their unprefixed REST routes are
 * mounted in src/http).
 */
import { SignJWT, decodeJwt } from 'jose';
import { SESSION_TOKEN_TYPE } from '../../../src/modules/auth/session.service.js';
import { sha256Hex } from '../../../src/lib/hash.js';
import { startTestApp, type TestApp, type TestResponse } from '../../support/app.js';
import { PASSWORD, addUser, signUp, type OrgFixture } from '../../support/fixtures.js';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

const refreshTokenFormat = /^agr_[A-Za-z0-9_-]{43}$/;

interface GraphQlBody<Data> {
  data: Data | null;
  errors?: { message: string; extensions: { code: string; details?: unknown } }[];
}
type Rotated = { token: string; refresh_token: string; expires: string };

const REFRESH_SESSION = `mutation Refresh($refresh_token: String!) {
  refresh_session(refresh_token: $refresh_token) { token refresh_token expires }
}`;
const SESSION_LOGIN = `mutation SessionLogin($email: String!, $password: String!) {
  session_login(email: $email, password: $password) { token refresh_token expires user { user_id email org_id role } }
}`;

/** Logs in through REST `/api/v1/auth/login`: a new session family. */
async function login(email: string): Promise<{ accessToken: string; refreshToken: string }> {
  const response = await t.request('POST', '/api/v1/auth/login', { body: { email, password: PASSWORD } });
  expect(response.status).toBe(200);
  return { accessToken: response.body.access_token, refreshToken: response.body.refresh_token };
}

function refreshSession(refreshToken: unknown): Promise<TestResponse<GraphQlBody<{ refresh_session: Rotated }>>> {
  return t.graphql(REFRESH_SESSION, { refresh_token: refreshToken });
}

/** Rotates and expects success. */
async function rotated(refreshToken: string): Promise<Rotated> {
  const response = await refreshSession(refreshToken);
  expect(response.body.errors).toBeUndefined();
  expect(response.status).toBe(200);
  return response.body.data!.refresh_session;
}

/** Expects the rotation to be refused as INVALID_TOKEN with a message matching `message`. */
async function expectRefused(refreshToken: unknown, message: RegExp) {
  const response = await refreshSession(refreshToken);
  expect(response.status).toBe(401);
  expect(response.body.data).toBeNull();
  expect(response.body.errors).toEqual([
    expect.objectContaining({
      message: expect.stringMatching(message),
      extensions: expect.objectContaining({ code: 'INVALID_TOKEN' }),
    }),
  ]);
}

/** The status of a bearer read of the org: 200 while the access token works, 401 once revoked. */
async function orgReadStatus(org: OrgFixture, accessToken: string): Promise<number> {
  return (await t.request('GET', `/api/v1/orgs/${org.orgId}`, { token: accessToken })).status;
}

const familyOf = (accessToken: string) => decodeJwt(accessToken).sid as string;

async function familyRow(familyId: string) {
  const [row] = await t.database.db.sql.query<{ revoked_at: Date | null; revoked_reason: string | null }>(
    'SELECT revoked_at, revoked_reason FROM session_families WHERE id = $1',
    [familyId],
  );
  return row;
}

describe('login', () => {
  test('returns an agr_ refresh token stored only as its SHA-256, in the family the access token names', async () => {
    const org = await signUp(t);
    const before = Date.now();
    const { accessToken, refreshToken } = await login(org.adminEmail);
    expect(refreshToken).toMatch(refreshTokenFormat);

    const rows = await t.database.db.sql.query<Record<string, unknown>>('SELECT * FROM refresh_tokens');
    // The token text is nowhere in the table, in any column of any row.
    expect(JSON.stringify(rows)).not.toContain(refreshToken);
    expect(JSON.stringify(rows)).not.toContain(refreshToken.slice(4));
    const row = rows.find((r) => r.token_hash === sha256Hex(refreshToken));
    expect(row).toMatchObject({
      family_id: familyOf(accessToken),
      user_id: org.adminUserId,
      org_id: org.orgId,
      used_at: null,
      replaced_by: null,
    });
    const thirtyDays = 30 * 86400 * 1000;
    expect((row!.expires_at as Date).getTime()).toBeGreaterThanOrEqual(before + thirtyDays - 5_000);
    expect((row!.expires_at as Date).getTime()).toBeLessThanOrEqual(Date.now() + thirtyDays + 5_000);
    expect(familyOf(accessToken)).toMatch(/^sfm_/);
  });
});

describe('refresh_session', () => {
  test('rotates; the old token presented again revokes its whole family, and only that family', async () => {
    const org = await signUp(t);
    // signUp logged in once already: org.adminToken is another family of the same user.
    const first = await login(org.adminEmail);

    const second = await rotated(first.refreshToken);
    expect(second.refresh_token).toMatch(refreshTokenFormat);
    expect(second.refresh_token).not.toBe(first.refreshToken);
    expect(second.token).not.toBe(first.accessToken);
    expect(familyOf(second.token)).toBe(familyOf(first.accessToken));
    expect(await orgReadStatus(org, second.token)).toBe(200);
    // The presented token is marked used and names its successor.
    const [used] = await t.database.db.sql.query<{ used_at: Date | null; replaced_by: string | null }>(
      'SELECT used_at, replaced_by FROM refresh_tokens WHERE token_hash = $1',
      [sha256Hex(first.refreshToken)],
    );
    expect(used.used_at).toBeInstanceOf(Date);
    expect(used.replaced_by).toBe(sha256Hex(second.refresh_token));

    // Reuse: the first refresh token again.
    await expectRefused(first.refreshToken, /already used/);
    // The whole family is revoked: the newest refresh token and both access tokens.
    await expectRefused(second.refresh_token, /revoked: one of its refresh tokens was used twice/);
    expect(await orgReadStatus(org, first.accessToken)).toBe(401);
    expect(await orgReadStatus(org, second.token)).toBe(401);
    const refused = await t.request('GET', `/api/v1/orgs/${org.orgId}`, { token: second.token });
    expect(refused.body.detail).toEqual({
      code: 'INVALID_TOKEN',
      message: expect.stringMatching(/session .* revoked/),
    });
    expect(await familyRow(familyOf(first.accessToken))).toMatchObject({
      revoked_at: expect.any(Date),
      revoked_reason: 'refresh_token_reused',
    });

    // The same user's other login is untouched.
    expect(await orgReadStatus(org, org.adminToken)).toBe(200);
    const other = await login(org.adminEmail);
    expect(await orgReadStatus(org, (await rotated(other.refreshToken)).token)).toBe(200);
  });

  test('a chain of rotations keeps working while each token is used once', async () => {
    const org = await signUp(t);
    let { refreshToken } = await login(org.adminEmail);
    const seen = new Set([refreshToken]);
    for (let i = 0; i < 5; i++) {
      const next = await rotated(refreshToken);
      expect(seen.has(next.refresh_token)).toBe(false);
      seen.add(next.refresh_token);
      expect(await orgReadStatus(org, next.token)).toBe(200);
      refreshToken = next.refresh_token;
    }
  });

  test('10 concurrent rotations with one token: exactly one succeeds', async () => {
    const org = await signUp(t);
    const { accessToken, refreshToken } = await login(org.adminEmail);
    const responses = await Promise.all(Array.from({ length: 10 }, () => refreshSession(refreshToken)));
    const succeeded = responses.filter((r) => r.status === 200 && r.body.data?.refresh_session);
    const refused = responses.filter((r) => r.status === 401 && r.body.errors?.[0].extensions.code === 'INVALID_TOKEN');
    expect(succeeded).toHaveLength(1);
    expect(refused).toHaveLength(9);
    // The nine losers presented a token that had been used (by the winner): that is reuse, and
    // RFC 9700 §4.14.2 has the server revoke the family because it cannot tell which holder is
    // the legitimate one. So the winner's new tokens are revoked too: a client that races itself
    // logs itself out, which is the price of reuse detection (no grace window is kept).
    const winner = succeeded[0].body.data!.refresh_session;
    await expectRefused(winner.refresh_token, /revoked/);
    expect(await orgReadStatus(org, winner.token)).toBe(401);
    expect(await orgReadStatus(org, accessToken)).toBe(401);
    expect(await familyRow(familyOf(accessToken))).toMatchObject({ revoked_reason: 'refresh_token_reused' });
    // Exactly one successor was ever stored: the one conditional UPDATE let one rotation through.
    const [{ n }] = await t.database.db.sql.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM refresh_tokens WHERE family_id = $1',
      [familyOf(accessToken)],
    );
    expect(n).toBe(2);
  });

  test('an expired refresh token is refused without revoking its family', async () => {
    const org = await signUp(t);
    const { accessToken, refreshToken } = await login(org.adminEmail);
    await t.database.db.sql.query(
      "UPDATE refresh_tokens SET expires_at = now() - interval '1 second' WHERE token_hash = $1",
      [sha256Hex(refreshToken)],
    );
    await expectRefused(refreshToken, /expired/);
    // Expiry is not theft: the access token of the family keeps working until its own expiry.
    expect(await orgReadStatus(org, accessToken)).toBe(200);
  });

  test('unknown, malformed and non-string refresh tokens are refused with 4xx, never 500', async () => {
    await expectRefused(`agr_${'A'.repeat(43)}`, /unknown/);
    for (const malformed of [
      '',
      'agr_',
      `agr_${'A'.repeat(42)}`,
      `agr_${'A'.repeat(44)}`,
      `agw_${'A'.repeat(43)}`,
      `agr_${'A'.repeat(42)}=`,
    ]) {
      await expectRefused(malformed, /malformed/);
    }
    // A megabyte of token text (the body stays under the 1 MiB limit): refused before hashing or a read.
    await expectRefused(`agr_${'A'.repeat(1_000_000)}`, /malformed/);

    // NUL cannot be stored, so the edge refuses it as a validation error naming the variable.
    const nul = await refreshSession(`agr_${'A'.repeat(21)}\u0000${'A'.repeat(21)}`);
    expect(nul.status).toBe(422);
    expect(nul.body.errors?.[0].extensions.code).toBe('VALIDATION_ERROR');

    for (const notAString of [42, { token: 'agr_x' }, ['agr_x'], null, true]) {
      const response = await refreshSession(notAString);
      expect({ value: notAString, status: response.status >= 400 && response.status < 500 }).toEqual({
        value: notAString,
        status: true,
      });
      expect(response.body.data ?? null).toBeNull();
      expect(response.body.errors?.length).toBeGreaterThan(0);
    }
    const missing = await t.graphql('mutation { refresh_session { token } }');
    expect(missing.status).toBeGreaterThanOrEqual(400);
    expect(missing.status).toBeLessThan(500);
  });

  test('a refresh token whose user was deleted, or whose org is gone, is refused', async () => {
    const org = await signUp(t);
    const user = await addUser(t, org, 'operator');
    const userSession = await login(user.email);
    await t.database.db.sql.query('DELETE FROM users WHERE id = $1', [user.userId]);
    await expectRefused(userSession.refreshToken, /unknown/);

    const doomed = await signUp(t);
    const doomedSession = await login(doomed.adminEmail);
    await t.database.db.sql.query('DELETE FROM organizations WHERE id = $1', [doomed.orgId]);
    await expectRefused(doomedSession.refreshToken, /unknown/);
  });
});

describe('logout and the bearer refresh', () => {
  test('logout revokes the family: its refresh tokens and every access token of it', async () => {
    const org = await signUp(t);
    const first = await login(org.adminEmail);
    const second = await rotated(first.refreshToken);
    const out = await t.request('POST', '/api/v1/auth/logout', { token: second.token });
    expect(out.status).toBe(204);
    await expectRefused(second.refresh_token, /has ended \(logout\)/);
    // The login's own access token was never presented to logout, and still stops working.
    expect(await orgReadStatus(org, first.accessToken)).toBe(401);
    expect(await familyRow(familyOf(first.accessToken))).toMatchObject({ revoked_reason: 'logout' });
    // Other sessions of the user stay.
    expect(await orgReadStatus(org, org.adminToken)).toBe(200);
  });

  test('the bearer refresh keeps the family: its refresh token still rotates, and logout with the new token ends it all', async () => {
    const org = await signUp(t);
    const session = await login(org.adminEmail);
    const refreshed = await t.request('POST', '/api/v1/auth/refresh', { token: session.accessToken });
    expect(refreshed.status).toBe(200);
    expect(familyOf(refreshed.body.access_token)).toBe(familyOf(session.accessToken));
    expect(await orgReadStatus(org, session.accessToken)).toBe(401);
    expect(await orgReadStatus(org, refreshed.body.access_token)).toBe(200);

    const next = await rotated(session.refreshToken);
    expect(familyOf(next.token)).toBe(familyOf(session.accessToken));
    expect((await t.request('POST', '/api/v1/auth/logout', { token: refreshed.body.access_token })).status).toBe(204);
    await expectRefused(next.refresh_token, /has ended \(logout\)/);
    expect(await orgReadStatus(org, next.token)).toBe(401);
  });

  test('checking a bearer token is still one statement: token, family, user and single sign-on in one query', async () => {
    const org = await signUp(t);
    const { accessToken } = await login(org.adminEmail);
    const sql = t.database.db.sql;
    const original = sql.query;
    const statements: string[] = [];
    sql.query = ((text: string, ...rest: unknown[]) => {
      statements.push(text);
      return (original as (...args: unknown[]) => unknown).call(sql, text, ...rest);
    }) as typeof sql.query;
    try {
      expect(await orgReadStatus(org, accessToken)).toBe(200);
    } finally {
      sql.query = original;
    }
    const revocationReads = statements.filter((s) => /revoked_tokens|session_families/.test(s));
    expect(revocationReads).toHaveLength(1);
    for (const table of ['revoked_tokens', 'session_families', 'users', 'org_sso'])
      expect(revocationReads[0]).toContain(table);
  });

  test('a token whose signature was verified once still expires: the next request after its exp is 401', async () => {
    const org = await signUp(t);
    const { accessToken } = await login(org.adminEmail);
    // The same claims as a real token, signed with the service's key, expiring in two seconds.
    const key = await t.app.keys.activeKey('session');
    const claims = decodeJwt(accessToken);
    const exp = Math.floor(Date.now() / 1000) + 2;
    const shortLived = await new SignJWT({ ...claims, exp })
      .setProtectedHeader({ alg: 'EdDSA', typ: SESSION_TOKEN_TYPE, kid: key.kid })
      .sign(key.privateKey);
    expect(await orgReadStatus(org, shortLived)).toBe(200);
    await new Promise((resolve) => setTimeout(resolve, exp * 1000 - Date.now() + 50));
    const expired = await t.request('GET', `/api/v1/orgs/${org.orgId}`, { token: shortLived });
    expect(expired.status).toBe(401);
    expect(JSON.stringify(expired.body)).toMatch(/has expired/);
  });

  test('bearer checks read together under load still each see their own token: a logged-out one is refused, the others not', async () => {
    const org = await signUp(t);
    const other = await addUser(t, org, 'operator');
    const live = await login(org.adminEmail);
    const loggedOut = await login(other.email);
    expect((await t.request('POST', '/api/v1/auth/logout', { token: loggedOut.accessToken })).status).toBe(204);
    // Warmed first, so that the concurrent checks reach the revocation read together.
    await orgReadStatus(org, live.accessToken);
    const tokens = Array.from({ length: 40 }, (_, i) => (i % 3 === 1 ? loggedOut.accessToken : live.accessToken));
    const statuses = await Promise.all(tokens.map((token) => orgReadStatus(org, token)));
    expect(statuses).toEqual(tokens.map((token) => (token === live.accessToken ? 200 : 401)));
  });
});

describe('session_login', () => {
  test('answers {token, refresh_token, expires, user} with expires an hour ahead; a wrong password is 401 like login', async () => {
    const org = await signUp(t);
    const response = await t.graphql<GraphQlBody<{ session_login: Rotated & { user: Record<string, string> } }>>(
      SESSION_LOGIN,
      {
        email: org.adminEmail,
        password: PASSWORD,
      },
    );
    expect(response.status).toBe(200);
    expect(response.body.errors).toBeUndefined();
    const session = response.body.data!.session_login;
    expect(session).toEqual({
      token: expect.any(String),
      refresh_token: expect.stringMatching(refreshTokenFormat),
      expires: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/),
      user: { user_id: org.adminUserId, email: org.adminEmail, org_id: org.orgId, role: 'admin' },
    });
    expect(Math.abs(Date.parse(session.expires) - (Date.now() + 3600_000))).toBeLessThan(10_000);
    expect(Date.parse(session.expires)).toBe(decodeJwt(session.token).exp! * 1000);
    expect(await orgReadStatus(org, session.token)).toBe(200);
    expect(familyOf((await rotated(session.refresh_token)).token)).toBe(familyOf(session.token));

    const wrong = await t.graphql<GraphQlBody<unknown>>(
      SESSION_LOGIN,
      { email: org.adminEmail, password: 'not the password' },
      { clientAddress: '198.51.100.77' },
    );
    const wrongRest = await t.request('POST', '/api/v1/auth/login', {
      body: { email: org.adminEmail, password: 'not the password' },
      clientAddress: '198.51.100.77',
    });
    expect(wrong.status).toBe(401);
    expect(wrongRest.status).toBe(401);
    expect(wrong.body.errors?.[0]).toMatchObject({
      message: wrongRest.body.detail.message,
      extensions: { code: 'INVALID_TOKEN' },
    });
  });
});

describe('maintenance', () => {
  test('prune deletes expired refresh tokens and expired families, and nothing live', async () => {
    const org = await signUp(t);
    const live = await login(org.adminEmail);
    const expired = await login(org.adminEmail);
    const expiredFamily = familyOf(expired.accessToken);
    await t.database.db.sql.query(
      "UPDATE refresh_tokens SET expires_at = now() - interval '1 day' WHERE family_id = $1",
      [expiredFamily],
    );
    await t.database.db.sql.query("UPDATE session_families SET expires_at = now() - interval '1 day' WHERE id = $1", [
      expiredFamily,
    ]);
    await t.app.services.sessions.prune();
    const families = await t.database.db.sql.query<{ id: string }>(
      'SELECT id FROM session_families WHERE id = ANY($1::text[])',
      [[expiredFamily, familyOf(live.accessToken)]],
    );
    expect(families.map((f) => f.id)).toEqual([familyOf(live.accessToken)]);
    await expectRefused(expired.refreshToken, /unknown/);
    // A pruned family can no longer vouch for its access tokens: they are refused, not trusted.
    expect(await orgReadStatus(org, expired.accessToken)).toBe(401);
    expect(await orgReadStatus(org, (await rotated(live.refreshToken)).token)).toBe(200);
  });
});

describe('the unprefixed session routes (docs/decisions/0021-templates-and-marketplace.md)', () => {
  test('POST /auth/login and POST /auth/refresh: the pair rotates; a reused refresh token is 401 and ends the session', async () => {
    const org = await signUp(t);
    const login = await t.request('POST', '/auth/login', { body: { email: org.adminEmail, password: PASSWORD } });
    expect(login.status).toBe(200);
    expect(login.body).toEqual({
      token: expect.any(String),
      refresh_token: expect.stringMatching(refreshTokenFormat),
      expires: expect.any(String),
      user: { user_id: org.adminUserId, email: org.adminEmail, org_id: org.orgId, role: 'admin' },
    });
    expect(Math.abs(Date.parse(login.body.expires) - Date.now() - 3600_000)).toBeLessThan(60_000);
    expect((await t.request('GET', `/api/v1/orgs/${org.orgId}`, { token: login.body.token })).status).toBe(200);

    const rotated = await t.request('POST', '/auth/refresh', { body: { refresh_token: login.body.refresh_token } });
    expect(rotated.status).toBe(200);
    expect(rotated.body).toEqual({
      token: expect.any(String),
      refresh_token: expect.stringMatching(refreshTokenFormat),
      expires: expect.any(String),
    });
    expect(rotated.body.refresh_token).not.toBe(login.body.refresh_token);
    expect((await t.request('GET', `/api/v1/orgs/${org.orgId}`, { token: rotated.body.token })).status).toBe(200);

    const reused = await t.request('POST', '/auth/refresh', { body: { refresh_token: login.body.refresh_token } });
    expect(reused.status).toBe(401);
    expect(reused.body.detail).toMatchObject({ code: 'INVALID_TOKEN' });
    expect((await t.request('GET', `/api/v1/orgs/${org.orgId}`, { token: rotated.body.token })).status).toBe(401);
    expect(
      (await t.request('POST', '/auth/refresh', { body: { refresh_token: rotated.body.refresh_token } })).status,
    ).toBe(401);
  });

  test('bad input: wrong password 401, missing or non-string refresh_token 422, not JSON 400', async () => {
    const org = await signUp(t);
    expect(
      (await t.request('POST', '/auth/login', { body: { email: org.adminEmail, password: 'wrong password!' } })).status,
    ).toBe(401);
    const missing = await t.request('POST', '/auth/refresh', { body: {} });
    expect(missing.status).toBe(422);
    expect(missing.body.error.details.errors).toEqual([expect.objectContaining({ field: 'refresh_token' })]);
    expect((await t.request('POST', '/auth/refresh', { body: { refresh_token: 42 } })).status).toBe(422);
    expect((await t.request('POST', '/auth/refresh', { body: { refresh_token: 'agr_nope' } })).status).toBe(401);
    const notJson = await t.request('POST', '/auth/refresh', {
      body: '{',
      headers: { 'content-type': 'application/json' },
    });
    expect(notJson.status).toBe(400);
  });
});

describe('refresh throttling per client address', () => {
  // A second app on the same database with a small limit: 4 failed refreshes per address per window.
  let throttled: TestApp;
  beforeAll(async () => {
    throttled = await startTestApp({ REFRESH_MAX_FAILURES_PER_ADDRESS: '4' }, { db: t.database.db });
  });
  afterAll(() => throttled.app.stop());

  const refreshFrom = (clientAddress: string, refreshToken: string) =>
    throttled.request('POST', '/auth/refresh', { body: { refresh_token: refreshToken }, clientAddress });
  /** Well formed, never issued. */
  const neverIssued = (i: number) => `agr_${String(i).padStart(43, 'A')}`;

  test('40 concurrent unknown tokens from one address: 4 are looked up, 36 refused with Retry-After; a valid token from there waits too', async () => {
    const address = '198.18.10.1';
    const responses = await Promise.all(Array.from({ length: 40 }, (_, i) => refreshFrom(address, neverIssued(i))));
    expect(responses.filter((r) => r.status === 401)).toHaveLength(4);
    const refused = responses.filter((r) => r.status === 429);
    expect(refused).toHaveLength(36);
    for (const response of refused) {
      expect(response.body.error).toMatchObject({ code: 'POLICY_VIOLATION', details: { limit: 4, period: '15m' } });
      expect(Number(response.headers.get('retry-after'))).toBeGreaterThan(0);
    }

    // Refused before the token is looked up: it is not spent and rotates from another address.
    const org = await signUp(t);
    const { refreshToken } = await login(org.adminEmail);
    expect((await refreshFrom(address, refreshToken)).status).toBe(429);
    const [row] = await t.database.db.sql.query<{ used_at: Date | null }>(
      'SELECT used_at FROM refresh_tokens WHERE token_hash = $1',
      [sha256Hex(refreshToken)],
    );
    expect(row.used_at).toBeNull();
    expect((await refreshFrom('198.18.10.2', refreshToken)).status).toBe(200);
  });

  test('a successful rotation gives its attempt back; malformed tokens are refused before counting', async () => {
    const address = '198.18.11.1';
    for (let i = 0; i < 10; i++) expect((await refreshFrom(address, 'agr_malformed')).status).toBe(401);
    for (let i = 0; i < 3; i++) expect((await refreshFrom(address, neverIssued(100 + i))).status).toBe(401);
    const org = await signUp(t);
    const { refreshToken } = await login(org.adminEmail);
    expect((await refreshFrom(address, refreshToken)).status).toBe(200);
    // Three failures counted, the success given back: one more failure fits (the fourth), then 429.
    expect((await refreshFrom(address, neverIssued(103))).status).toBe(401);
    expect((await refreshFrom(address, neverIssued(104))).status).toBe(429);
  });
});
