/**
 * The per-call statements that take their keys as arrays are planned once per connection, as a
 * prepared statement is meant to be (src/db/sql.ts, `plannedOnce`): PostgreSQL's own count of a
 * statement's plans (`pg_prepared_statements`) shows at most its five first custom plans, then the
 * generic one. Before, with fewer keys than PostgreSQL guesses for an array parameter, every call
 * was planned again: the bearer check spent four times as long planning as executing. And the
 * padding changes no answer: each key still gets its own row, in order.
 */
import { openDatabase, type Database } from '../../src/db/database.js';
import { accessTokenStates } from '../../src/modules/auth/session.store.js';
import { readCounts } from '../../src/modules/gateway/gateway.store.js';
import { backend, createTestDatabase, type TestDatabase } from '../support/database.js';

const onPostgres = backend === 'postgresql' ? test : test.skip;
const CALLS = 12;

let database: TestDatabase | undefined;
/** One connection: the prepared statements' plan counts are its session's. */
let single: Database | undefined;
beforeAll(async () => {
  if (backend !== 'postgresql') return;
  database = await createTestDatabase();
  single = await openDatabase({ databaseUrl: database.url!, migrate: false, poolSize: 1 });
}, 60_000);
afterAll(async () => {
  await single?.close();
  await database?.close();
}, 60_000);

async function plansOf(name: string) {
  const [row] = await single!.sql.query<{ generic_plans: string; custom_plans: string }>(
    'SELECT generic_plans::text, custom_plans::text FROM pg_prepared_statements WHERE name = $1',
    [name],
  );
  return { generic: Number(row.generic_plans), custom: Number(row.custom_plans) };
}

onPostgres('the bearer check and the counter read, with one to three keys a call, are planned once', async () => {
  const db = single!;
  const [user] = await db.sql.query<{ id: string; org_id: string }>(
    `WITH org AS (INSERT INTO organizations (id, name, slug, updated_at) VALUES (gen_random_uuid(), 'plans', 'plans', now()) RETURNING id)
     INSERT INTO users (id, org_id, email, password_hash, role)
     SELECT gen_random_uuid(), id, 'plans@example.com', 'x', 'admin' FROM org RETURNING id, org_id`,
  );
  await db.sql.query(
    `INSERT INTO session_families (id, user_id, org_id, expires_at, signed_in_with)
     VALUES ('sfm_plans', $1::uuid, $2::uuid, now() + interval '1 hour', 'password')`,
    [user.id, user.org_id],
  );
  await db.sql.query(
    `INSERT INTO rate_counters (bucket, window_start, count) VALUES ('plans', '2026-01-01T00:00:00Z', 7)`,
  );
  const window = { start: new Date('2026-01-01T00:00:00Z') };
  for (let call = 0; call < CALLS; call++) {
    const keys = 1 + (call % 3);
    const states = await accessTokenStates(
      db.sql,
      Array.from({ length: keys }, (_, i) => ({ userId: user.id, jti: `jti-${i}`, familyId: 'sfm_plans', counted: 0 })),
      window.start,
    );
    // One state per key, in order, whatever the padding.
    expect(states).toHaveLength(keys);
    for (const state of states) expect(state).toMatchObject({ org_id: user.org_id, token_revoked: false });
    const counts = await readCounts(
      db.sql,
      Array.from({ length: keys }, (_, i) => ({ bucket: i === 0 ? 'plans' : `other-${i}`, window })),
    );
    expect([...counts.values()]).toEqual([7]);
  }
  for (const name of ['access_token_states', 'read_counts']) {
    const plans = await plansOf(name);
    expect({ name, ...plans }).toEqual({ name, generic: CALLS - 5, custom: 5 });
  }
});
