/**
 * Operators' read answers kept by their org's data version (src/http/answer-cache.ts, decision
 * 0084): a repeated read is answered without a statement of its own, and any write to the rows it
 * is made of, by the API or by SQL behind the service's back, is seen by the next read. The
 * credentials, the rate limit and the caller's rights are checked on every request, kept or not.
 * Across processes: test/multi-process.test.ts.
 */
import { VERSIONED_TABLES } from '../src/api/rest-routes.js';
import { AnswerCache } from '../src/http/answer-cache.js';
import { restRoutes } from '../src/http/schema.js';
import { publicPath } from '../src/api/rest-routes.js';
import type { UserPrincipal } from '../src/authz/authz.js';
import { startTestApp, type TestApp } from './support/app.js';
import { addUser, signUp, type OrgFixture } from './support/fixtures.js';
import { exchange, laneServers } from './support/lane-servers.js';
import { StatementCounter } from './support/statements.js';

const statements = new StatementCounter();
const servers = laneServers();
let t: TestApp;
let base: string;

beforeAll(async () => {
  t = await startTestApp({}, { onQuery: statements.observe });
  // Node's server of the app's handler, as the service runs: operators' reads take the lane.
  base = await servers.listen(t.app.handler);
});
afterAll(async () => {
  servers.close();
  await t.close();
});

/** A GET through the lane: its status, body, and the Prisma statements it sent (the bearer check's are not Prisma's). */
async function read(path: string, token: string) {
  const { result, statements: sent } = await statements.count(() =>
    exchange(`${base}${path}`, 'GET', { headers: { authorization: `Bearer ${token}` } }),
  );
  return { status: result.status, body: JSON.parse(result.text), headers: result.headers, sent };
}

const orgPath = (org: OrgFixture) => `/api/v1/orgs/${org.orgId}`;

/** Reads twice: the second is the kept answer (no statement), equal to the first. */
async function readKept(org: OrgFixture, token: string) {
  const first = await read(orgPath(org), token);
  expect(first.status).toBe(200);
  const second = await read(orgPath(org), token);
  expect({ status: second.status, body: second.body, sent: second.sent }).toEqual({
    status: 200,
    body: first.body,
    sent: [],
  });
  return second.body;
}

describe('AnswerCache', () => {
  const principal = (role: UserPrincipal['role'], userId = 'u1'): UserPrincipal => ({
    type: 'user',
    userId,
    orgId: 'o1',
    email: 'a@b.example',
    role,
    tokenId: 'j',
    tokenExpiresAt: new Date(),
    sessionFamilyId: 'f',
  });
  const answer = (body: string, status = 200) => ({ status, headers: { 'Content-Type': 'application/json' }, body });
  const args = { org_id: 'o1' };

  test('an answer is served for its version only; another version drops it', () => {
    const cache = new AnswerCache();
    const key = AnswerCache.keyOf(principal('admin'), 'GET /api/v1/orgs/:org_id', args);
    cache.set(key, '7', answer('{"a":1}'));
    expect(cache.get(key, '7')).toEqual(answer('{"a":1}'));
    expect(cache.get(key, '8')).toBeUndefined();
    expect(cache.get(key, '7')).toBeUndefined();
  });

  test('the key is the user, their role, the route and its arguments', () => {
    const label = 'GET /api/v1/orgs/:org_id';
    const keys = new Set([
      AnswerCache.keyOf(principal('admin'), label, args),
      AnswerCache.keyOf(principal('viewer'), label, args),
      AnswerCache.keyOf(principal('admin', 'u2'), label, args),
      AnswerCache.keyOf(principal('admin'), label, { org_id: 'o2' }),
      AnswerCache.keyOf(principal('admin'), 'GET /api/v1/orgs/:org_id/users', args),
    ]);
    expect(keys.size).toBe(5);
  });

  test('only 200 answers up to the body bound are kept, within the total length, the oldest going first', () => {
    // Keys of one character and bodies of up to 10: 33 characters hold three answers of 10.
    const cache = new AnswerCache(33, 10);
    cache.set('e', '1', answer('{}', 404));
    cache.set('l', '1', answer('x'.repeat(11)));
    expect([cache.get('e', '1'), cache.get('l', '1'), cache.size]).toEqual([
      undefined,
      undefined,
      { answers: 0, length: 0 },
    ]);
    for (const key of ['a', 'b', 'c', 'd']) cache.set(key, '1', answer(key.repeat(10)));
    expect(['a', 'b', 'c', 'd'].map((key) => cache.get(key, '1')?.body[0])).toEqual([undefined, 'b', 'c', 'd']);
    expect(cache.size).toEqual({ answers: 3, length: 33 });
    // Kept again under the same key: counted once.
    cache.set('d', '1', answer('d'));
    expect(cache.size).toEqual({ answers: 3, length: 24 });
    // A version that changed drops the answer and its length.
    expect(cache.get('b', '2')).toBeUndefined();
    expect(cache.size).toEqual({ answers: 2, length: 13 });
  });

  test('a served answer is a copy: changing its headers changes nothing kept', () => {
    const cache = new AnswerCache();
    cache.set('k', '1', answer('{}'));
    cache.get('k', '1')!.headers['X-Changed'] = 'yes';
    expect(cache.get('k', '1')!.headers).toEqual({ 'Content-Type': 'application/json' });
  });
});

describe('GET /api/v1/orgs/{org_id}, kept by data version', () => {
  test('a repeated read sends no statement of its own; a change through the API is in the next read', async () => {
    const org = await signUp(t, 'kept');
    await readKept(org, org.adminToken);
    const patched = await t.request('PATCH', orgPath(org), { token: org.adminToken, body: { name: 'Renamed' } });
    expect(patched.status).toBe(200);
    const after = await read(orgPath(org), org.adminToken);
    expect(after.body.name).toBe('Renamed');
    expect(after.sent.length).toBeGreaterThan(0);
    expect((await readKept(org, org.adminToken)).name).toBe('Renamed');
  });

  test('writes by SQL behind the service (the organization, its admin user) are in the next read', async () => {
    const org = await signUp(t, 'sqlwrite');
    await readKept(org, org.adminToken);
    await t.database.db.sql.query('UPDATE organizations SET approval_ttl_seconds = 4321 WHERE id = $1', [org.orgId]);
    expect((await read(orgPath(org), org.adminToken)).body.approval_ttl_seconds).toBe(4321);
    await readKept(org, org.adminToken);
    const email = `renamed-${org.slug}@example.test`;
    await t.database.db.sql.query('UPDATE users SET email = $1 WHERE id = $2', [email, org.adminUserId]);
    expect((await read(orgPath(org), org.adminToken)).body.admin_user.email).toBe(email);
  });

  test('a database restored from a backup and written again: the next read is of the rows as they are, not a kept answer', async () => {
    const org = await signUp(t, 'restored');
    const sql = t.database.db.sql;
    await sql.query("UPDATE organizations SET name = 'Backed up' WHERE id = $1", [org.orgId]);
    const [backup] = await sql.query<{ version: string }>(
      'SELECT version::text AS version FROM org_data_versions WHERE org_id = $1',
      [org.orgId],
    );
    await t.request('PATCH', orgPath(org), { token: org.adminToken, body: { name: 'After the backup' } });
    expect((await readKept(org, org.adminToken)).name).toBe('After the backup');
    // The restore: the rows and their version as the backup has them, written without the triggers
    // (as pg_restore loads data).
    await sql.transaction(async (tx) => {
      await tx.query('ALTER TABLE organizations DISABLE TRIGGER organizations_bump_org_data_version');
      await tx.query("UPDATE organizations SET name = 'Backed up' WHERE id = $1", [org.orgId]);
      await tx.query('UPDATE org_data_versions SET version = $2::uuid WHERE org_id = $1', [org.orgId, backup.version]);
      await tx.query('ALTER TABLE organizations ENABLE TRIGGER organizations_bump_org_data_version');
    });
    // Written again once: a counted version would be back at the number the kept answer has.
    await t.request('PATCH', orgPath(org), { token: org.adminToken, body: { name: 'Written again' } });
    expect((await read(orgPath(org), org.adminToken)).body.name).toBe('Written again');
    expect((await read(orgPath(org), org.adminToken)).body.name).toBe('Written again');
  });

  test('query parameters the route does not take share the one kept answer', async () => {
    const org = await signUp(t, 'params');
    await readKept(org, org.adminToken);
    for (const search of ['?unknown=1', '?unknown=2&other=x', '?other=x&unknown=2']) {
      const answered = await read(`${orgPath(org)}${search}`, org.adminToken);
      expect({ search, status: answered.status, sent: answered.sent }).toEqual({ search, status: 200, sent: [] });
    }
  });

  test("another org's write leaves this org's kept answer in place", async () => {
    const org = await signUp(t, 'quiet');
    const other = await signUp(t, 'busy');
    await readKept(org, org.adminToken);
    await t.request('PATCH', orgPath(other), { token: other.adminToken, body: { name: 'Busy' } });
    expect((await read(orgPath(org), org.adminToken)).sent).toEqual([]);
  });

  test("each caller's answer is their own: another user of the org makes their own first", async () => {
    const org = await signUp(t, 'callers');
    const viewer = await addUser(t, org, 'viewer');
    const adminAnswer = await readKept(org, org.adminToken);
    const first = await read(orgPath(org), viewer.token);
    expect(first.sent.length).toBeGreaterThan(0);
    expect(first.body).toEqual(adminAnswer);
  });

  test('another org cannot read a kept answer: not found, as without the cache', async () => {
    const org = await signUp(t, 'owner');
    const outsider = await signUp(t, 'outsider');
    await readKept(org, org.adminToken);
    const refused = await read(orgPath(org), outsider.adminToken);
    expect(refused.status).toBe(404);
    expect(JSON.stringify(refused.body)).not.toContain(org.slug);
  });

  test('a demoted, a removed and a logged-out user: the check of their token comes first, every time', async () => {
    const org = await signUp(t, 'rights');
    const admin = await addUser(t, org, 'admin');
    await readKept(org, admin.token);
    const demoted = await t.request('PATCH', `${orgPath(org)}/users/${admin.userId}`, {
      token: org.adminToken,
      body: { role: 'viewer' },
    });
    expect(demoted.status).toBe(200);
    const asViewer = await read(orgPath(org), admin.token);
    expect(asViewer.status).toBe(200);
    expect(asViewer.sent.length).toBeGreaterThan(0);
    await read(orgPath(org), admin.token);
    expect((await t.request('DELETE', `${orgPath(org)}/users/${admin.userId}`, { token: org.adminToken })).status).toBe(
      204,
    );
    expect((await read(orgPath(org), admin.token)).status).toBe(401);

    await readKept(org, org.adminToken);
    expect((await t.request('POST', '/api/v1/auth/logout', { token: org.adminToken })).status).toBe(204);
    const afterLogout = await read(orgPath(org), org.adminToken);
    expect(afterLogout.status).toBe(401);
  });

  test('kept answers count against the operator rate limit as any read does', async () => {
    const org = await signUp(t, 'limited');
    await readKept(org, org.adminToken);
    await t.database.db.sql.query('UPDATE organizations SET operator_rate_limit_per_minute = 1 WHERE id = $1', [
      org.orgId,
    ]);
    const answers = [];
    for (let i = 0; i < 3; i++) answers.push((await read(orgPath(org), org.adminToken)).status);
    expect(answers).toContain(429);
  });
});

describe('GET /api/v1/orgs/{org_id}/users, kept by data version', () => {
  test('a user added is in the next read; an admin demoted is refused though their answer was kept', async () => {
    const org = await signUp(t, 'userlist');
    const admin = await addUser(t, org, 'admin');
    const path = `${orgPath(org)}/users`;
    const first = await read(path, admin.token);
    expect(first.body.total).toBe(2);
    expect((await read(path, admin.token)).sent).toEqual([]);
    const added = await addUser(t, org, 'operator');
    const after = await read(path, admin.token);
    expect(after.body.items.map((user: { email: string }) => user.email)).toContain(added.email);
    expect((await read(path, admin.token)).sent).toEqual([]);
    const demoted = await t.request('PATCH', `${path}/${admin.userId}`, {
      token: org.adminToken,
      body: { role: 'viewer' },
    });
    expect(demoted.status).toBe(200);
    expect((await read(path, admin.token)).status).toBe(403);
  });
});

describe('the routes that keep answers', () => {
  const cached = [...restRoutes.values()].filter((route) => route.answerCache);

  test('there is at least one, every one a GET naming versioned tables only', () => {
    expect(cached.map(publicPath)).toEqual(
      expect.arrayContaining(['/api/v1/orgs/:org_id', '/api/v1/orgs/:org_id/users']),
    );
    for (const route of cached) {
      expect(route.method).toBe('GET');
      for (const table of route.answerCache!.tables) expect(VERSIONED_TABLES).toContain(table);
    }
  });

  test('every versioned table carries the trigger that bumps its org data version, on insert, update and delete', async () => {
    const rows = await t.database.db.sql.query<{ table_name: string; events: string }>(
      `SELECT c.relname AS table_name,
              concat_ws(',', CASE WHEN tgtype & 4 > 0 THEN 'insert' END, CASE WHEN tgtype & 8 > 0 THEN 'delete' END,
                        CASE WHEN tgtype & 16 > 0 THEN 'update' END) AS events
       FROM pg_trigger tg JOIN pg_class c ON c.oid = tg.tgrelid JOIN pg_proc p ON p.oid = tg.tgfoid
       WHERE p.proname = 'bump_org_data_version' AND NOT tg.tgisinternal AND tg.tgtype & 1 = 1`,
    );
    expect(Object.fromEntries(rows.map((row) => [row.table_name, row.events]))).toEqual(
      Object.fromEntries(VERSIONED_TABLES.map((table) => [table, 'insert,delete,update'])),
    );
  });

  test('each route, answered afresh, reads only the tables it declares', async () => {
    const org = await signUp(t, 'declared');
    // Names Prisma qualifies with the schema are tables and types (an enum's cast): the tables only.
    const tableNames = new Set(
      (
        await t.database.db.sql.query<{ name: string }>(
          "SELECT table_name AS name FROM information_schema.tables WHERE table_schema = 'public'",
        )
      ).map((row) => row.name),
    );
    const values: Record<string, string> = { org_id: org.orgId };
    for (const route of cached) {
      const path = publicPath(route).replace(/:([A-Za-z0-9_]+)/g, (_, name: string) => values[name]);
      // A write first, so the read is not a kept answer.
      await t.database.db.sql.query('UPDATE organizations SET name = name WHERE id = $1', [org.orgId]);
      const answered = await read(path, org.adminToken);
      expect(answered.status).toBe(200);
      expect(answered.sent.length).toBeGreaterThan(0);
      const named = answered.sent.flatMap((sql) => [...sql.matchAll(/"public"\."(\w+)"/g)].map((m) => m[1]));
      const tables = new Set(named.filter((name) => tableNames.has(name)));
      expect(tables.size).toBeGreaterThan(0);
      expect({
        path,
        tables: [...tables].filter((table) => !route.answerCache!.tables.includes(table as never)),
      }).toEqual({
        path,
        tables: [],
      });
    }
  });
});
