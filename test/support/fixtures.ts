import { randomBytes } from 'node:crypto';
import type { TestClient } from './app.js';

export const PASSWORD = 'correct horse battery staple';

export interface OrgFixture {
  orgId: string;
  slug: string;
  adminEmail: string;
  adminToken: string;
  adminUserId: string;
}

const unique = () => randomBytes(4).toString('hex');

export async function signUp(t: TestClient, prefix = 'org'): Promise<OrgFixture> {
  const slug = `${prefix}-${unique()}`;
  const adminEmail = `admin@${slug}.example`;
  const created = await t.request('POST', '/api/v1/orgs', {
    body: { name: `Org ${slug}`, slug, admin_email: adminEmail, admin_password: PASSWORD },
  });
  if (created.status !== 201) throw new Error(`sign-up failed: ${created.status} ${created.text}`);
  const adminToken = await login(t, adminEmail);
  return { orgId: created.body.org_id, slug, adminEmail, adminToken, adminUserId: created.body.admin_user.user_id };
}

export async function login(t: TestClient, email: string, password = PASSWORD): Promise<string> {
  const response = await t.request('POST', '/api/v1/auth/login', { body: { email, password } });
  if (response.status !== 200) throw new Error(`login failed: ${response.status} ${response.text}`);
  return response.body.access_token;
}

/** A user with the role, logged in. */
export async function addUser(t: TestClient, org: OrgFixture, role: 'admin' | 'operator' | 'viewer') {
  const email = `${role}-${unique()}@${org.slug}.example`;
  const created = await t.request('POST', `/api/v1/orgs/${org.orgId}/users`, {
    token: org.adminToken,
    body: { email, password: PASSWORD, role },
  });
  if (created.status !== 201) throw new Error(`add user failed: ${created.status} ${created.text}`);
  return { userId: created.body.user_id as string, email, token: await login(t, email) };
}

export async function createKey(t: TestClient, org: OrgFixture, scopes: string[], extra: Record<string, unknown> = {}) {
  const created = await t.request('POST', `/api/v1/orgs/${org.orgId}/api-keys`, {
    token: org.adminToken,
    body: { name: `key ${unique()}`, scopes, ...extra },
  });
  if (created.status !== 201) throw new Error(`create key failed: ${created.status} ${created.text}`);
  return { keyId: created.body.key_id as string, key: created.body.key as string };
}

export function manifestPayload(overrides: { svcId?: string; capabilities?: string[]; [key: string]: unknown } = {}) {
  const { svcId, capabilities, ...rest } = overrides;
  return {
    version: '1.0',
    agent: { id: svcId ?? `agent-${unique()}`, name: 'Test agent', version: '1.0.0', team: 'platform' },
    capabilities: { requested: capabilities ?? ['billing:read', 'billing:write', 'email:send'] },
    constraints: { max_actions_per_hour: 10, max_actions_per_day: 100 },
    ...rest,
  };
}

export type ManifestState = 'pending' | 'active' | 'suspended';

/** Registers a manifest through the API and walks it to `state`. */
export async function createManifest(
  t: TestClient,
  org: OrgFixture,
  state: ManifestState = 'pending',
  payload: Record<string, unknown> = manifestPayload(),
) {
  const base = `/api/v1/orgs/${org.orgId}/manifests`;
  const created = await t.request('POST', base, { token: org.adminToken, body: payload });
  if (created.status !== 201) throw new Error(`register failed: ${created.status} ${created.text}`);
  const id = created.body.manifest_id as string;
  const step = async (action: string, body: unknown) => {
    const response = await t.request('POST', `${base}/${id}/${action}`, { token: org.adminToken, body });
    if (response.status !== 200) throw new Error(`${action} failed: ${response.status} ${response.text}`);
  };
  if (state !== 'pending') await step('approve', {});
  if (state === 'suspended') await step('suspend', { reason: 'fixture' });
  return { manifestId: id, svcId: created.body.svc_id as string, body: created.body };
}
