/**
 * A write that names a row a concurrent request deleted meanwhile (a login whose user an admin
 * removed between the password check and the session insert) fails on the foreign key. That is a
 * race, not a bug: it is answered 409 CONFLICT, never 500, on both drivers (the raw driver and
 * Prisma's), on both databases.
 */
import { randomUUID } from 'node:crypto';
import { isDatabaseUnavailable, isMissingReference } from '../../src/db/unavailable.js';
import { toWireError } from '../../src/http/envelope.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';

let database: TestDatabase;
beforeAll(async () => {
  database = await createTestDatabase();
}, 60_000);
afterAll(() => database?.close(), 60_000);

const failure = (write: Promise<unknown>) =>
  write.then(
    () => {
      throw new Error('the write succeeded');
    },
    (error: unknown) => error,
  );

test('a session for a user that is gone: the raw driver’s foreign key violation is a 409', async () => {
  const error = await failure(
    database.db.sql.query(
      "INSERT INTO session_families (id, user_id, org_id, expires_at) VALUES ('sfm_x', $1::uuid, $2::uuid, now())",
      [randomUUID(), randomUUID()],
    ),
  );
  expect(isMissingReference(error)).toBe(true);
  expect(isDatabaseUnavailable(error)).toBe(false);
  expect(toWireError(error)).toMatchObject({ status: 409, code: 'CONFLICT' });
});

test('an API key of an org that is gone: Prisma’s foreign key violation is a 409', async () => {
  const error = await failure(
    database.db.prisma.apiKey.create({
      data: {
        id: `key_${randomUUID()}`,
        orgId: randomUUID(),
        name: 'orphan',
        keyHash: randomUUID(),
        keyPrefix: 'agw_orphan',
        scopes: [],
        expiresAt: new Date(Date.now() + 60_000),
      },
    }),
  );
  expect(isMissingReference(error)).toBe(true);
  expect(toWireError(error)).toMatchObject({ status: 409, code: 'CONFLICT' });
});

test('other failures are not taken for it', async () => {
  const division = await failure(database.db.sql.query('SELECT 1/0'));
  expect(isMissingReference(division)).toBe(false);
  expect(toWireError(division)).toMatchObject({ status: 500, code: 'INTERNAL_ERROR' });
});
