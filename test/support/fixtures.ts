import { randomBytes } from 'node:crypto';
import type { TestApp } from './app.js';

export const PASSWORD = 'correct horse battery staple';

export interface OrgFixture {
  orgId: string;
  slug: string;
  adminEmail: string;
  adminToken: string;
  adminUserId: string;
}

const unique = () => randomBytes(4).toString('hex');

export async function signUp(t: TestApp, prefix = 'org'): Promise<OrgFixture> {
  const slug = `${prefix}-${unique()}`;
  const adminEmail = `admin@${slug}.example`;
  const created = await t.request('POST', '/api/v1/orgs', {
    body: { name: `Org ${slug}`, slug, admin_email: adminEmail, admin_password: PASSWORD },
  });
  if (created.status !== 201) throw new Error(`sign-up failed: ${created.status} ${created.text}`);
  const adminToken = await login(t, adminEmail);
  return { orgId: created.body.org_id, slug, adminEmail, adminToken, adminUserId: created.body.admin_user.user_id };
}

export async function login(t: TestApp, email: string, password = PASSWORD): Promise<string> {
  const response = await t.request('POST', '/api/v1/auth/login', { body: { email, password } });
  if (response.status !== 200) throw new Error(`login failed: ${response.status} ${response.text}`);
  return response.body.access_token;
}

/** A user with the role, logged in. */
export async function addUser(t: TestApp, org: OrgFixture, role: 'admin' | 'operator' | 'viewer') {
  const email = `${role}-${unique()}@${org.slug}.example`;
  const created = await t.request('POST', `/api/v1/orgs/${org.orgId}/users`, {
    token: org.adminToken,
    body: { email, password: PASSWORD, role },
  });
  if (created.status !== 201) throw new Error(`add user failed: ${created.status} ${created.text}`);
  return { userId: created.body.user_id as string, email, token: await login(t, email) };
}

export async function createKey(t: TestApp, org: OrgFixture, scopes: string[], extra: Record<string, unknown> = {}) {
  const created = await t.request('POST', `/api/v1/orgs/${org.orgId}/api-keys`, {
    token: org.adminToken,
    body: { name: `key ${unique()}`, scopes, ...extra },
  });
  if (created.status !== 201) throw new Error(`create key failed: ${created.status} ${created.text}`);
  return { keyId: created.body.key_id as string, key: created.body.key as string };
}
