// A process of its own for test/young-garbage.test.ts: opens the database as the service does (from
// jest's build of src/), PostgreSQL's pool with DATABASE_URL and else the embedded database, and
// sends one statement after another, between two markers on stdout. The test runs it with
// --trace-gc-nvp, whose lines on the same stdout say what each young-generation collection
// promoted; only the lines between the markers count.
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const build = process.env.AGW_TEST_SERVICE_BUILD;
const { openDatabase } = await import(pathToFileURL(path.join(build, 'db', 'database.js')).href);
const db = await openDatabase(
  process.env.DATABASE_URL
    ? { databaseUrl: process.env.DATABASE_URL, migrate: false, timeoutMs: 30_000 }
    : { dataDir: 'memory://', migrate: false },
);
const form = process.env.STATEMENT_FORM;
const statements = Number(process.env.STATEMENTS);

/** A page of an export: 100 rows of about 1 KB. */
const page = "SELECT $1::int + n AS i, repeat('x', 1000) AS text FROM generate_series(1, 100) AS n";

const send = (i) => {
  if (form === 'transaction') return db.sql.transaction(async (tx) => tx.query('SELECT $1::int AS i', [i]));
  return db.sql.query(form === 'page' ? page : 'SELECT $1::int AS i', [i]);
};

// Warmed up first, so that what the optimizer and the pool keep for good is not counted.
for (let i = 0; i < 2000; i++) await send(i);
console.log('START');
for (let i = 0; i < statements; i++) await send(i);
console.log('END');
await db.close();
