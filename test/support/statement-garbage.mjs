// A process of its own for test/db/statement-deadline.test.ts: opens the pool as the service does
// (from jest's build of src/) and sends one statement after another, between two markers on stdout.
// The test runs it with --trace-gc-nvp, whose lines on the same stdout say what each young-generation
// collection promoted; only the lines between the markers count.
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const build = process.env.AGW_TEST_SERVICE_BUILD;
const { openDatabase } = await import(pathToFileURL(path.join(build, 'db', 'database.js')).href);
const db = await openDatabase({ databaseUrl: process.env.DATABASE_URL, migrate: false, timeoutMs: 30_000 });
const form = process.env.STATEMENT_FORM;
const statements = Number(process.env.STATEMENTS);

const send = (i) =>
  form === 'transaction'
    ? db.sql.transaction(async (tx) => tx.query('SELECT $1::int AS i', [i]))
    : db.sql.query('SELECT $1::int AS i', [i]);

// Warmed up first, so that what the optimizer and the pool keep for good is not counted.
for (let i = 0; i < 2000; i++) await send(i);
console.log('START');
for (let i = 0; i < statements; i++) await send(i);
console.log('END');
await db.close();
