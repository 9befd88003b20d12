import { startTestApp, type TestApp } from '../../support/app.js';
import { addUser, signUp } from '../../support/fixtures.js';
import { StatementCounter } from '../../support/statements.js';

const statements = new StatementCounter();
let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({}, { onQuery: statements.observe });
});
afterAll(() => t.close());

describe('GET /api/v1/orgs/{org_id}', () => {
  test('the organization and its first admin come from one statement (relations joined in the database)', async () => {
    const org = await signUp(t);
    // A later admin is not the first one.
    await addUser(t, org, 'admin');
    const { result: read, statements: sent } = await statements.count(() =>
      t.request('GET', `/api/v1/orgs/${org.orgId}`, { token: org.adminToken }),
    );
    expect(read.status).toBe(200);
    expect(read.body).toMatchObject({ org_id: org.orgId, admin_user: { email: org.adminEmail, role: 'admin' } });
    const orgStatements = sent.filter((sql) => /\borganizations\b/.test(sql));
    expect(orgStatements).toHaveLength(1);
    expect(sent.filter((sql) => /\busers\b/.test(sql) && !/\borganizations\b/.test(sql))).toEqual([]);
  });
});
