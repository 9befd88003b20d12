/**
 * An org's records are stamped in seq order: an append never stamps a record before the one it
 * follows, even when that one came from a process whose clock runs ahead, so a `from`/`to` window
 * of the listings is one seq range (migration record_time_order). The stamp is signed like the
 * rest of the body, so the records verify as they always did.
 */
import { GENESIS_HASH } from '../../../src/modules/record/record-chain.js';
import { startTestApp, type TestApp } from '../../support/app.js';
import { signUp } from '../../support/fixtures.js';
import { execute, readyAgent } from '../../support/gateway.js';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

test("a record after one stamped by a clock an hour ahead takes that record's time, and verifies", async () => {
  const org = await signUp(t, 'time-order');
  const agent = await readyAgent(t, org);
  const ahead = new Date(Date.now() + 3_600_000);
  // The head as another process, whose clock is an hour ahead, would have left it (before any
  // record here, so that no process has this org's head in hand).
  await t.database.db.sql.query(
    `INSERT INTO record_chain_heads (org_id, seq, head_hash, last_created_at, updated_at)
     VALUES ($1::uuid, 0, $2, $3, now())`,
    [org.orgId, GENESIS_HASH, ahead],
  );
  for (let i = 0; i < 3; i++) expect((await execute(t, agent)).status).toBe(200);

  const listed = await t.request('GET', '/api/v1/records', { token: org.adminToken });
  const stamps = listed.body.items.map((r: { created_at: string }) => Date.parse(r.created_at));
  expect(stamps).toHaveLength(3);
  for (const stamp of stamps) expect(stamp).toBeGreaterThanOrEqual(ahead.getTime());
  // Newest first: never earlier than the one before it.
  expect([...stamps].sort((a, b) => b - a)).toEqual(stamps);
  for (const record of listed.body.items) {
    const verified = await t.request('GET', `/api/v1/records/${record.record_id}/verify`, { token: org.adminToken });
    expect(verified.body).toMatchObject({ valid: true, checks: { hash: true, signature: true, chain: true } });
  }
  const [head] = await t.database.db.sql.query<{ last_created_at: Date }>(
    'SELECT last_created_at FROM record_chain_heads WHERE org_id = $1::uuid',
    [org.orgId],
  );
  expect(new Date(head.last_created_at).getTime()).toBe(stamps[0]);

  // A window that starts at the future stamp holds all three.
  const window = await t.request('GET', `/api/v1/records?from=${ahead.toISOString()}`, { token: org.adminToken });
  expect(window.body.items.map((r: { record_id: string }) => r.record_id)).toEqual(
    listed.body.items.map((r: { record_id: string }) => r.record_id),
  );
});

test('records stamped by one clock keep its time', async () => {
  const org = await signUp(t, 'time-order-now');
  const agent = await readyAgent(t, org);
  const before = Date.now();
  expect((await execute(t, agent)).status).toBe(200);
  const after = Date.now();
  const listed = await t.request('GET', '/api/v1/records', { token: org.adminToken });
  const stamp = Date.parse(listed.body.items[0].created_at);
  expect(stamp).toBeGreaterThanOrEqual(before);
  expect(stamp).toBeLessThanOrEqual(after);
});
