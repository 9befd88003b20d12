import { randomBytes } from 'node:crypto';
import { decodeProtectedHeader } from 'jose';
import { startTestApp, type TestApp } from './support/app.js';
import { login, signUp } from './support/fixtures.js';

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
    expect(row.private_key).toMatch(/^v1:/);
    expect(row.private_key).not.toContain('PRIVATE KEY');
  }
});

test('rotation makes a new active key while tokens signed with the retired one keep verifying', async () => {
  const org = await signUp(t);
  const before = decodeProtectedHeader(org.adminToken).kid;
  const rotated = await t.app.services.keys.rotate('session');
  expect(rotated.kid).not.toBe(before);
  const fresh = await login(t, org.adminEmail);
  expect(decodeProtectedHeader(fresh).kid).toBe(rotated.kid);
  for (const token of [org.adminToken, fresh]) {
    expect((await t.request('GET', `/api/v1/orgs/${org.orgId}`, { token })).status).toBe(200);
  }
  const [retired] = await t.database.db.sql.query<{ retired_at: Date | null }>('SELECT retired_at FROM signing_keys WHERE kid = $1', [
    before,
  ]);
  expect(retired.retired_at).not.toBeNull();
});
