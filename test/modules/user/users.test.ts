/**
 * Changing a user's role and removing a user (docs/decisions/0060-user-roles-and-removal.md):
 * admins only, never the organization's last admin (409, also under concurrent requests), audited
 * in the same transaction, and the user's existing sessions carry the new role, or none, from
 * their next request. Across two processes: test/multi-process.test.ts.
 */
import { randomUUID } from 'node:crypto';
import { decodeJwt } from 'jose';
import { startTestApp, type TestApp } from '../../support/app.js';
import { PASSWORD, addUser, createKey, signUp, type OrgFixture } from '../../support/fixtures.js';
import { actionBody, execute, readyAgent } from '../../support/gateway.js';
import { connectClient, mcpRequest } from '../../support/oauth.js';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

const userPath = (org: OrgFixture, userId: string) => `/api/v1/orgs/${org.orgId}/users/${userId}`;
const setRole = (org: OrgFixture, userId: string, role: unknown, token = org.adminToken) =>
  t.request('PATCH', userPath(org, userId), { token, body: { role } });
const removeUser = (org: OrgFixture, userId: string, token = org.adminToken) =>
  t.request('DELETE', userPath(org, userId), { token });
const listUsers = (org: OrgFixture, token = org.adminToken) =>
  t.request('GET', `/api/v1/orgs/${org.orgId}/users`, { token });
/** The org's users as [email, role], oldest first, read with the signing-up admin's token. */
const rolesOf = async (org: OrgFixture) =>
  (await listUsers(org)).body.items.map((u: { email: string; role: string }) => [u.email, u.role]);

async function auditOf(org: OrgFixture, action: string) {
  const response = await t.request('GET', `/api/v1/orgs/${org.orgId}/audit-logs?action=${action}`, {
    token: org.adminToken,
  });
  expect(response.status).toBe(200);
  return response.body.items as {
    action: string;
    actor: { type: string; id: string; label: string };
    target: { type: string; id: string };
    before: unknown;
    after: unknown;
  }[];
}

/** A user logged in through REST: access token, refresh token. */
async function session(email: string) {
  const response = await t.request('POST', '/api/v1/auth/login', { body: { email, password: PASSWORD } });
  expect(response.status).toBe(200);
  return { accessToken: response.body.access_token as string, refreshToken: response.body.refresh_token as string };
}

const rotate = (refreshToken: string) => t.request('POST', '/auth/refresh', { body: { refresh_token: refreshToken } });

describe('changing a role', () => {
  test('an admin demotes an operator: audited with the role before and after, and the token already issued loses the rights at once', async () => {
    const org = await signUp(t, 'roles');
    const operator = await addUser(t, org, 'operator');
    const { accessToken, refreshToken } = await session(operator.email);
    const newTool = (token: string) =>
      t.request('POST', `/api/v1/orgs/${org.orgId}/tools`, {
        token,
        body: { action_type: `t-${randomUUID().slice(0, 8)}`, connector: 'mock' },
      });
    expect((await newTool(accessToken)).status).toBe(201);

    const changed = await setRole(org, operator.userId, 'viewer');
    expect(changed.status).toBe(200);
    expect(changed.body).toEqual({
      user_id: operator.userId,
      email: operator.email,
      org_id: org.orgId,
      role: 'viewer',
      created_at: expect.any(String),
    });
    expect(await rolesOf(org)).toEqual([
      [org.adminEmail, 'admin'],
      [operator.email, 'viewer'],
    ]);
    // The very next request with the token issued before (and the one addUser logged in with): a viewer's rights.
    for (const token of [accessToken, operator.token]) {
      const refused = await newTool(token);
      expect({ status: refused.status, body: refused.body }).toEqual({
        status: 403,
        body: { detail: { code: 'FORBIDDEN', message: expect.any(String) } },
      });
      expect((await t.request('GET', `/api/v1/orgs/${org.orgId}`, { token })).status).toBe(200);
    }
    // Its refresh token rotates into an access token that says the new role, and has only its rights.
    const rotated = await rotate(refreshToken);
    expect(rotated.status).toBe(200);
    expect(decodeJwt(rotated.body.token).role).toBe('viewer');
    expect((await newTool(rotated.body.token)).status).toBe(403);
    // The bearer refresh too.
    const renewed = await t.request('POST', '/api/v1/auth/refresh', { token: accessToken });
    expect(renewed.status).toBe(200);
    expect(decodeJwt(renewed.body.access_token).role).toBe('viewer');

    const entries = await auditOf(org, 'user.role_changed');
    expect(entries).toEqual([
      expect.objectContaining({
        action: 'user.role_changed',
        actor: { type: 'user', id: org.adminUserId, label: org.adminEmail },
        target: { type: 'user', id: operator.userId },
        before: { email: operator.email, role: 'operator' },
        after: { email: operator.email, role: 'viewer' },
      }),
    ]);
  });

  test('a viewer promoted to admin manages users with the token it already had; the same role again changes and audits nothing', async () => {
    const org = await signUp(t, 'roles');
    const viewer = await addUser(t, org, 'viewer');
    expect((await listUsers(org, viewer.token)).status).toBe(403);
    expect((await setRole(org, viewer.userId, 'admin')).status).toBe(200);
    const listed = await listUsers(org, viewer.token);
    expect(listed.status).toBe(200);
    expect(listed.body.total).toBe(2);

    const again = await setRole(org, viewer.userId, 'admin');
    expect(again.status).toBe(200);
    expect(again.body.role).toBe('admin');
    expect((await auditOf(org, 'user.role_changed')).map((e) => e.after)).toEqual([
      { email: viewer.email, role: 'admin' },
    ]);
  });

  test("the last admin cannot be demoted, not even by themself (409); with a second admin they can, and lose the admin's rights", async () => {
    const org = await signUp(t, 'roles');
    for (const role of ['operator', 'viewer']) {
      const refused = await setRole(org, org.adminUserId, role);
      expect({ status: refused.status, body: refused.body }).toEqual({
        status: 409,
        body: {
          error: {
            code: 'CONFLICT',
            message: "The organization's last admin cannot be demoted: make another user admin first",
            details: { field: 'role' },
          },
        },
      });
    }
    expect(await rolesOf(org)).toEqual([[org.adminEmail, 'admin']]);
    expect(await auditOf(org, 'user.role_changed')).toEqual([]);

    const second = await addUser(t, org, 'admin');
    const demoted = await setRole(org, org.adminUserId, 'operator');
    expect(demoted.status).toBe(200);
    expect((await listUsers(org)).status).toBe(403);
    // The second admin is now the last one.
    const last = await setRole(org, second.userId, 'viewer', second.token);
    expect(last.status).toBe(409);
    expect(last.body.error.code).toBe('CONFLICT');
    const users = await listUsers(org, second.token);
    expect(users.body.items.map((u: { role: string }) => u.role)).toEqual(['operator', 'admin']);
  });

  test('bad input is a 4xx naming the problem, never a 500', async () => {
    const org = await signUp(t, 'roles');
    const viewer = await addUser(t, org, 'viewer');
    const unknownRole = await setRole(org, viewer.userId, 'owner');
    expect(unknownRole.status).toBe(422);
    expect(unknownRole.body.error).toMatchObject({
      code: 'VALIDATION_ERROR',
      details: { errors: [{ field: 'role', message: 'must be one of admin, operator, viewer' }] },
    });
    for (const body of [{}, { role: null }, { role: 1 }, { role: ['admin'] }]) {
      const refused = await t.request('PATCH', userPath(org, viewer.userId), { token: org.adminToken, body });
      expect({ body, status: refused.status, field: refused.body.error.details.errors[0].field }).toEqual({
        body,
        status: 422,
        field: 'role',
      });
    }
    const notJson = await t.request('PATCH', userPath(org, viewer.userId), { token: org.adminToken, body: '{"role":' });
    expect(notJson.status).toBe(400);
    // Unknown body fields are ignored (docs/decisions/0010-strict-rest-input.md): only the role changes.
    const extra = await t.request('PATCH', userPath(org, viewer.userId), {
      token: org.adminToken,
      body: { role: 'operator', email: 'taken-over@elsewhere.example', org_id: randomUUID() },
    });
    expect(extra.status).toBe(200);
    expect(extra.body).toMatchObject({ email: viewer.email, org_id: org.orgId, role: 'operator' });
    for (const id of ['not-a-uuid', randomUUID(), `${viewer.userId}x`, '%20']) {
      for (const response of [await setRole(org, id, 'viewer'), await removeUser(org, id)]) {
        expect({ id, status: response.status, body: response.body }).toEqual({
          id,
          status: 404,
          body: { error: { code: 'NOT_FOUND', message: 'User not found', details: {} } },
        });
      }
    }
    // A UUID in capitals names the same user.
    expect((await setRole(org, viewer.userId.toUpperCase(), 'viewer')).body.role).toBe('viewer');
  });
});

describe('removing a user', () => {
  test('the removed user’s access and refresh tokens are refused at once; audited with what they were; their email is free again', async () => {
    const org = await signUp(t, 'remove');
    const operator = await addUser(t, org, 'operator');
    const { accessToken, refreshToken } = await session(operator.email);
    expect((await t.request('GET', `/api/v1/orgs/${org.orgId}`, { token: accessToken })).status).toBe(200);

    const removed = await removeUser(org, operator.userId);
    expect(removed.status).toBe(204);
    expect(removed.text).toBe('');
    for (const token of [accessToken, operator.token]) {
      const refused = await t.request('GET', `/api/v1/orgs/${org.orgId}`, { token });
      expect({ status: refused.status, code: refused.body.detail.code }).toEqual({
        status: 401,
        code: 'INVALID_TOKEN',
      });
    }
    expect((await t.request('POST', '/api/v1/auth/refresh', { token: accessToken })).status).toBe(401);
    const rotated = await rotate(refreshToken);
    expect({ status: rotated.status, code: rotated.body.detail.code }).toEqual({ status: 401, code: 'INVALID_TOKEN' });
    const login = await t.request('POST', '/api/v1/auth/login', {
      body: { email: operator.email, password: PASSWORD },
    });
    expect(login.status).toBe(401);
    expect(await rolesOf(org)).toEqual([[org.adminEmail, 'admin']]);
    // Their session rows went with them.
    const [left] = await t.database.db.sql.query<{ families: number; tokens: number }>(
      `SELECT (SELECT count(*)::int FROM session_families WHERE user_id = $1) AS families,
              (SELECT count(*)::int FROM refresh_tokens WHERE user_id = $1) AS tokens`,
      [operator.userId],
    );
    expect(left).toEqual({ families: 0, tokens: 0 });

    expect(await auditOf(org, 'user.removed')).toEqual([
      expect.objectContaining({
        actor: { type: 'user', id: org.adminUserId, label: org.adminEmail },
        target: { type: 'user', id: operator.userId },
        before: { email: operator.email, role: 'operator' },
        after: null,
      }),
    ]);
    // Removed again: gone.
    expect((await removeUser(org, operator.userId)).status).toBe(404);
    const readded = await t.request('POST', `/api/v1/orgs/${org.orgId}/users`, {
      token: org.adminToken,
      body: { email: operator.email, password: PASSWORD, role: 'viewer' },
    });
    expect(readded.status).toBe(201);
    expect(readded.body.user_id).not.toBe(operator.userId);
  });

  test('the last admin cannot be removed (409), themself included; a second admin can remove themself and is signed out by it', async () => {
    const org = await signUp(t, 'remove');
    const refused = await removeUser(org, org.adminUserId);
    expect({ status: refused.status, body: refused.body }).toEqual({
      status: 409,
      body: {
        error: {
          code: 'CONFLICT',
          message: "The organization's last admin cannot be removed: make another user admin first",
          details: {},
        },
      },
    });
    expect(await auditOf(org, 'user.removed')).toEqual([]);
    const second = await addUser(t, org, 'admin');
    expect((await removeUser(org, second.userId, second.token)).status).toBe(204);
    expect((await listUsers(org, second.token)).status).toBe(401);
    expect(await rolesOf(org)).toEqual([[org.adminEmail, 'admin']]);
    expect((await removeUser(org, org.adminUserId)).status).toBe(409);
  });

  test('what the removed admin created, allowed and decided stays the org’s: their API key works, their OAuth grant serves, their approval stands', async () => {
    const org = await signUp(t, 'remove');
    const agent = await readyAgent(t, org, {
      constraints: { max_actions_per_hour: 100, max_actions_per_day: 100, require_human_approval: ['billing:refund'] },
    });
    const leaving = await addUser(t, org, 'admin');
    const asLeaving = { ...org, adminToken: leaving.token };
    const { key, keyId } = await createKey(t, asLeaving, ['logs:read']);
    const client = await connectClient(t, t.app.env.publicUrl, leaving.token, agent.svcId);
    const asked = await execute(t, agent, actionBody(agent, 'refund', { invoice: 'inv-9' }));
    const approvalId = asked.body.approval_id as string;
    const approved = await t.request('POST', `/api/v1/orgs/${org.orgId}/approvals/${approvalId}/approve`, {
      token: leaving.token,
      body: { notes: 'checked' },
    });
    expect(approved.status).toBe(200);

    expect((await removeUser(org, leaving.userId)).status).toBe(204);
    expect((await t.request('GET', '/api/v1/records', { apiKey: key })).status).toBe(200);
    expect((await mcpRequest(t, agent.svcId, client.accessToken)).status).toBe(200);
    const keys = await t.request('GET', `/api/v1/orgs/${org.orgId}/api-keys`, { token: org.adminToken });
    expect(keys.body.items.map((k: { key_id: string }) => k.key_id)).toContain(keyId);
    const grants = await t.request('GET', `/api/v1/agents/${agent.svcId}/grants`, { token: org.adminToken });
    expect(grants.body.items).toEqual([
      expect.objectContaining({ grant_id: client.grantId, approved_by: leaving.email }),
    ]);
    const approval = await t.graphql(
      'query($o: ID!, $a: ID!) { approval(org_id: $o, approval_id: $a) { status decided_by decided_by_user { user_id } } }',
      { o: org.orgId, a: approvalId },
      { token: org.adminToken },
    );
    expect(approval.body).toEqual({
      data: { approval: { status: 'approved', decided_by: leaving.email, decided_by_user: null } },
    });
    const [references] = await t.database.db.sql.query<{ keys: number; grants: number }>(
      `SELECT (SELECT count(*)::int FROM api_keys WHERE created_by_id = $1) AS keys,
              (SELECT count(*)::int FROM oauth_grants WHERE approved_by_user_id = $1) AS grants`,
      [leaving.userId],
    );
    expect(references).toEqual({ keys: 0, grants: 0 });
  });
});

describe('concurrent requests', () => {
  // PostgreSQL runs these at once on separate connections; without the lock on the org's admins
  // each would count the others as still admins and all would succeed, leaving no admin.
  test('admins who all demote or remove themselves at once: exactly one is refused, and one admin remains', async () => {
    const org = await signUp(t, 'race');
    const others = await Promise.all(Array.from({ length: 7 }, () => addUser(t, org, 'admin')));
    const admins = [{ userId: org.adminUserId, token: org.adminToken }, ...others];
    const answers = await Promise.all(
      admins.map((admin, i) =>
        i % 2 ? setRole(org, admin.userId, 'operator', admin.token) : removeUser(org, admin.userId, admin.token),
      ),
    );
    const statuses = answers.map((r) => r.status);
    expect(statuses.filter((s) => s === 409)).toHaveLength(1);
    expect(statuses.filter((s) => s === 200 || s === 204)).toHaveLength(7);
    const remaining = await t.database.db.sql.query<{ role: string }>(
      `SELECT role::text AS role FROM users WHERE org_id = $1 AND role = 'admin'`,
      [org.orgId],
    );
    expect(remaining).toHaveLength(1);
    const audited = await t.database.db.sql.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM audit_logs WHERE org_id = $1 AND action IN ('user.role_changed', 'user.removed')`,
      [org.orgId],
    );
    expect(audited[0].n).toBe(7);
  });

  test('two admins demoting each other at once: one succeeds, and the org keeps an admin', async () => {
    const org = await signUp(t, 'race');
    const other = await addUser(t, org, 'admin');
    const answers = await Promise.all([
      setRole(org, other.userId, 'viewer'),
      setRole(org, org.adminUserId, 'viewer', other.token),
    ]);
    const statuses = answers.map((r) => r.status).sort();
    // The loser either waited for the winner (409) or was authenticated after it committed (403).
    expect(statuses[0]).toBe(200);
    expect([403, 409]).toContain(statuses[1]);
    const roles = await t.database.db.sql.query<{ role: string }>(
      'SELECT role::text AS role FROM users WHERE org_id = $1 ORDER BY role',
      [org.orgId],
    );
    expect(roles.map((r) => r.role)).toEqual(['admin', 'viewer']);
  });
});

describe('who may', () => {
  test('operators and viewers are refused (403), API keys too, and nothing changes', async () => {
    const org = await signUp(t, 'who');
    const operator = await addUser(t, org, 'operator');
    const viewer = await addUser(t, org, 'viewer');
    for (const token of [operator.token, viewer.token]) {
      expect((await setRole(org, viewer.userId, 'admin', token)).status).toBe(403);
      expect((await setRole(org, operator.userId, 'admin', token)).status).toBe(403);
      expect((await removeUser(org, org.adminUserId, token)).status).toBe(403);
    }
    const { key } = await createKey(t, org, ['logs:read', 'manifests:write', 'approvals:write']);
    for (const response of [
      await t.request('PATCH', userPath(org, viewer.userId), { apiKey: key, body: { role: 'admin' } }),
      await t.request('DELETE', userPath(org, viewer.userId), { apiKey: key }),
    ]) {
      expect({ status: response.status, code: response.body.detail.code }).toEqual({ status: 403, code: 'FORBIDDEN' });
    }
    expect(await rolesOf(org)).toEqual([
      [org.adminEmail, 'admin'],
      [operator.email, 'operator'],
      [viewer.email, 'viewer'],
    ]);
  });

  test("another org's users are unknown: 404 through the caller's own org and through theirs, and untouched", async () => {
    const mine = await signUp(t, 'who');
    const theirs = await signUp(t, 'who');
    const theirViewer = await addUser(t, theirs, 'viewer');
    const notFound = { error: { code: 'NOT_FOUND', message: expect.any(String), details: {} } };
    // Their user named under my org: the same answer as a user that never existed.
    for (const response of [
      await setRole(mine, theirViewer.userId, 'admin'),
      await removeUser(mine, theirViewer.userId),
      await setRole(mine, theirs.adminUserId, 'viewer'),
      await removeUser(mine, theirs.adminUserId),
    ]) {
      expect({ status: response.status, body: response.body }).toEqual({
        status: 404,
        body: { error: { code: 'NOT_FOUND', message: 'User not found', details: {} } },
      });
    }
    // Their org in the path: the org is not found.
    for (const response of [
      await setRole(theirs, theirViewer.userId, 'admin', mine.adminToken),
      await removeUser(theirs, theirViewer.userId, mine.adminToken),
    ]) {
      expect({ status: response.status, body: response.body }).toEqual({ status: 404, body: notFound });
    }
    expect(await rolesOf(theirs)).toEqual([
      [theirs.adminEmail, 'admin'],
      [theirViewer.email, 'viewer'],
    ]);
  });
});

describe('GraphQL', () => {
  const UPDATE = `mutation($o: ID!, $u: ID!, $r: UserRole!) {
    update_user_role(org_id: $o, user_id: $u, role: $r) { user_id role }
  }`;
  const REMOVE = 'mutation($o: ID!, $u: ID!) { remove_user(org_id: $o, user_id: $u) }';

  test('update_user_role and remove_user, with the same codes as REST', async () => {
    const org = await signUp(t, 'graphql');
    const viewer = await addUser(t, org, 'viewer');
    const updated = await t.graphql(
      UPDATE,
      { o: org.orgId, u: viewer.userId, r: 'operator' },
      { token: org.adminToken },
    );
    expect(updated.body).toEqual({ data: { update_user_role: { user_id: viewer.userId, role: 'operator' } } });

    const forbidden = await t.graphql(REMOVE, { o: org.orgId, u: org.adminUserId }, { token: viewer.token });
    expect(forbidden.body.errors[0].extensions.code).toBe('FORBIDDEN');
    const last = await t.graphql(UPDATE, { o: org.orgId, u: org.adminUserId, r: 'viewer' }, { token: org.adminToken });
    expect(last.body.errors[0]).toMatchObject({
      message: "The organization's last admin cannot be demoted: make another user admin first",
      extensions: { code: 'CONFLICT', details: { field: 'role' } },
    });
    const badRole = await t.graphql(UPDATE, { o: org.orgId, u: viewer.userId, r: 'owner' }, { token: org.adminToken });
    expect(badRole.body.errors).toHaveLength(1);
    expect(badRole.body.data).toBeUndefined();

    const removed = await t.graphql(REMOVE, { o: org.orgId, u: viewer.userId }, { token: org.adminToken });
    expect(removed.body).toEqual({ data: { remove_user: true } });
    const gone = await t.graphql(REMOVE, { o: org.orgId, u: viewer.userId }, { token: org.adminToken });
    expect(gone.body.errors[0].extensions.code).toBe('NOT_FOUND');
    expect(await rolesOf(org)).toEqual([[org.adminEmail, 'admin']]);
    expect((await auditOf(org, 'user')).map((e) => e.action)).toEqual([
      'user.removed',
      'user.role_changed',
      'user.created',
      'user.created',
    ]);
  });
});
