import { randomUUID } from 'node:crypto';
import { startTestApp, type TestApp } from '../../support/app.js';
import { addUser, createKey, signUp, type OrgFixture } from '../../support/fixtures.js';

/**
 * API keys that act for a user (docs/decisions/0068-upstream-connections.md): an admin binds a key
 * to a user of the org (`user_id`), and tools whose OAuth connections are per user use that user's
 * for the key's calls. Only a user of the same org may be named; removing the user removes their
 * keys, on every process at once.
 */

let t: TestApp;
let org: OrgFixture;
beforeAll(async () => {
  t = await startTestApp();
  org = await signUp(t);
});
afterAll(() => t.close());

const keysPath = () => `/api/v1/orgs/${org.orgId}/api-keys`;
const keyCount = async () => (await t.request('GET', keysPath(), { token: org.adminToken })).body.total as number;

test('a key bound to a user shows it, audits it, and carries it to the calls it authenticates', async () => {
  const operator = await addUser(t, org, 'operator');
  const created = await t.request('POST', keysPath(), {
    token: org.adminToken,
    body: { name: 'operator agent', scopes: ['gateway:execute'], user_id: operator.userId.toUpperCase() },
  });
  expect(created.status).toBe(201);
  expect(created.body.user_id).toBe(operator.userId);
  const listed = await t.request('GET', keysPath(), { token: org.adminToken });
  expect(listed.body.items.find((k: { key_id: string }) => k.key_id === created.body.key_id).user_id).toBe(
    operator.userId,
  );
  const unbound = await createKey(t, org, ['gateway:execute']);
  expect((await t.app.services.apiKeys.verify(created.body.key)).userId).toBe(operator.userId);
  expect((await t.app.services.apiKeys.verify(unbound.key)).userId).toBeNull();

  const audit = await t.request('GET', `/api/v1/orgs/${org.orgId}/audit-logs?action=api_key.created`, {
    token: org.adminToken,
  });
  const entry = audit.body.items.find((e: { target: { id: string } }) => e.target.id === created.body.key_id);
  expect(entry.after.user_id).toBe(operator.userId);

  const overGraphql = await t.graphql(
    'mutation($org: ID!, $user: ID!) { create_api_key(org_id: $org, name: "g", scopes: ["gateway:execute"], user_id: $user) { user_id } }',
    { org: org.orgId, user: operator.userId },
    { token: org.adminToken },
  );
  expect(overGraphql.body).toEqual({ data: { create_api_key: { user_id: operator.userId } } });
});

test.each([
  ['a user of another organization', async () => (await signUp(t, 'other')).adminUserId],
  ['an id no user has', async () => randomUUID()],
  ['something that is not an id', async () => 'not-a-user'],
])('naming %s is a 422 on user_id, and no key is made', async (_, userIdOf) => {
  const before = await keyCount();
  const refused = await t.request('POST', keysPath(), {
    token: org.adminToken,
    body: { name: 'refused', scopes: ['gateway:execute'], user_id: await userIdOf() },
  });
  expect(refused.status).toBe(422);
  expect(refused.body.error.details.errors).toEqual([
    { field: 'user_id', message: 'must be the id of a user of this organization' },
  ]);
  expect(await keyCount()).toBe(before);
});

test('removing the user removes their keys: a key in use stops working at once, others keep working', async () => {
  const viewer = await addUser(t, org, 'viewer');
  const bound = await createKey(t, org, ['manifests:read'], { user_id: viewer.userId });
  const other = await createKey(t, org, ['manifests:read']);
  const read = (key: string) => t.request('GET', `/api/v1/orgs/${org.orgId}/manifests`, { apiKey: key });
  // Used once, so this process holds the key in its cache.
  expect((await read(bound.key)).status).toBe(200);

  const removed = await t.request('DELETE', `/api/v1/orgs/${org.orgId}/users/${viewer.userId}`, {
    token: org.adminToken,
  });
  expect(removed.status).toBe(204);
  const after = await read(bound.key);
  expect(after.status).toBe(401);
  expect(after.body.detail.code).toBe('INVALID_TOKEN');
  expect((await read(other.key)).status).toBe(200);
  const listed = await t.request('GET', keysPath(), { token: org.adminToken });
  expect(listed.body.items.map((k: { key_id: string }) => k.key_id)).not.toContain(bound.keyId);
});
