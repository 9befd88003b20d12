import { PGlite, TransactionAbortedError } from '@electric-sql/pglite';
import { openDatabase } from '../../src/db/database.js';
import { type PGliteOnThread, startPGliteThread } from '../../src/db/pglite-worker.js';

/**
 * The embedded database as the service gets it: PGlite on a thread of its own, each statement
 * prepared once. It answers exactly as PGlite's own query does on this thread (values of every
 * kind both ways, errors, transactions) and leaves the event loop free while a statement runs.
 * Runs on a real PGlite whatever DATABASE_URL says: this path exists only there.
 */

let db: PGliteOnThread;
/** PGlite on this thread, as it answers without us: the reference. */
let reference: PGlite;

const schema = `
  CREATE TABLE things (id int PRIMARY KEY, name text, data jsonb, at timestamptz, tags text[], blob bytea, big bigint, amount numeric);
  INSERT INTO things VALUES (1, 'one', '{"a":[1,2]}', '2026-01-02T03:04:05.678Z', '{x,"y z"}', '\\x0102ff', 9007199254740993, 12.50);
`;

beforeAll(async () => {
  db = await startPGliteThread({ dataDir: 'memory://' });
  await db.exec(schema);
  reference = await PGlite.create('memory://');
  await reference.exec(schema);
});

afterAll(async () => {
  await db?.close();
  await reference?.close();
});

const prepared = async () =>
  Number((await db.query<{ n: string }>('SELECT count(*)::text AS n FROM pg_prepared_statements')).rows[0].n);

const select = 'SELECT id, name, data, at, tags, blob, big, amount FROM things WHERE id = $1';

test('a row reads as PGlite reads it, as objects and as arrays, with the parsers of the caller', async () => {
  const ownParsers = { 20: (x: string) => `big:${x}`, 1700: (x: string) => `numeric:${x}` };
  for (const options of [
    undefined,
    { rowMode: 'array' as const },
    { rowMode: 'array' as const, parsers: ownParsers },
  ]) {
    expect(await db.query(select, [1], options)).toEqual(await reference.query(select, [1], options));
  }
  const { rows } = await db.query<Record<string, unknown>>(select, [1], { parsers: ownParsers });
  expect(rows[0]).toMatchObject({
    data: { a: [1, 2] },
    tags: ['x', 'y z'],
    at: new Date('2026-01-02T03:04:05.678Z'),
    blob: new Uint8Array([1, 2, 255]),
    big: 'big:9007199254740993',
    amount: 'numeric:12.50',
  });
  // Values are made on this side of the thread: of this realm, as `instanceof` checks expect.
  expect(rows[0].at).toBeInstanceOf(Date);
  expect(rows[0].blob).toBeInstanceOf(Uint8Array);
  expect(rows[0].tags).toBeInstanceOf(Array);
});

test('values of every kind are written as PGlite writes them, nulls included', async () => {
  const insert =
    'INSERT INTO things (id, name, data, at, tags, blob, big) VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id, name, data, at, tags, blob, big';
  const values = [2, null, { b: 'c' }, new Date('2026-05-06T07:08:09.010Z'), ['p', 'q r'], new Uint8Array([7, 8]), 12n];
  const mine = await db.query(insert, values);
  expect(mine).toEqual(await reference.query(insert, values));
  expect(mine.affectedRows).toBe(1);
  expect(mine.rows[0]).toMatchObject({
    name: null,
    data: { b: 'c' },
    tags: ['p', 'q r'],
    blob: new Uint8Array([7, 8]),
  });
});

test('a statement is prepared once, however often it runs; a failed one is not kept', async () => {
  const before = await prepared();
  for (let i = 0; i < 5; i++) await db.query('SELECT $1::int + 1 AS n', [i]);
  // The count's own statement was prepared before it first counted, so it is in `before`.
  expect(await prepared()).toBe(before + 1);
  await expect(db.query('SELECT nope FROM things')).rejects.toMatchObject({ code: '42703' });
  expect(await prepared()).toBe(before + 1);
  // The error leaves nothing behind: the next statement runs.
  expect((await db.query<{ n: number }>('SELECT $1::int + 1 AS n', [41])).rows).toEqual([{ n: 42 }]);
});

test('a database error keeps its class and every field across the thread, as callers tell conflicts from bugs by them', async () => {
  const error = await db.query('INSERT INTO things (id) VALUES ($1)', [1]).catch((e: unknown) => e);
  const theirs = await reference.query('INSERT INTO things (id) VALUES ($1)', [1]).catch((e: unknown) => e);
  expect(error).toBeInstanceOf(Error);
  expect(error).toMatchObject({
    code: '23505',
    constraint: 'things_pkey',
    table: 'things',
    detail: (theirs as { detail: string }).detail,
    message: (theirs as Error).message,
  });
  expect((error as Error).constructor).toBe((theirs as Error).constructor);
});

/** A promise the test settles when it chooses (`open()`): a step held until then. */
function gate(): { promise: Promise<void>; open: () => void } {
  let open!: () => void;
  const promise = new Promise<void>((resolve) => {
    open = resolve;
  });
  return { promise, open };
}

test('a transaction commits or rolls back, and statements outside it wait rather than joining it', async () => {
  const held = gate();
  const insertedInside = gate();
  const inside = db.transaction(async (tx) => {
    await tx.query('INSERT INTO things (id, name) VALUES ($1, $2)', [10, 'rolled back']);
    insertedInside.open();
    await held.promise;
    throw new Error('changed my mind');
  });
  await insertedInside.promise;
  // Sent while the transaction is open: it must not become part of it (and roll back with it).
  const outside = db.query('INSERT INTO things (id, name) VALUES ($1, $2)', [11, 'kept']);
  held.open();
  await expect(inside).rejects.toThrow('changed my mind');
  await outside;
  const { rows } = await db.query<{ id: number }>('SELECT id FROM things WHERE id IN (10, 11) ORDER BY id');
  expect(rows).toEqual([{ id: 11 }]);

  await db.transaction(async (tx) => {
    await tx.query('INSERT INTO things (id) VALUES ($1)', [12]);
  });
  expect((await db.query('SELECT id FROM things WHERE id = $1', [12])).rows).toHaveLength(1);
});

test('statements and transactions that wait for an open transaction run in the order they were asked for', async () => {
  const held = gate();
  const opened = gate();
  const first = db.transaction(async (tx) => {
    await tx.query('INSERT INTO things (id, name) VALUES ($1, $2)', [13, 'first']);
    opened.open();
    await held.promise;
  });
  await opened.promise;
  // Each of these changes the row the one before wrote: any other order leaves another name.
  const waiting = [
    db.query("UPDATE things SET name = name || ', statement' WHERE id = $1", [13]),
    db.transaction((tx) => tx.query("UPDATE things SET name = name || ', transaction' WHERE id = $1", [13])),
    db.query("UPDATE things SET name = name || ', last' WHERE id = $1", [13]),
  ];
  held.open();
  await Promise.all([first, ...waiting]);
  const { rows } = await db.query<{ name: string }>('SELECT name FROM things WHERE id = $1', [13]);
  expect(rows).toEqual([{ name: 'first, statement, transaction, last' }]);
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
  expect(await prepared()).toBe(500);
  expect((await db.query('SELECT 0 AS n WHERE $1::int = $1::int', [0])).rows).toEqual([{ n: 0 }]);
});

test('the event loop keeps turning while a statement runs', async () => {
  let turns = 0;
  let counting = true;
  const count = () => {
    turns++;
    if (counting) setImmediate(count);
  };
  setImmediate(count);
  // PGlite on this thread runs a statement synchronously: not one turn would happen during it.
  await db.query('SELECT pg_sleep($1)', [0.3]);
  counting = false;
  expect(turns).toBeGreaterThan(10);
});

test('a dump of the data directory opens again with everything in it', async () => {
  const copy = await startPGliteThread({
    dataDir: 'memory://',
    loadDataDir: await (await db.dumpDataDir()).arrayBuffer(),
  });
  try {
    expect((await copy.query('SELECT name FROM things WHERE id = $1', [11])).rows).toEqual([{ name: 'kept' }]);
  } finally {
    await copy.close();
  }
});

test('an enum created after the thread started: its arrays are written and read once the array types are refreshed', async () => {
  await db.exec(`CREATE TYPE mood AS ENUM ('calm', 'busy')`);
  const both = 'SELECT $1::mood[] AS moods';
  // What PGlite does too: a type it has not read yet has no array serializer, so the array goes out as text.
  await expect(db.query(both, [['calm', 'busy']])).rejects.toThrow(/malformed array literal/);
  await db.refreshArrayTypes();
  expect((await db.query(both, [['calm', 'busy']])).rows).toEqual([{ moods: ['calm', 'busy'] }]);
  expect((await db.query(both, [['busy']])).rows).toEqual([{ moods: ['busy'] }]);
});

test('a fresh embedded database: the enums of its migrations work as arrays from the first statement', async () => {
  const fresh = await openDatabase({ dataDir: 'memory://' });
  try {
    const rows = await fresh.sql.query<{ statuses: string[] }>(`SELECT $1::"RecordStatus"[] AS statuses`, [
      ['approved', 'denied'],
    ]);
    expect(rows).toEqual([{ statuses: ['approved', 'denied'] }]);
  } finally {
    await fresh.close();
  }
});

test('a closed database says so, as the service tells an outage by it', async () => {
  const closing = await startPGliteThread({ dataDir: 'memory://' });
  await closing.query('SELECT 1');
  await closing.close();
  expect(closing.closed).toBe(true);
  await expect(closing.query('SELECT 1')).rejects.toThrow(/PGlite is closed/);
});

test('a thread that dies fails what was waiting for it and everything after as closed, never a hang', async () => {
  const dying = await startPGliteThread({ dataDir: 'memory://' });
  const failure = (error: unknown) => error as Error;
  const before = dying.query('SELECT pg_sleep($1) AS slept', [0.2]);
  const died = dying.kill();
  // Sent while the thread is still busy: waiting in its queue when it dies.
  const waiting = dying.query('SELECT 1 AS one').catch(failure);
  const inTransaction = dying.transaction(async (tx) => tx.query('SELECT 1 AS one')).catch(failure);
  await died;
  expect((await before).rows).toEqual([{ slept: '' }]);
  expect(await waiting).toEqual(expect.objectContaining({ message: 'PGlite is closed' }));
  expect(await inTransaction).toEqual(expect.objectContaining({ message: 'PGlite is closed' }));
  await expect(dying.query('SELECT 1')).rejects.toThrow(/PGlite is closed/);
  expect(dying.closed).toBe(true);
});
