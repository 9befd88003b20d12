import { startTestApp, type TestApp } from './support/app.js';
import { reopenTestDatabase, type TestDatabase } from './support/database.js';
import { createKey, signUp, type OrgFixture } from './support/fixtures.js';

/**
 * Ten DELETEs of one resource sent at once through two app instances on one database (on
 * PostgreSQL each with its own pool, as two processes would): exactly one deletes it (204) and
 * writes the one audit entry; the others find it gone (404), never a 500.
 */

let first: TestApp;
let second: TestApp;
let secondDatabase: TestDatabase;

beforeAll(async () => {
  first = await startTestApp();
  secondDatabase = await reopenTestDatabase(first.database);
  second = await startTestApp({}, { db: secondDatabase.db });
});

afterAll(async () => {
  await second.close();
  await secondDatabase.close();
  await first.close();
});

const ATTEMPTS = 10;

async function deleteConcurrently(org: OrgFixture, path: string, targetId: string) {
  const responses = await Promise.all(
    Array.from({ length: ATTEMPTS }, (_, i) =>
      (i % 2 ? second : first).request('DELETE', path, { token: org.adminToken }),
    ),
  );
  const statuses = responses.map((r) => r.status).sort();
  expect(statuses).toEqual([204, ...Array(ATTEMPTS - 1).fill(404)]);
  for (const response of responses.filter((r) => r.status === 404)) expect(response.body.error.code).toBe('NOT_FOUND');
  const audits = await first.database.db.sql.query<{ action: string }>(
    'SELECT action FROM audit_logs WHERE org_id = $1 AND target_id = $2 ORDER BY created_at',
    [org.orgId, targetId],
  );
  return audits.map((a) => a.action);
}

test('ten concurrent DELETEs of one tool: one 204, nine 404, one tool.deleted entry', async () => {
  const org = await signUp(first, 'deltool');
  const created = await first.request('POST', `/api/v1/orgs/${org.orgId}/tools`, {
    token: org.adminToken,
    body: { action_type: 'billing', connector: 'mock', config: {} },
  });
  expect(created.status).toBe(201);
  const id = created.body.tool_id;
  expect(await deleteConcurrently(org, `/api/v1/orgs/${org.orgId}/tools/${id}`, id)).toEqual([
    'tool.created',
    'tool.deleted',
  ]);
});

test('ten concurrent DELETEs of one webhook: one 204, nine 404, one webhook.deleted entry', async () => {
  const org = await signUp(first, 'delhook');
  const created = await first.request('POST', `/api/v1/orgs/${org.orgId}/webhooks`, {
    token: org.adminToken,
    body: { url: 'https://hooks.example.com/agw', events: ['approval.requested'] },
  });
  expect(created.status).toBe(201);
  const id = created.body.webhook_id;
  expect(await deleteConcurrently(org, `/api/v1/orgs/${org.orgId}/webhooks/${id}`, id)).toEqual([
    'webhook.created',
    'webhook.deleted',
  ]);
});

test('ten concurrent DELETEs of one API key: one 204, nine 404, one api_key.deleted entry', async () => {
  const org = await signUp(first, 'delkey');
  const { keyId } = await createKey(first, org, ['logs:read']);
  expect(await deleteConcurrently(org, `/api/v1/orgs/${org.orgId}/api-keys/${keyId}`, keyId)).toEqual([
    'api_key.created',
    'api_key.deleted',
  ]);
});

test('PATCHes racing DELETEs of one tool and one webhook: each is 200, 204 or 404, exactly one 204, never a 500', async () => {
  const org = await signUp(first, 'delpatch');
  const tool = await first.request('POST', `/api/v1/orgs/${org.orgId}/tools`, {
    token: org.adminToken,
    body: { action_type: 'billing', connector: 'mock', config: {} },
  });
  const webhook = await first.request('POST', `/api/v1/orgs/${org.orgId}/webhooks`, {
    token: org.adminToken,
    body: { url: 'https://hooks.example.com/agw', events: ['approval.requested'] },
  });
  for (const [path, patch] of [
    [`/api/v1/orgs/${org.orgId}/tools/${tool.body.tool_id}`, { config: { response: { n: 1 } } }],
    [`/api/v1/orgs/${org.orgId}/webhooks/${webhook.body.webhook_id}`, { active: false }],
  ] as const) {
    const responses = await Promise.all(
      Array.from({ length: ATTEMPTS }, (_, i) =>
        (i % 2 ? second : first).request(i % 3 ? 'PATCH' : 'DELETE', path, {
          token: org.adminToken,
          body: i % 3 ? patch : undefined,
        }),
      ),
    );
    const statuses = responses.map((r) => r.status);
    expect(statuses.filter((s) => s === 204)).toHaveLength(1);
    expect(statuses.every((s) => [200, 204, 404].includes(s))).toBe(true);
  }
});
