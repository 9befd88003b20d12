import { randomBytes } from 'node:crypto';
import { decodeProtectedHeader } from 'jose';
import { startTestApp, type TestApp } from './support/app.js';
import { login, signUp } from './support/fixtures.js';
import { execute, readyAgent } from './support/gateway.js';

const encryptionKey = randomBytes(32).toString('hex');
let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ KEY_ENCRYPTION_KEY: encryptionKey });
});
afterAll(() => t.close());

test('with KEY_ENCRYPTION_KEY the private keys are stored encrypted and still sign', async () => {
  const org = await signUp(t);
  const me = await t.request('GET', `/api/v1/orgs/${org.orgId}`, { token: org.adminToken });
  expect(me.status).toBe(200);
  const rows = await t.database.db.sql.query<{ private_key: string; encrypted: boolean }>(
    "SELECT private_key, encrypted FROM signing_keys WHERE purpose = 'session'",
  );
  expect(rows.length).toBeGreaterThan(0);
  for (const row of rows) {
    expect(row.encrypted).toBe(true);
    expect(row.private_key).toMatch(/^agw:v1:[0-9a-f]{8}:/);
    expect(row.private_key).not.toContain('PRIVATE KEY');
  }
});

test('rotation makes a new active key while tokens signed with the retired one keep verifying', async () => {
  const org = await signUp(t);
  const before = decodeProtectedHeader(org.adminToken).kid;
  const rotated = await t.app.keys.rotate('session');
  expect(rotated.kid).not.toBe(before);
  const fresh = await login(t, org.adminEmail);
  expect(decodeProtectedHeader(fresh).kid).toBe(rotated.kid);
  for (const token of [org.adminToken, fresh]) {
    expect((await t.request('GET', `/api/v1/orgs/${org.orgId}`, { token })).status).toBe(200);
  }
  const [retired] = await t.database.db.sql.query<{ retired_at: Date | null }>(
    'SELECT retired_at FROM signing_keys WHERE kid = $1',
    [before],
  );
  expect(retired.retired_at).not.toBeNull();
});

test('after a record key rotation by a second app instance, new records use the new key; old and new records verify', async () => {
  const org = await signUp(t);
  const agent = await readyAgent(t, org);
  const before = await execute(t, agent);
  const oldKid = (await t.request('GET', `/api/v1/records/${before.body.interaction_id}`, { token: org.adminToken }))
    .body.key_id;

  // A second app instance on the same database (its own key store) rotates the record key;
  // test/multi-process.test.ts does it from another OS process with the CLI.
  const other = await startTestApp({ KEY_ENCRYPTION_KEY: encryptionKey }, { db: t.database.db });
  let newKid: string;
  try {
    newKid = (await other.app.keys.rotate('record')).kid;
  } finally {
    await other.app.stop();
  }
  expect(newKid).not.toBe(oldKid);
  const rotatedAt = Date.now();
  let kid = oldKid;
  let recordId = '';
  // Every execute below starts within the second after the rotation.
  while (kid !== newKid && Date.now() - rotatedAt < 1000) {
    recordId = (await execute(t, agent)).body.interaction_id;
    kid = (await t.request('GET', `/api/v1/records/${recordId}`, { token: org.adminToken })).body.key_id;
  }
  expect(kid).toBe(newKid);
  for (const id of [before.body.interaction_id, recordId]) {
    const verified = await t.request('GET', `/api/v1/records/${id}/verify`, { token: org.adminToken });
    expect(verified.body).toMatchObject({ valid: true, checks: { hash: true, signature: true, chain: true } });
  }
  const jwks = await t.request('GET', '/.well-known/jwks.json');
  expect(jwks.body.keys.map((k: { kid: string }) => k.kid)).toEqual(expect.arrayContaining([oldKid, newKid]));
});
