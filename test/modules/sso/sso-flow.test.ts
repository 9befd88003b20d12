/**
 * Operators' single sign-on (docs/decisions/0061-operator-single-sign-on.md) against a real OpenID
 * provider: panva's `oidc-provider` on a loopback port, its development login form driven over
 * HTTP. The browser's steps at the gateway (`/auth/sso/{slug}`, the callback, the console's
 * exchange) go to the real app; the gateway fetches discovery, keys and tokens from the provider
 * itself, through its outbound address policy.
 */
import { createHash, randomBytes } from 'node:crypto';
import { LOOPBACK_UPSTREAMS, startTestApp, type TestApp } from '../../support/app.js';
import { PASSWORD, addUser, signUp, type OrgFixture } from '../../support/fixtures.js';
import {
  CookieJar,
  signInAtProvider,
  startIdentityProvider,
  type TestIdentityProvider,
} from '../../support/oidc-provider.js';

const PUBLIC_URL = 'http://gateway.test';
const REDIRECT_URI = `${PUBLIC_URL}/auth/sso/callback`;
const KEY = randomBytes(32).toString('hex');
/** Groups are released by their own scope, as Okta does. */
const roleMapping = {
  role_claim: 'groups',
  role_map: { 'gw-admins': 'admin', 'gw-operators': 'operator' },
  scopes: ['profile', 'groups'],
};

let t: TestApp;
let idp: TestIdentityProvider;
let org: OrgFixture;
let domain: string;

beforeAll(async () => {
  idp = await startIdentityProvider({ redirectUri: REDIRECT_URI });
  t = await startTestApp({ ...LOOPBACK_UPSTREAMS, PUBLIC_URL, KEY_ENCRYPTION_KEY: KEY });
  org = await signUp(t, 'sso');
  domain = `${org.slug}.example`;
  const configured = await configure(org, roleMapping);
  expect(configured.status).toBe(200);
});

afterAll(async () => {
  await t?.close();
  await idp?.close();
});

function configure(target: OrgFixture, overrides: Record<string, unknown> = {}, token = target.adminToken) {
  return t.request('PUT', `/api/v1/orgs/${target.orgId}/sso`, {
    token,
    body: {
      issuer: idp.issuer,
      client_id: idp.clientId,
      client_secret: idp.clientSecret,
      allowed_domains: [`${target.slug}.example`],
      default_role: 'viewer',
      allow_private_network: true,
      ...overrides,
    },
  });
}

interface Started {
  location: URL;
  cookie: string;
}

/** `GET /auth/sso/{slug}` as a browser: where it is sent, and the cookie it keeps. */
async function startSignIn(slug: string): Promise<Started> {
  const response = await t.request('GET', `/auth/sso/${slug}`, { headers: { accept: 'text/html' } });
  expect(response.status).toBe(302);
  const jar = new CookieJar();
  jar.take(new Response(null, { headers: response.headers }));
  return { location: new URL(response.headers.get('location')!), cookie: jar.header() };
}

/** The callback as the browser visits it: where the gateway sends the browser, as a fragment's parameters. */
async function visitCallback(callbackUrl: URL, cookie: string): Promise<URLSearchParams> {
  const response = await t.request('GET', `${callbackUrl.pathname}${callbackUrl.search}`, { headers: { cookie } });
  expect(response.status).toBe(302);
  const location = response.headers.get('location')!;
  expect(location.startsWith('/console/sso#')).toBe(true);
  // The browser's cookie is cleared whatever the outcome.
  expect(response.headers.get('set-cookie')).toMatch(/^agw_sso=; Max-Age=0;/);
  return new URLSearchParams(location.slice(location.indexOf('#') + 1));
}

/** A whole sign-in as `login` at the provider: the console's fragment parameters. */
async function signIn(slug: string, login: string): Promise<URLSearchParams> {
  const started = await startSignIn(slug);
  const callback = await signInAtProvider(started.location.href, login, REDIRECT_URI);
  return visitCallback(callback, started.cookie);
}

const exchange = (code: string) => t.request('POST', '/api/v1/auth/sso/exchange', { body: { code } });

function account(login: string, extra: Partial<{ email: string; email_verified: boolean; groups: string[] }> = {}) {
  idp.accounts.set(login, { email: `${login}@${domain}`, email_verified: true, ...extra });
  return `${login}@${domain}`;
}

const auditOf = async (action: string, of: OrgFixture = org) =>
  (await t.request('GET', `/api/v1/orgs/${of.orgId}/audit-logs?action=${action}`, { token: of.adminToken })).body
    .items as { actor: { label: string }; target: { id: string }; after: Record<string, unknown> }[];

describe('the configuration', () => {
  test('an admin reads it back with the secret redacted, the secret is sealed at rest, and the change is audited without it', async () => {
    const read = await t.request('GET', `/api/v1/orgs/${org.orgId}/sso`, { token: org.adminToken });
    expect(read.status).toBe(200);
    expect(read.body).toMatchObject({
      org_id: org.orgId,
      issuer: idp.issuer,
      client_id: idp.clientId,
      client_secret: '[redacted]',
      allowed_domains: [domain],
      default_role: 'viewer',
      role_claim: 'groups',
      role_map: { 'gw-admins': 'admin', 'gw-operators': 'operator' },
      scopes: ['openid', 'email', 'profile', 'groups'],
      enforce: false,
      allow_private_network: true,
      redirect_uri: REDIRECT_URI,
      sign_in_url: `${PUBLIC_URL}/auth/sso/${org.slug}`,
    });
    expect(read.text).not.toContain(idp.clientSecret);
    const [stored] = await t.database.db.sql.query<{ client_secret: string }>(
      'SELECT client_secret FROM org_sso WHERE org_id = $1',
      [org.orgId],
    );
    expect(stored.client_secret).toMatch(/^agw:v1:/);
    expect(stored.client_secret).not.toContain(idp.clientSecret);
    const [entry] = await auditOf('sso.configured');
    expect(entry.after).toMatchObject({ issuer: idp.issuer, client_secret_set: true });
    expect(JSON.stringify(entry)).not.toContain(idp.clientSecret);
  });

  test('a later PUT without the secret (or with "[redacted]") keeps the stored one', async () => {
    const other = await signUp(t, 'sso-keep');
    expect((await configure(other)).status).toBe(200);
    const secretOf = async () =>
      (
        await t.database.db.sql.query<{ client_secret: string }>(
          'SELECT client_secret FROM org_sso WHERE org_id = $1',
          [other.orgId],
        )
      )[0].client_secret;
    const before = await secretOf();
    expect((await configure(other, { client_secret: undefined, default_role: 'operator' })).status).toBe(200);
    expect((await configure(other, { client_secret: '[redacted]' })).status).toBe(200);
    expect(await secretOf()).toBe(before);
    // And it still signs in: the kept secret opens at the provider's token endpoint.
    idp.accounts.set('keeper', { email: `keeper@${other.slug}.example`, email_verified: true });
    const fragment = await signIn(other.slug, 'keeper');
    expect(fragment.get('code')).toMatch(/^agsso_/);
  });

  test('bad input is a 422 naming each field, and nothing is stored', async () => {
    const other = await signUp(t, 'sso-bad');
    const refused = await configure(other, {
      issuer: 'ftp://idp.example',
      client_secret: undefined,
      allowed_domains: ['not a domain'],
      role_map: { x: 'root' },
    });
    expect(refused.status).toBe(422);
    const fields = refused.body.error.details.errors.map((e: { field: string }) => e.field);
    expect(fields).toEqual(
      expect.arrayContaining(['issuer', 'client_secret', 'allowed_domains.0', 'role_map', 'role_map.x']),
    );
    expect((await t.request('GET', `/api/v1/orgs/${other.orgId}/sso`, { token: other.adminToken })).status).toBe(404);
    expect((await configure(other, { default_role: 'owner' })).status).toBe(422);
    // An empty domain list would let any verified email of the provider in.
    const noDomains = await configure(other, { allowed_domains: [] });
    expect(noDomains.status).toBe(422);
    expect(noDomains.text).toContain('allowed_domains');
  });

  test('the discovery document is read on save: a loopback provider needs allow_private_network, a dead one is a 422 on issuer', async () => {
    const other = await signUp(t, 'sso-net');
    const privateRefused = await configure(other, { allow_private_network: false });
    expect(privateRefused.status).toBe(422);
    expect(privateRefused.body.error.details.errors[0]).toMatchObject({ field: 'issuer' });
    expect(privateRefused.text).toContain('allow_private_network');
    const dead = await configure(other, { issuer: 'http://127.0.0.1:9/nothing' });
    expect(dead.status).toBe(422);
    expect(dead.body.error.details.errors[0].message).toContain('discovery document could not be used');
    const wrongIssuer = await configure(other, { issuer: `${idp.issuer}/` });
    expect(wrongIssuer.status).toBe(422);
    expect(wrongIssuer.text).toContain('names the issuer');
  });

  test('only the org’s admins read, write or delete it; another org’s admin sees nothing', async () => {
    const operator = await addUser(t, org, 'operator');
    const stranger = await signUp(t, 'sso-stranger');
    for (const token of [operator.token]) {
      expect((await t.request('GET', `/api/v1/orgs/${org.orgId}/sso`, { token })).status).toBe(403);
      expect((await configure(org, {}, token)).status).toBe(403);
      expect((await t.request('DELETE', `/api/v1/orgs/${org.orgId}/sso`, { token })).status).toBe(403);
    }
    expect((await t.request('GET', `/api/v1/orgs/${org.orgId}/sso`, { token: stranger.adminToken })).status).toBe(404);
    expect((await configure(org, {}, stranger.adminToken)).status).toBe(404);
    expect((await t.request('GET', `/api/v1/orgs/${org.orgId}/sso`)).status).toBe(401);
  });

  test('DELETE removes it (audited): the org’s sign-in link then answers 404', async () => {
    const other = await signUp(t, 'sso-del');
    expect((await configure(other)).status).toBe(200);
    const deleted = await t.request('DELETE', `/api/v1/orgs/${other.orgId}/sso`, { token: other.adminToken });
    expect(deleted.status).toBe(204);
    expect((await t.request('DELETE', `/api/v1/orgs/${other.orgId}/sso`, { token: other.adminToken })).status).toBe(
      404,
    );
    const start = await t.request('GET', `/auth/sso/${other.slug}`);
    expect(start.status).toBe(404);
    expect(start.body.error.code).toBe('NOT_FOUND');
    const audit = await t.request('GET', `/api/v1/orgs/${other.orgId}/audit-logs?action=sso.removed`, {
      token: other.adminToken,
    });
    expect(audit.body.items).toHaveLength(1);
  });
});

describe('signing in', () => {
  test('the request to the provider carries PKCE (S256), state and nonce, and the browser gets a binding cookie', async () => {
    const started = await startSignIn(org.slug);
    expect(started.location.origin + started.location.pathname).toBe(`${idp.issuer}/auth`);
    const params = started.location.searchParams;
    expect(params.get('response_type')).toBe('code');
    expect(params.get('client_id')).toBe(idp.clientId);
    expect(params.get('redirect_uri')).toBe(REDIRECT_URI);
    expect(params.get('code_challenge_method')).toBe('S256');
    expect(params.get('code_challenge')).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(params.get('state')).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(params.get('nonce')).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(params.get('scope')?.split(' ')).toEqual(['openid', 'email', 'profile', 'groups']);
    expect(started.cookie).toMatch(/^agw_sso=[A-Za-z0-9_-]{43}$/);
    // Neither the state nor the verifier is stored in the clear.
    const rows = await t.database.db.sql.query<{ state_hash: string }>('SELECT state_hash FROM sso_logins');
    expect(rows.map((r) => r.state_hash)).not.toContain(params.get('state'));
  });

  test('a first sign-in provisions the user with the mapped role; the one-time code is exchanged once for a session', async () => {
    const email = account('ada', { groups: ['staff', 'gw-operators'] });
    const fragment = await signIn(org.slug, 'ada');
    const code = fragment.get('code')!;
    expect(code).toMatch(/^agsso_/);
    const session = await exchange(code);
    expect(session.status).toBe(200);
    expect(session.body).toMatchObject({
      token: expect.any(String),
      refresh_token: expect.stringMatching(/^agr_/),
      user: { email, org_id: org.orgId, role: 'operator' },
    });
    // The token is an ordinary session: an operator may read the org, not its users.
    expect((await t.request('GET', `/api/v1/orgs/${org.orgId}`, { token: session.body.token })).status).toBe(200);
    expect((await t.request('GET', `/api/v1/orgs/${org.orgId}/users`, { token: session.body.token })).status).toBe(403);
    // Used once.
    const again = await exchange(code);
    expect(again.status).toBe(401);
    expect(again.text).toContain('already used');
    // The user has no password: none logs them in.
    const password = await t.request('POST', '/api/v1/auth/login', { body: { email, password: PASSWORD } });
    expect(password.status).toBe(401);
    const [provisioned] = await auditOf('user.provisioned');
    expect(provisioned.after).toMatchObject({ email, role: 'operator', issuer: idp.issuer, subject: 'ada' });
    const logins = await auditOf('session.sso_login');
    expect(logins.some((entry) => entry.target.id === session.body.user.user_id)).toBe(true);
  });

  test('the most privileged mapped group wins, no mapped group gets the default role, and a second sign-in is the same user', async () => {
    account('grace', { groups: ['gw-operators', 'gw-admins'] });
    account('linus', { groups: ['unrelated'] });
    const grace = await exchange((await signIn(org.slug, 'grace')).get('code')!);
    expect(grace.body.user.role).toBe('admin');
    const linus = await exchange((await signIn(org.slug, 'linus')).get('code')!);
    expect(linus.body.user.role).toBe('viewer');
    const again = await exchange((await signIn(org.slug, 'linus')).get('code')!);
    expect(again.body.user.user_id).toBe(linus.body.user.user_id);
    const users = await t.request('GET', `/api/v1/orgs/${org.orgId}/users`, { token: org.adminToken });
    expect(users.body.items.filter((u: { email: string }) => u.email === `linus@${domain}`)).toHaveLength(1);
  });

  test('an email outside the allowed domains is refused and no user is created', async () => {
    idp.accounts.set('mallory', { email: 'mallory@elsewhere.example', email_verified: true });
    const fragment = await signIn(org.slug, 'mallory');
    expect(fragment.get('error')).toBe('domain_not_allowed');
    expect(fragment.get('error_description')).toContain('elsewhere.example');
    expect(fragment.get('code')).toBeNull();
    const rows = await t.database.db.sql.query('SELECT 1 FROM users WHERE email = $1', ['mallory@elsewhere.example']);
    expect(rows).toHaveLength(0);
  });

  test('an email the provider has not verified is refused', async () => {
    account('unverified', { email_verified: false });
    const fragment = await signIn(org.slug, 'unverified');
    expect(fragment.get('error')).toBe('email_not_verified');
  });

  test('an email of another org’s user is refused: no account is taken over across orgs', async () => {
    const other = await signUp(t, 'sso-victim');
    idp.accounts.set('squatter', { email: other.adminEmail, email_verified: true });
    // The other org's domain must be allowed for the email to get this far.
    expect((await configure(org, { allowed_domains: [domain, `${other.slug}.example`] })).status).toBe(200);
    try {
      const fragment = await signIn(org.slug, 'squatter');
      expect(fragment.get('error')).toBe('email_taken');
    } finally {
      expect((await configure(org, roleMapping)).status).toBe(200);
    }
  });

  test('a tampered state, a replayed callback and a callback from another browser are refused', async () => {
    account('eve');
    const started = await startSignIn(org.slug);
    const callback = await signInAtProvider(started.location.href, 'eve', REDIRECT_URI);
    const tampered = new URL(callback);
    tampered.searchParams.set('state', `${callback.searchParams.get('state')!.slice(0, -2)}xx`);
    expect((await visitCallback(tampered, started.cookie)).get('error')).toBe('invalid_request');
    // The real state, from another browser (no cookie, or another one): refused, and it is used up.
    const other = await startSignIn(org.slug);
    const stolen = await visitCallback(callback, other.cookie);
    expect(stolen.get('error')).toBe('invalid_request');
    expect(stolen.get('error_description')).toContain('another browser');
    const replay = await visitCallback(callback, started.cookie);
    expect(replay.get('error')).toBe('invalid_request');
    expect(replay.get('error_description')).toContain('unknown, expired or already used');
  });

  test('a code answered by another issuer (RFC 9207 iss) and a provider error are refused', async () => {
    account('mixup');
    const started = await startSignIn(org.slug);
    const callback = await signInAtProvider(started.location.href, 'mixup', REDIRECT_URI);
    expect(callback.searchParams.get('iss')).toBe(idp.issuer);
    callback.searchParams.set('iss', 'https://attacker.example');
    const mixedUp = await visitCallback(callback, started.cookie);
    expect(mixedUp.get('error')).toBe('invalid_request');
    expect(mixedUp.get('error_description')).toContain('another identity provider');

    const denied = await startSignIn(org.slug);
    const answer = new URL(REDIRECT_URI);
    answer.searchParams.set('state', denied.location.searchParams.get('state')!);
    answer.searchParams.set('error', 'access_denied');
    answer.searchParams.set('error_description', 'End-User aborted interaction');
    const fragment = await visitCallback(answer, denied.cookie);
    expect(fragment.get('error')).toBe('access_denied');
    expect(fragment.get('error_description')).toContain('End-User aborted interaction');
  });

  test('a code past its 60 seconds is refused', async () => {
    account('late');
    const code = (await signIn(org.slug, 'late')).get('code')!;
    await t.database.db.sql.query("UPDATE sso_codes SET expires_at = now() - interval '1 second'");
    const late = await exchange(code);
    expect(late.status).toBe(401);
    expect(late.text).toContain('expired');
    expect((await exchange('agsso_nonsense')).status).toBe(401);
  });

  test('a user the provider no longer lists cannot sign in', async () => {
    const email = account('leaver');
    const first = await exchange((await signIn(org.slug, 'leaver')).get('code')!);
    expect(first.body.user.email).toBe(email);
    idp.accounts.delete('leaver');
    // The provider itself refuses the account: the browser never comes back with a code.
    await expect(signIn(org.slug, 'leaver')).rejects.toThrow(
      /the provider answered \d+ without a form: provider error: \w+/,
    );
  });

  test('an unknown org slug, or one without single sign-on, gets a 404 page', async () => {
    const page = await t.request('GET', '/auth/sso/no-such-org', { headers: { accept: 'text/html' } });
    expect(page.status).toBe(404);
    expect(page.headers.get('content-type')).toContain('text/html');
    expect(page.text).toContain('No organization');
    const plain = await signUp(t, 'sso-none');
    expect((await t.request('GET', `/auth/sso/${plain.slug}`)).status).toBe(404);
    expect((await t.request('POST', `/auth/sso/${plain.slug}`)).status).toBe(405);
    // A HEAD (a link checker) neither starts a sign-in nor uses up a callback's state.
    expect((await t.request('HEAD', `/auth/sso/${org.slug}`)).status).toBe(405);
    const started = await startSignIn(org.slug);
    const head = await t.request('HEAD', `/auth/sso/callback?state=${started.location.searchParams.get('state')}`);
    expect(head.status).toBe(405);
    expect(head.headers.get('allow')).toBe('GET');
    const [row] = await t.database.db.sql.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM sso_logins WHERE state_hash = $1',
      [createHash('sha256').update(started.location.searchParams.get('state')!).digest('hex')],
    );
    expect(Number(row.n)).toBe(1);
  });
});

describe('enforce', () => {
  test('password login is refused for non-admins once the password is right; admins keep it (break-glass)', async () => {
    const enforced = await signUp(t, 'sso-enforce');
    const operator = await addUser(t, enforced, 'operator');
    expect((await configure(enforced, { enforce: true })).status).toBe(200);
    const refused = await t.request('POST', '/api/v1/auth/login', {
      body: { email: operator.email, password: PASSWORD },
    });
    expect(refused.status).toBe(403);
    expect(refused.text).toContain('single sign-on');
    // A wrong password reads as any wrong password: the refusal tells nothing without it.
    const wrong = await t.request('POST', '/api/v1/auth/login', { body: { email: operator.email, password: 'nope' } });
    expect(wrong.status).toBe(401);
    const admin = await t.request('POST', '/api/v1/auth/login', {
      body: { email: enforced.adminEmail, password: PASSWORD },
    });
    expect(admin.status).toBe(200);
    // The unprefixed login refuses the same way.
    const root = await t.request('POST', '/auth/login', { body: { email: operator.email, password: PASSWORD } });
    expect(root.status).toBe(403);
    // Turned off again, the password works.
    expect((await configure(enforced, { enforce: false })).status).toBe(200);
    expect(
      (await t.request('POST', '/api/v1/auth/login', { body: { email: operator.email, password: PASSWORD } })).status,
    ).toBe(200);
  });
});

describe('enforce and the sessions already open', () => {
  const SSO_REQUIRED = 'This organization now signs in with single sign-on: sign in again through it';
  /** A password login: its access and refresh tokens. */
  async function passwordSession(email: string) {
    const response = await t.request('POST', '/api/v1/auth/login', { body: { email, password: PASSWORD } });
    expect(response.status).toBe(200);
    return { token: response.body.access_token as string, refresh: response.body.refresh_token as string };
  }
  const orgRead = (target: OrgFixture, token: string) => t.request('GET', `/api/v1/orgs/${target.orgId}`, { token });
  const rotate = (refreshToken: string) =>
    t.request('POST', '/auth/refresh', { body: { refresh_token: refreshToken } });
  /** Both tokens of the session are 401: the access token with `message`, the refresh token with its own. */
  async function expectSessionRefused(
    target: OrgFixture,
    session: { token: string; refresh: string },
    message: string,
    refreshMessage = message,
  ) {
    const read = await orgRead(target, session.token);
    expect(read.status).toBe(401);
    expect(read.body.detail).toEqual({ code: 'INVALID_TOKEN', message });
    const rotation = await rotate(session.refresh);
    expect(rotation.status).toBe(401);
    expect(rotation.body.detail).toEqual({ code: 'INVALID_TOKEN', message: refreshMessage });
  }

  test('turning it on ends the non-admins’ password sessions at once and for good; admins’ and single sign-on sessions go on', async () => {
    const enforced = await signUp(t, 'sso-sessions');
    expect((await configure(enforced, roleMapping)).status).toBe(200);
    const operator = await addUser(t, enforced, 'operator');
    const operatorSession = await passwordSession(operator.email);
    const adminSession = await passwordSession(enforced.adminEmail);
    idp.accounts.set('noor', { email: `noor@${enforced.slug}.example`, email_verified: true });
    const sso = (await exchange((await signIn(enforced.slug, 'noor')).get('code')!)).body;
    expect(sso.user.role).toBe('viewer');

    expect((await configure(enforced, { ...roleMapping, enforce: true })).status).toBe(200);
    // Both of the operator's sessions are refused, saying why.
    await expectSessionRefused(enforced, operatorSession, SSO_REQUIRED);
    expect((await orgRead(enforced, operator.token)).body.detail).toEqual({
      code: 'INVALID_TOKEN',
      message: SSO_REQUIRED,
    });
    // The admin (break-glass) and the single sign-on user go on, refresh tokens included.
    expect((await orgRead(enforced, adminSession.token)).status).toBe(200);
    expect((await rotate(adminSession.refresh)).status).toBe(200);
    expect((await orgRead(enforced, sso.token)).status).toBe(200);
    const rotated = await rotate(sso.refresh_token);
    expect(rotated.status).toBe(200);
    expect((await orgRead(enforced, rotated.body.token)).status).toBe(200);

    // Revoked, not only refused: they stay ended when enforce is turned off again.
    const families = await t.database.db.sql.query<{ revoked_reason: string | null; signed_in_with: string }>(
      `SELECT f.revoked_reason, f.signed_in_with FROM session_families f WHERE f.user_id = $1::uuid`,
      [operator.userId],
    );
    expect(families).toEqual([
      { revoked_reason: 'sso_enforced', signed_in_with: 'password' },
      { revoked_reason: 'sso_enforced', signed_in_with: 'password' },
    ]);
    const [turnedOn] = await auditOf('sso.configured', enforced);
    expect(turnedOn.after).toMatchObject({ enforce: true, password_sessions_ended: 2 });
    expect((await configure(enforced, { ...roleMapping, enforce: false })).status).toBe(200);
    const ended = 'ended when the organization turned single sign-on on; sign in again through it';
    await expectSessionRefused(
      enforced,
      operatorSession,
      `The session of this bearer token ${ended}`,
      `The session of this refresh token ${ended}`,
    );
    // A new password login is the way back in.
    expect((await orgRead(enforced, (await passwordSession(operator.email)).token)).status).toBe(200);
  });

  test('turning it on is one change: when the sessions cannot be ended, enforce is not saved either; retried, both are', async () => {
    const enforced = await signUp(t, 'sso-atomic');
    expect((await configure(enforced, roleMapping)).status).toBe(200);
    const operator = await addUser(t, enforced, 'operator');
    // The database goes away just as this org's sessions are being ended (57P03: cannot connect now).
    const sql = t.database.db.sql;
    await sql.query(
      `CREATE FUNCTION away_while_ending() RETURNS trigger LANGUAGE plpgsql AS $$
       BEGIN RAISE EXCEPTION 'the database went away' USING ERRCODE = '57P03'; END $$`,
    );
    await sql.query(
      `CREATE TRIGGER away_while_ending BEFORE UPDATE ON session_families FOR EACH ROW
       WHEN (NEW.org_id = '${enforced.orgId}'::uuid AND NEW.revoked_reason = 'sso_enforced')
       EXECUTE FUNCTION away_while_ending()`,
    );
    try {
      const failed = await configure(enforced, { ...roleMapping, enforce: true });
      expect(failed.status).toBe(503);
    } finally {
      await sql.query('DROP TRIGGER away_while_ending ON session_families');
      await sql.query('DROP FUNCTION away_while_ending()');
    }
    const read = await t.request('GET', `/api/v1/orgs/${enforced.orgId}/sso`, { token: enforced.adminToken });
    expect(read.body.enforce).toBe(false);
    expect((await orgRead(enforced, operator.token)).status).toBe(200);
    expect(await auditOf('sso.configured', enforced)).toHaveLength(1);

    // The same request again, the database back: enforce is on and the session ended for good.
    expect((await configure(enforced, { ...roleMapping, enforce: true })).status).toBe(200);
    expect((await configure(enforced, { ...roleMapping, enforce: false })).status).toBe(200);
    const ended = await orgRead(enforced, operator.token);
    expect(ended.status).toBe(401);
    expect(ended.body.detail.message).toMatch(/turned single sign-on on/);
  });

  test('an admin demoted while it is on loses a password session at once; promoted back, the session works again', async () => {
    const enforced = await signUp(t, 'sso-demoted');
    expect((await configure(enforced, { enforce: true })).status).toBe(200);
    const second = await addUser(t, enforced, 'admin');
    const secondSession = await passwordSession(second.email);
    expect((await orgRead(enforced, second.token)).status).toBe(200);
    const userPath = `/api/v1/orgs/${enforced.orgId}/users/${second.userId}`;
    expect(
      (await t.request('PATCH', userPath, { token: enforced.adminToken, body: { role: 'operator' } })).status,
    ).toBe(200);
    await expectSessionRefused(enforced, secondSession, SSO_REQUIRED);
    // Refused by the rule, not revoked: the role decides at every request.
    expect((await t.request('PATCH', userPath, { token: enforced.adminToken, body: { role: 'admin' } })).status).toBe(
      200,
    );
    expect((await orgRead(enforced, second.token)).status).toBe(200);
    expect((await rotate(secondSession.refresh)).status).toBe(200);
  });
});

describe('changing and removing a user who signs in with single sign-on (docs/decisions/0060-user-roles-and-removal.md)', () => {
  test('a demotion holds over later sign-ins; a removal ends the sessions, but the provider can sign the person in anew', async () => {
    const email = account('ines', { groups: ['gw-admins'] });
    const first = await exchange((await signIn(org.slug, 'ines')).get('code')!);
    expect(first.body.user.role).toBe('admin');
    const userId = first.body.user.user_id as string;
    const userPath = `/api/v1/orgs/${org.orgId}/users/${userId}`;
    const demoted = await t.request('PATCH', userPath, { token: org.adminToken, body: { role: 'viewer' } });
    expect(demoted.status).toBe(200);
    // The provider still puts her in gw-admins: the role is mapped on the first sign-in only.
    const again = await exchange((await signIn(org.slug, 'ines')).get('code')!);
    expect(again.body.user).toMatchObject({ user_id: userId, role: 'viewer' });
    const users = `/api/v1/orgs/${org.orgId}/users`;
    expect((await t.request('GET', users, { token: again.body.token })).status).toBe(403);

    // A one-time code handed out before the removal goes with her, as her sessions do.
    const pending = (await signIn(org.slug, 'ines')).get('code')!;
    expect((await t.request('DELETE', userPath, { token: org.adminToken })).status).toBe(204);
    expect((await t.request('GET', `/api/v1/orgs/${org.orgId}`, { token: again.body.token })).status).toBe(401);
    expect((await exchange(pending)).status).toBe(401);
    // The provider still lists her: her next sign-in provisions a new user, with the mapped role.
    const back = await exchange((await signIn(org.slug, 'ines')).get('code')!);
    expect(back.status).toBe(200);
    expect(back.body.user).toMatchObject({ email, role: 'admin' });
    expect(back.body.user.user_id).not.toBe(userId);
    const provisioned = (await auditOf('user.provisioned')).filter((entry) => entry.after.email === email);
    expect(provisioned).toHaveLength(2);
  });
});
