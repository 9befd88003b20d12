import { startTestApp, type TestApp } from '../../support/app.js';
import { signUp, type OrgFixture } from '../../support/fixtures.js';
import { HISTORY_ACTORS, seedHistory } from '../../support/history.js';
import { MerkleFrontier, recordLeafHash, verifyInclusion } from '../../../src/modules/record/merkle.js';
import { seqWindow } from '../../../src/modules/record/record.store.js';
import { planOf, statementOf } from '../../support/plans.js';
import { StatementCounter } from '../../support/statements.js';

// Listings of a history longer than the exact-total bound (10,000): totals bounded and flagged,
// cursors that walk a listing exactly as limit/offset does, and refusals of cursors that are not.
const SIZE = 10_050;
const statements = new StatementCounter();
let t: TestApp;
let big: OrgFixture;
let other: OrgFixture;

beforeAll(async () => {
  t = await startTestApp({}, { onQuery: statements.observe });
  big = await signUp(t, 'history');
  other = await signUp(t, 'history-other');
  await seedHistory((text, values) => t.database.db.sql.query(text, values), big.orgId, SIZE);
  await seedHistory((text, values) => t.database.db.sql.query(text, values), other.orgId, 30);
  // As autovacuum would leave it: the planner knows the history's size.
  await t.database.db.sql.exec('ANALYZE interaction_records');
}, 120_000);
afterAll(() => t.close());

const get = (path: string, org = big) => t.request('GET', path, { token: org.adminToken });
const audit = (org = big) => `/api/v1/orgs/${org.orgId}/audit-logs`;
const join = (path: string, query: string) => `${path}${path.includes('?') ? '&' : '?'}${query}`;
const idOf = (item: { record_id?: string; audit_id?: string }) => item.record_id ?? item.audit_id;

/** Every item of a listing, following next_cursor page by page. */
async function byCursor(path: string, limit: number, org = big): Promise<string[]> {
  const ids: string[] = [];
  let cursor: string | null = null;
  for (let pages = 0; pages < 200; pages++) {
    const response = await get(
      join(path, `limit=${limit}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`),
      org,
    );
    expect(response.status).toBe(200);
    ids.push(...response.body.items.map(idOf));
    cursor = response.body.next_cursor;
    if (cursor === null) {
      expect(response.body.items.length).toBeLessThanOrEqual(limit);
      return ids;
    }
    expect(response.body.items).toHaveLength(limit);
  }
  throw new Error('the cursor never ended');
}

/** Every item of a listing by limit and offset. */
async function byOffset(path: string, org = big): Promise<string[]> {
  const ids: string[] = [];
  for (let offset = 0; ; offset += 1000) {
    const response = await get(join(path, `limit=1000&offset=${offset}`), org);
    expect(response.status).toBe(200);
    ids.push(...response.body.items.map(idOf));
    if (response.body.items.length < 1000) return ids;
  }
}

describe('totals', () => {
  test('the unfiltered records total is exact at any size: the chain head counts them', async () => {
    const page = await get('/api/v1/records?limit=1');
    expect(page.body).toMatchObject({ total: SIZE, total_exact: true });
  });

  test.each([
    ['records, beyond the bound', '/api/v1/records?from=2000-01-01T00:00:00Z', 10_000, false],
    ['records, within it', '/api/v1/records?status=denied', SIZE / 10, true],
    ['audit, beyond the bound', '', 10_000, false],
    ['audit, within it', '?action=policy.updated', SIZE / 10, true],
  ])('%s', async (_, path, total, exact) => {
    const response = await get(path.startsWith('/') ? path : `${audit()}${path}`);
    expect(response.status).toBe(200);
    expect(response.body).toMatchObject({ total, total_exact: exact });
  });

  test('the audit total of an org with more than 10,000 entries of its own says so', async () => {
    // The sign-up's own entries and the seeded ones: more than the bound.
    const response = await get(`${audit()}?limit=1`);
    expect(response.body).toMatchObject({ total: 10_000, total_exact: false });
    expect(response.body.next_cursor).toEqual(expect.any(String));
  });
});

describe('cursors', () => {
  test.each([
    ['records', '/api/v1/records?status=denied', 97],
    ['records by agent', '/api/v1/records?agent_id=agent-7', 100],
    ['records by action type', '/api/v1/records?action=email', 400],
    ['records in a window', '', 50],
    ['audit by actor, id or label', `?actor=user-3`, 450],
    ['audit by actor label in another case', '?actor=USER3%40HISTORY.EXAMPLE', 450],
    ['audit by action family', '?action=api_key', 333],
    ['audit by target', '?target_type=manifest&target_id=m-42', 3],
  ])('%s: pages by cursor are the pages by offset, without a gap or a repeat', async (name, query, limit) => {
    let path = query.startsWith('/') ? query : `${audit()}${query}`;
    if (name === 'records in a window') {
      const newest = await get('/api/v1/records?limit=1');
      const to = new Date(Date.parse(newest.body.items[0].created_at) - 600_000);
      const from = new Date(to.getTime() - 3_600_000);
      path = `/api/v1/records?from=${from.toISOString()}&to=${to.toISOString()}`;
    }
    const expected = await byOffset(path);
    expect(expected.length).toBeGreaterThan(limit);
    const walked = await byCursor(path, limit);
    expect(walked).toEqual(expected);
    expect(new Set(walked).size).toBe(walked.length);
  });

  test('an actor id and a label in another case match the same entries', async () => {
    const byId = await byOffset(`${audit()}?actor=user-3`);
    const byLabel = await byOffset(`${audit()}?actor=${encodeURIComponent('user3@history.example')}`);
    expect(byId.length).toBe(SIZE / HISTORY_ACTORS);
    expect(byLabel).toEqual(byId);
  });

  test('the last page has no next_cursor, also when it is full', async () => {
    const all = await get(`${audit(other)}?limit=1000`, other);
    const count = all.body.items.length;
    const exact = await get(`${audit(other)}?limit=${count}`, other);
    expect(exact.body.next_cursor).toBeNull();
    const short = await get(`${audit(other)}?limit=${count - 1}`, other);
    expect(short.body.next_cursor).toEqual(expect.any(String));
  });

  test("a cursor reads the caller's org only: another org's cursor is a position, not a key to its entries", async () => {
    const first = await get('/api/v1/records?limit=5');
    const elsewhere = await get(`/api/v1/records?cursor=${encodeURIComponent(first.body.next_cursor)}`, other);
    expect(elsewhere.status).toBe(200);
    expect(elsewhere.body.items.length).toBeGreaterThan(0);
    for (const item of elsewhere.body.items) expect(item.org_id).toBe(other.orgId);
  });

  test('GraphQL pages the same way', async () => {
    const query = `query ($cursor: String) { records(limit: 3, cursor: $cursor, status: denied) {
      items { record_id seq } total total_exact next_cursor } }`;
    const first = await t.graphql(query, {}, { token: big.adminToken });
    expect(first.body.data.records).toMatchObject({ total: SIZE / 10, total_exact: true });
    const second = await t.graphql(query, { cursor: first.body.data.records.next_cursor }, { token: big.adminToken });
    const seqs = [...first.body.data.records.items, ...second.body.data.records.items].map(
      (r: { seq: number }) => r.seq,
    );
    expect(seqs).toEqual([SIZE, SIZE - 10, SIZE - 20, SIZE - 30, SIZE - 40, SIZE - 50]);
  });
});

describe('windows by time', () => {
  /** The seeded records' times: seq i was created at newest - (SIZE - i) s. */
  let newest: number;
  const at = (seq: number) => new Date(newest - (SIZE - seq) * 1000);
  beforeAll(async () => {
    newest = Date.parse((await get('/api/v1/records?limit=1')).body.items[0].created_at);
  });

  /** The ids of the records in [from, to) that also match `where`, newest first, read from the table. */
  async function recordsIn(from: Date | null, to: Date | null, where = 'true') {
    const rows = await t.database.db.sql.query<{ id: string }>(
      `SELECT id FROM interaction_records WHERE org_id = $1::uuid AND ($2::timestamptz IS NULL OR created_at >= $2)
         AND ($3::timestamptz IS NULL OR created_at < $3) AND ${where} ORDER BY seq DESC`,
      [big.orgId, from, to],
    );
    return rows.map((row) => row.id);
  }

  const window = (from: Date | null, to: Date | null) =>
    [from && `from=${from.toISOString()}`, to && `to=${to.toISOString()}`].filter(Boolean).join('&');

  test.each([
    ['an old hour', () => [at(2000), at(5600)], undefined, undefined],
    ['from alone', () => [at(9000), null], undefined, undefined],
    ['to alone', () => [null, at(1500)], undefined, undefined],
    ['edges on records: from includes its record, to excludes its record', () => [at(4000), at(4100)], '', undefined],
    [
      'half a second past a record to half a second past another',
      () => [new Date(at(10).getTime() + 500), new Date(at(20).getTime() + 500)],
      '',
      undefined,
    ],
    ['with an agent', () => [at(100), at(9900)], 'agent_id=agent-7', "agent_id = 'agent-7'"],
    [
      'with an action and a status',
      () => [at(100), at(9900)],
      'action=billing&status=denied',
      "action_type = 'billing' AND status = 'denied'",
    ],
  ] as const)('%s: exactly the records of the window, newest first', async (_, bounds, query, where) => {
    const [from, to] = bounds();
    const expected = await recordsIn(from, to, where);
    expect(expected.length).toBeGreaterThan(0);
    const path = `/api/v1/records?${[window(from, to), query].filter(Boolean).join('&')}`;
    expect(await byOffset(path)).toEqual(expected);
    const first = await get(join(path, 'limit=5'));
    expect(first.body).toMatchObject({
      total: Math.min(expected.length, 10_000),
      total_exact: expected.length <= 10_000,
    });
  });

  test.each([
    ['before the history', () => [new Date('2000-01-01T00:00:00Z'), new Date('2000-01-02T00:00:00Z')]],
    ['after it', () => [new Date(newest + 1), new Date(newest + 3_600_000)]],
    ['between two records', () => [new Date(at(30).getTime() + 100), new Date(at(30).getTime() + 900)]],
    ['of one instant', () => [at(40), at(40)]],
  ] as const)('a window with no record (%s) is an empty page, not an error', async (_, bounds) => {
    const [from, to] = bounds();
    expect(await recordsIn(from, to)).toEqual([]);
    const response = await get(`/api/v1/records?${window(from, to)}`);
    expect(response.status).toBe(200);
    expect(response.body).toMatchObject({ items: [], total: 0, total_exact: true, next_cursor: null });
  });

  test('the window is found in one statement of two steps into the time index', async () => {
    const plan = await planOf(
      t.database.db.sql,
      await statementOf((conn) => seqWindow(conn as never, big.orgId, at(10), at(20))),
    );
    expect(plan.match(/Index (Only )?Scan( Backward)? using interaction_records_org_id_created_at_idx/g)).toHaveLength(
      2,
    );
    expect(plan.match(/Limit/g)).toHaveLength(2);
  });

  test('its page is read by an index that ends in seq, newest first, without sorting the window; its count by seq too', async () => {
    const path = `/api/v1/records?${window(at(2000), at(5600))}&limit=20`;
    const { sent } = await statements.count(() => get(path));
    const reads = sent.filter(
      (s) => /FROM "public"."interaction_records"/.test(s.text) && /ORDER BY .*"seq" DESC/.test(s.text),
    );
    expect(reads).toHaveLength(2);
    const [page, count] = await Promise.all(
      [reads.find((s) => !/COUNT/i.test(s.text))!, reads.find((s) => /COUNT/i.test(s.text))!].map((read) =>
        planOf(t.database.db.sql, read),
      ),
    );
    expect(page).toMatch(/Index (Only )?Scan Backward using interaction_records_org_id_seq_key/);
    expect(page).toMatch(/Index Cond: .*seq >= /);
    expect(page).not.toMatch(/Sort/);
    // The count reads the window's rows up to the bound whichever way; by their seq range, not by time.
    expect(count).toMatch(/Index Cond: .*seq >= .*seq <= /);
    expect(count).not.toMatch(/created_at/);
  });
});

describe('refused cursors', () => {
  const recordsCursor = async () => (await get('/api/v1/records?limit=1')).body.next_cursor as string;
  const auditCursor = async () => (await get(`${audit()}?limit=1`)).body.next_cursor as string;

  test.each([
    ['garbage', async () => 'not-a-cursor', '/api/v1/records', 'cursor'],
    ['an audit cursor on records', auditCursor, '/api/v1/records', 'cursor'],
    ['a records cursor on the audit log', recordsCursor, 'audit', 'cursor'],
    ['a forged seq', async () => Buffer.from('["records","-1"]').toString('base64url'), '/api/v1/records', 'cursor'],
    [
      'a seq beyond bigint',
      async () => Buffer.from('["records","9999999999999999999"]').toString('base64url'),
      '/api/v1/records',
      'cursor',
    ],
    [
      'a time the database cannot store',
      async () => Buffer.from('["audit","-271821-04-20T00:00:00.000Z","aud_x"]').toString('base64url'),
      'audit',
      'cursor',
    ],
    [
      'a forged time',
      async () => Buffer.from('["audit","yesterday","aud_x"]').toString('base64url'),
      'audit',
      'cursor',
    ],
  ])('%s → 422', async (_, cursorOf, path, field) => {
    const url = `${path === 'audit' ? audit() : path}?cursor=${encodeURIComponent(await cursorOf())}`;
    const response = await get(url);
    expect(response.status).toBe(422);
    expect(response.body.error.code).toBe('VALIDATION_ERROR');
    expect(response.body.error.details.errors.map((e: { field: string }) => e.field)).toEqual([field]);
  });

  test('a cursor with an offset → 422 naming offset', async () => {
    const response = await get(`/api/v1/records?offset=5&cursor=${encodeURIComponent(await recordsCursor())}`);
    expect(response.status).toBe(422);
    expect(response.body.error.details.errors.map((e: { field: string }) => e.field)).toEqual(['offset']);
  });
});

describe('the seeded history has the tree appends would have built', () => {
  test('its checkpoint root is the root of its record hashes, and a proof of a middle record verifies', async () => {
    const rows = await t.database.db.sql.query<{ record_hash: string }>(
      'SELECT record_hash FROM interaction_records WHERE org_id = $1 ORDER BY seq',
      [big.orgId],
    );
    const tree = MerkleFrontier.empty();
    for (const row of rows) tree.append(recordLeafHash(row.record_hash));
    const note = await get('/api/v1/records/checkpoint');
    expect(note.status).toBe(200);
    expect(note.text.split('\n').slice(1, 3)).toEqual([String(SIZE), tree.root().toString('base64')]);
    const middle = (await get(`/api/v1/records?offset=${SIZE / 2}&limit=1`)).body.items[0];
    const proof = (await get(`/api/v1/records/${middle.record_id}/proof`)).body;
    const verified = verifyInclusion(
      BigInt(middle.seq - 1),
      BigInt(SIZE),
      recordLeafHash(middle.record_hash),
      proof.hashes.map((h: string) => Buffer.from(h, 'base64')),
      tree.root(),
    );
    expect(verified).toBe(true);
  });
});
