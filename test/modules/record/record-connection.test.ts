/**
 * Records name the OAuth connection of their call, never a token: `connection {connection_id,
 * user_id}` is signed into the body of a record whose call went through a connection, shown by
 * the API, carried by the export and checked offline; a record without one has no `connection`
 * key and hashes as it always did. Appended through the record service itself: the gateway does
 * not report the connection of a call yet.
 */
import { createInterface } from 'node:readline';
import { Readable } from 'node:stream';
import { canonicalHash } from '../../../src/lib/canonical-json.js';
import { verifyExport } from '../../../src/modules/record/record-export.js';
import type { NewRecord, RecordConnection } from '../../../src/modules/record/record.service.js';
import { startTestApp, type TestApp } from '../../support/app.js';
import { signUp, type OrgFixture } from '../../support/fixtures.js';

let t: TestApp;
let org: OrgFixture;
beforeAll(async () => {
  t = await startTestApp();
  org = await signUp(t, 'connections');
});
afterAll(() => t.close());

const newRecord = (orgId: string, connection: RecordConnection | null): NewRecord => ({
  orgId,
  svcId: 'agent-a',
  agentId: 'agent-a',
  actionType: 'mail',
  tool: 'send',
  capability: 'mail:send',
  paramsHash: canonicalHash({ to: 'someone@example.com' }),
  params: { to: 'someone@example.com' },
  decision: 'allow',
  executed: true,
  reasons: [],
  resultHash: canonicalHash({ ok: true }),
  approvalId: null,
  policies: [],
  labels: [],
  originalResultHash: null,
  redactions: [],
  confirmation: null,
  channel: 'mcp',
  connection,
});

const TOKEN = 'upstream-access-token-that-must-never-be-recorded';

/** Four records of one org: through the org's connection, a user's, none, and a connection object carrying a token. */
async function appendFour(target: OrgFixture) {
  const { records } = t.app.services;
  const orgConnection = { connectionId: 'conn_org_1', userId: null };
  const userConnection = { connectionId: 'conn_user_1', userId: target.adminUserId };
  // What a careless caller could hand over: the access it got from the connections service.
  const withToken = { connectionId: 'conn_user_2', userId: target.adminUserId, token: TOKEN } as RecordConnection;
  const ids = ['org', 'user', 'none', 'token'].map((kind) => `int_conn_${kind}_${target.orgId.slice(0, 8)}`);
  await records.append(ids[0], newRecord(target.orgId, orgConnection), true);
  await records.append(ids[1], newRecord(target.orgId, userConnection), true);
  await records.append(ids[2], newRecord(target.orgId, null), true);
  await records.append(ids[3], newRecord(target.orgId, withToken), true);
  return {
    ids,
    expected: [
      { connection_id: 'conn_org_1', user_id: null },
      { connection_id: 'conn_user_1', user_id: target.adminUserId },
      null,
      { connection_id: 'conn_user_2', user_id: target.adminUserId },
    ],
  };
}

test('the API shows the signed connection (null without one), every record verifies, and no token is kept', async () => {
  const { ids, expected } = await appendFour(org);
  for (const [i, id] of ids.entries()) {
    // REST, checked against the committed OpenAPI document like every test response.
    const read = await t.request('GET', `/api/v1/records/${id}`, { token: org.adminToken });
    expect(read.status).toBe(200);
    expect(read.body.connection).toEqual(expected[i]);
    expect(read.text).not.toContain(TOKEN);
    const verified = await t.request('GET', `/api/v1/records/${id}/verify`, { token: org.adminToken });
    expect(verified.body).toEqual({ record_id: id, valid: true, checks: { hash: true, signature: true, chain: true } });
  }
  const graphql = await t.graphql(
    'query ($id: ID!) { record(record_id: $id) { connection { connection_id user_id } } }',
    { id: ids[1] },
    { token: org.adminToken },
  );
  expect(graphql.body).toEqual({ data: { record: { connection: expected[1] } } });
  // What the database holds is the record's two fields, nothing the caller's object added.
  const stored = await t.database.db.sql.query<{ id: string; connection: unknown }>(
    'SELECT id, connection FROM interaction_records WHERE id = ANY($1) ORDER BY seq',
    [ids],
  );
  expect(stored.map((row) => row.connection)).toEqual(expected);
});

test('the export carries the connection in the body it signs; the verifier counts them; editing the stored one breaks the hash', async () => {
  const other = await signUp(t, 'connections-export');
  const { ids, expected } = await appendFour(other);
  const exported = await t.request('GET', '/api/v1/records/export', { token: other.adminToken });
  expect(exported.status).toBe(200);
  expect(exported.text).not.toContain(TOKEN);
  const lines = exported.text.trim().split('\n');
  const bodies = lines.slice(1).map((line) => JSON.parse(line).body);
  expect(bodies.map((body) => body.record_id)).toEqual(ids);
  expect(bodies.map((body) => body.connection ?? null)).toEqual(expected);
  // Absent, not null: a record without a connection hashes as records always did.
  expect(bodies[2]).not.toHaveProperty('connection');
  const verified = await verifyExport(createInterface({ input: Readable.from(lines.join('\n')) }));
  expect(verified).toMatchObject({ ok: true, count: 4, connections: 3, channels: { mcp: 4 } });

  await t.database.db.sql.query(
    `UPDATE interaction_records SET connection = jsonb_set(connection, '{user_id}', 'null') WHERE id = $1`,
    [ids[1]],
  );
  const broken = await t.request('GET', `/api/v1/records/${ids[1]}/verify`, { token: other.adminToken });
  expect(broken.body).toMatchObject({ valid: false, checks: { hash: false, signature: true } });
  await t.database.db.sql.query(`UPDATE interaction_records SET connection = NULL WHERE id = $1`, [ids[0]]);
  const removed = await t.request('GET', `/api/v1/records/${ids[0]}/verify`, { token: other.adminToken });
  expect(removed.body).toMatchObject({ valid: false, checks: { hash: false } });
});
