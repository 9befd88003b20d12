import type { TypedDocumentNode } from '@graphql-typed-document-node/core';
import { print } from 'graphql';
import { CreateApiKeyDocument, LoginDocument, OrganizationDashboardDocument } from './generated/graphql.js';
import { startTestApp, type RequestOptions, type TestApp } from './support/app.js';
import { PASSWORD, addUser, signUp } from './support/fixtures.js';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

/** Runs a typed operation from test/graphql/*.graphql against /graphql. */
async function run<Result, Variables extends Record<string, unknown>>(
  document: TypedDocumentNode<Result, Variables>,
  variables: Variables,
  options: RequestOptions = {},
) {
  const response = await t.graphql<{
    data: Result | null;
    errors?: { message: string; extensions: { code: string; details?: unknown } }[];
  }>(print(document), variables, options);
  return response;
}

test('a dashboard reads the organization, its admin, users and keys in one request', async () => {
  const org = await signUp(t);
  await addUser(t, org, 'viewer');
  const login = await run(LoginDocument, { email: org.adminEmail, password: PASSWORD });
  expect(login.body.data?.login).toMatchObject({
    token_type: 'bearer',
    expires_in: 3600,
    user: { role: 'admin', org_id: org.orgId },
  });
  const token = login.body.data!.login.access_token;

  const key = await run(CreateApiKeyDocument, { orgId: org.orgId, name: 'dash', scopes: ['logs:read'] }, { token });
  expect(key.body.errors).toBeUndefined();
  expect(key.body.data?.create_api_key.key).toMatch(/^agw_/);

  const dashboard = await run(OrganizationDashboardDocument, { orgId: org.orgId }, { token });
  expect(dashboard.status).toBe(200);
  expect(dashboard.body.errors).toBeUndefined();
  const data = dashboard.body.data!;
  expect(data.organization.admin_user).toEqual({ user_id: org.adminUserId, email: org.adminEmail, role: 'admin' });
  expect(data.users.total).toBe(2);
  expect(data.api_keys.items.map((k) => k.scopes)).toEqual([['logs:read']]);
});

test('errors carry the same codes as REST in extensions.code', async () => {
  const org = await signUp(t);
  const other = await signUp(t);
  const anonymous = await run(OrganizationDashboardDocument, { orgId: org.orgId });
  expect(anonymous.body.errors?.[0].extensions.code).toBe('AUTHENTICATION_REQUIRED');

  const foreign = await run(OrganizationDashboardDocument, { orgId: org.orgId }, { token: other.adminToken });
  expect(foreign.body.errors?.map((e) => e.extensions.code)).toContain('NOT_FOUND');

  const viewer = await addUser(t, org, 'viewer');
  const forbidden = await run(
    CreateApiKeyDocument,
    { orgId: org.orgId, name: 'x', scopes: ['logs:read'] },
    { token: viewer.token },
  );
  expect(forbidden.body.errors?.[0].extensions.code).toBe('FORBIDDEN');

  const invalid = await run(
    CreateApiKeyDocument,
    { orgId: org.orgId, name: 'x', scopes: ['nope:nope'] },
    { token: org.adminToken },
  );
  expect(invalid.body.errors?.[0].extensions).toMatchObject({
    code: 'VALIDATION_ERROR',
    details: { errors: [{ field: 'scopes[0]', message: expect.any(String) }] },
  });

  const badLogin = await run(LoginDocument, { email: org.adminEmail, password: 'not the password' });
  expect(badLogin.body.errors?.[0].extensions.code).toBe('INVALID_TOKEN');
});
