import { PGlite, TransactionAbortedError } from '@electric-sql/pglite';
import { preparedPGlite, type PreparedPGlite } from '../../src/db/pglite-statements.js';

/**
 * The prepared-statement path under the embedded database answers exactly as PGlite's own query
 * does (values of every kind both ways, errors, transactions), while parsing each statement once.
 * Runs on a real PGlite whatever DATABASE_URL says: this path exists only there.
 */

let pglite: PGlite;
let db: PreparedPGlite;

beforeAll(async () => {
  pglite = await PGlite.create('memory://');
  db = preparedPGlite(pglite);
  await db.exec(`
    CREATE TABLE things (id int PRIMARY KEY, name text, data jsonb, at timestamptz, tags text[], blob bytea, big bigint);
    INSERT INTO things VALUES (1, 'one', '{"a":[1,2]}', '2026-01-02T03:04:05.678Z', '{x,"y z"}', '\\x0102ff', 9007199254740993);
  `);
});

afterAll(async () => {
  await pglite.close();
});

const select = 'SELECT id, name, data, at, tags, blob, big FROM things WHERE id = $1';

test('a row reads as PGlite reads it, as objects and as arrays, with parsers of the caller', async () => {
  for (const options of [undefined, { rowMode: 'array' as const }, { parsers: { 20: (x: string) => `big:${x}` } }]) {
    const mine = await db.query(select, [1], options);
    const theirs = await pglite.query(select, [1], options);
    expect(mine).toEqual(theirs);
  }
  const { rows } = await db.query<Record<string, unknown>>(select, [1]);
  expect(rows[0]).toMatchObject({ data: { a: [1, 2] }, tags: ['x', 'y z'], at: new Date('2026-01-02T03:04:05.678Z') });
});

test('values of every kind are written as PGlite writes them, nulls included', async () => {
  const insert =
    'INSERT INTO things (id, name, data, at, tags, blob, big) VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id, data, at, tags, blob, big';
  const values = [2, null, { b: 'c' }, new Date('2026-05-06T07:08:09.010Z'), ['p', 'q r'], new Uint8Array([7, 8]), 12n];
  const { rows, affectedRows } = await db.query(insert, values);
  expect(affectedRows).toBe(1);
  expect(rows).toEqual((await pglite.query('SELECT id, data, at, tags, blob, big FROM things WHERE id = 2')).rows);
  expect(rows[0]).toMatchObject({ data: { b: 'c' }, tags: ['p', 'q r'], big: 12 });
});

test('a statement is prepared once, however often it runs; a failed one is not kept', async () => {
  const before = db.preparedCount;
  for (let i = 0; i < 5; i++) await db.query('SELECT $1::int + 1 AS n', [i]);
  expect(db.preparedCount).toBe(before + 1);
  await expect(db.query('SELECT nope FROM things')).rejects.toMatchObject({ code: '42703' });
  expect(db.preparedCount).toBe(before + 1);
  // The error leaves nothing behind: the next statement runs.
  expect((await db.query<{ n: number }>('SELECT $1::int + 1 AS n', [41])).rows).toEqual([{ n: 42 }]);
});

test('a constraint violation keeps its SQLSTATE, as callers tell conflicts from bugs by it', async () => {
  await expect(db.query('INSERT INTO things (id) VALUES ($1)', [1])).rejects.toMatchObject({ code: '23505' });
});

test('a transaction commits or rolls back, and statements outside it wait rather than joining it', async () => {
  let release!: () => void;
  const held = new Promise<void>((resolve) => {
    release = resolve;
  });
  const inside = db.transaction(async (tx) => {
    await tx.query('INSERT INTO things (id, name) VALUES ($1, $2)', [10, 'rolled back']);
    await held;
    throw new Error('changed my mind');
  });
  // Sent while the transaction is open: it must not become part of it (and roll back with it).
  const outside = db.query('INSERT INTO things (id, name) VALUES ($1, $2)', [11, 'kept']);
  release();
  await expect(inside).rejects.toThrow('changed my mind');
  await outside;
  const { rows } = await db.query<{ id: number }>('SELECT id FROM things WHERE id IN (10, 11) ORDER BY id');
  expect(rows).toEqual([{ id: 11 }]);

  await db.transaction(async (tx) => {
    await tx.query('INSERT INTO things (id) VALUES ($1)', [12]);
  });
  expect((await db.query('SELECT id FROM things WHERE id = $1', [12])).rows).toHaveLength(1);
});

test('a rollback asked for inside the transaction ends it; COMMIT of a failed one reports it aborted', async () => {
  await db.transaction(async (tx) => {
    await tx.query('INSERT INTO things (id) VALUES ($1)', [20]);
    await tx.rollback();
    expect(tx.closed).toBe(true);
    await expect(tx.query('SELECT 1')).rejects.toThrow('Transaction is closed');
  });
  expect((await db.query('SELECT id FROM things WHERE id = $1', [20])).rows).toHaveLength(0);

  await expect(
    db.transaction(async (tx) => {
      await tx.query('INSERT INTO things (id) VALUES ($1)', [21]);
      await tx.query('SELECT 1/0').catch(() => undefined);
    }),
  ).rejects.toBeInstanceOf(TransactionAbortedError);
  expect((await db.query('SELECT id FROM things WHERE id = $1', [21])).rows).toHaveLength(0);
});

test('a table that changes shape under a prepared statement is prepared again', async () => {
  await db.exec('CREATE TABLE shapes (id int PRIMARY KEY, a text)');
  await db.query('INSERT INTO shapes VALUES ($1, $2)', [1, 'x']);
  const star = 'SELECT * FROM shapes WHERE id = $1';
  expect((await db.query(star, [1])).rows).toEqual([{ id: 1, a: 'x' }]);
  await db.exec("ALTER TABLE shapes ADD COLUMN b text DEFAULT 'new'");
  expect((await db.query(star, [1])).rows).toEqual([{ id: 1, a: 'x', b: 'new' }]);
});

test('the statements kept are bounded; one dropped from the cache still runs', async () => {
  for (let i = 0; i < 520; i++) await db.query(`SELECT ${i} AS n WHERE $1::int = $1::int`, [i]);
  expect(db.preparedCount).toBe(500);
  expect((await db.query('SELECT 0 AS n WHERE $1::int = $1::int', [0])).rows).toEqual([{ n: 0 }]);
  const { rows } = await pglite.query<{ n: string }>('SELECT count(*)::text AS n FROM pg_prepared_statements');
  expect(Number(rows[0].n)).toBe(500);
});

test('a closed database says so, as the service tells an outage by it', async () => {
  const other = await PGlite.create('memory://');
  const closing = preparedPGlite(other);
  await closing.query('SELECT 1');
  await other.close();
  await expect(closing.query('SELECT 1')).rejects.toThrow(/PGlite is closed/);
});
