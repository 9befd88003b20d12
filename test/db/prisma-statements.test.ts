/**
 * Prisma's statements are named, so PostgreSQL parses and plans each once per connection
 * (src/db/prisma-statements.ts): seen from the server session itself (`pg_prepared_statements`)
 * on a pool of one connection. Not inside Prisma's interactive transactions, not past the bound on
 * how many a process names, and not at all with DATABASE_POOL_MODE=transaction. (The
 * PgBouncer tests in database-faults.test.ts run them through a real pooler.)
 */
import { openDatabase, type Database } from '../../src/db/database.js';
import { backend, createTestDatabase, type TestDatabase } from '../support/database.js';

const onPostgres = backend === 'postgresql' ? test : test.skip;

let database: TestDatabase | undefined;
const opened: Database[] = [];
beforeAll(async () => {
  if (backend === 'postgresql') database = await createTestDatabase();
}, 60_000);
afterAll(async () => {
  for (const db of opened) await db.close();
  await database?.close();
}, 60_000);

/** The test database on one connection: its named statements are that session's. */
async function single(poolMode: 'session' | 'transaction' = 'session', warn?: (message: string) => void) {
  const db = await openDatabase({ databaseUrl: database!.url!, migrate: false, poolSize: 1, poolMode, warn });
  opened.push(db);
  return db;
}

async function prismaStatements(db: Database) {
  return db.sql.query<{ name: string; statement: string; generic_plans: string; custom_plans: string }>(
    `SELECT name, statement, generic_plans::text, custom_plans::text FROM pg_prepared_statements
     WHERE name LIKE 'prisma\\_%' ORDER BY name`,
  );
}

onPostgres('a Prisma read is prepared once and then planned once for every call', async () => {
  const db = await single();
  for (let i = 0; i < 8; i++) {
    await db.prisma.organization.findUnique({ where: { id: '00000000-0000-4000-8000-00000000000' + (i % 2) } });
  }
  const statements = await prismaStatements(db);
  const read = statements.find((row) => row.statement.includes('"organizations"'));
  expect(read).toBeDefined();
  // PostgreSQL's first five calls get plans for their values; the rest share one.
  expect({ generic: Number(read!.generic_plans), custom: Number(read!.custom_plans) }).toEqual({
    generic: 3,
    custom: 5,
  });
});

onPostgres("no statement of Prisma's interactive transaction is named, its BEGIN included", async () => {
  const db = await single();
  await db.prisma.$transaction(async (tx) => {
    await tx.user.findMany({ where: { email: 'in-a-transaction@example.com' } });
  });
  // Behind a pooler in transaction mode a named BEGIN failed a manifest's registration (42P05).
  expect(await prismaStatements(db)).toEqual([]);
  // The same read outside one is.
  await db.prisma.user.findMany({ where: { email: 'in-a-transaction@example.com' } });
  expect((await prismaStatements(db)).filter((row) => row.statement.includes('"users"'))).toHaveLength(1);
});

onPostgres('a process names at most 100 distinct statements; the rest run unnamed, and answer', async () => {
  const db = await single();
  for (let i = 0; i < 105; i++) {
    const [row] = await db.prisma.$queryRawUnsafe<{ n: number }[]>(`SELECT $1::int + ${i} AS n`, 0);
    expect(row.n).toBe(i);
  }
  expect((await prismaStatements(db)).length).toBe(100);
});

onPostgres('with DATABASE_POOL_MODE=transaction nothing is named', async () => {
  const db = await single('transaction');
  await db.prisma.organization.findMany({ take: 1 });
  expect(await prismaStatements(db)).toEqual([]);
});

onPostgres(
  'a named statement the server lost (as a pooler in transaction mode loses them) is sent again unnamed, and naming stops, told once',
  async () => {
    const warnings: string[] = [];
    const db = await single('session', (message) => warnings.push(message));
    const read = () => db.prisma.organization.findMany({ where: { slug: 'lost' } });
    await read();
    const [named] = await prismaStatements(db);
    // What a pooler does: the next statement reaches a server session that never prepared it.
    await db.sql.query(`DEALLOCATE ${named.name}`);
    await expect(read()).resolves.toEqual([]);
    await expect(read()).resolves.toEqual([]);
    expect(warnings).toEqual([expect.stringContaining('DATABASE_POOL_MODE=transaction')]);
    expect(await prismaStatements(db)).toEqual([]);
  },
);
