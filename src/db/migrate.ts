import { createHash, randomUUID } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { SqlDriver } from './sql.js';

/**
 * Applies prisma/migrations/<name>/migration.sql in order and records each in Prisma's own
 * `_prisma_migrations` table with Prisma's checksum (SHA-256 of the file), so that
 * `prisma migrate deploy` on a connected machine sees the same history and does nothing.
 */

export const defaultMigrationsDir = fileURLToPath(new URL('../../prisma/migrations', import.meta.url));

// Prisma's advisory lock key, so that the runner and `prisma migrate` exclude each other too.
const MIGRATION_LOCK_KEY = 72707369;

const CREATE_MIGRATIONS_TABLE = `
CREATE TABLE IF NOT EXISTS "_prisma_migrations" (
    "id"                    VARCHAR(36) PRIMARY KEY NOT NULL,
    "checksum"              VARCHAR(64) NOT NULL,
    "finished_at"           TIMESTAMPTZ,
    "migration_name"        VARCHAR(255) NOT NULL,
    "logs"                  TEXT,
    "rolled_back_at"        TIMESTAMPTZ,
    "started_at"            TIMESTAMPTZ NOT NULL DEFAULT now(),
    "applied_steps_count"   INTEGER NOT NULL DEFAULT 0
)`;

export interface Migration {
  name: string;
  sql: string;
  checksum: string;
}

export class MigrationError extends Error {}

export async function readMigrations(dir = defaultMigrationsDir): Promise<Migration[]> {
  const entries = await readdir(dir, { withFileTypes: true });
  const names = entries
    .filter((e) => e.isDirectory())
    .map((e) => e.name)
    .sort();
  return Promise.all(
    names.map(async (name) => {
      const sql = await readFile(path.join(dir, name, 'migration.sql'), 'utf8');
      return { name, sql, checksum: createHash('sha256').update(sql).digest('hex') };
    }),
  );
}

interface AppliedRow {
  migration_name: string;
  checksum: string;
  finished_at: Date | null;
  rolled_back_at: Date | null;
}

/**
 * Returns the names of the migrations it applied (empty when the database was up to date). All of
 * them are applied in one transaction that holds the migration lock (a transaction-level advisory
 * lock, so that it also works behind a pooler in transaction mode): a failed one leaves the
 * database as it was, and two processes starting at once apply each migration once.
 */
export async function migrate(driver: SqlDriver, dir = defaultMigrationsDir): Promise<string[]> {
  const migrations = await readMigrations(dir);
  return driver.transaction(async (tx) => {
    await tx.query('SELECT pg_advisory_xact_lock($1)', [MIGRATION_LOCK_KEY]);
    await tx.exec(CREATE_MIGRATIONS_TABLE);
    const rows = await tx.query<AppliedRow>(
      'SELECT migration_name, checksum, finished_at, rolled_back_at FROM "_prisma_migrations"',
    );
    const applied = new Map(rows.filter((r) => r.rolled_back_at === null).map((r) => [r.migration_name, r]));
    for (const row of applied.values()) {
      if (row.finished_at === null) {
        throw new MigrationError(
          `migration ${row.migration_name} started but did not finish; resolve it before starting`,
        );
      }
    }
    const done: string[] = [];
    for (const migration of migrations) {
      const previous = applied.get(migration.name);
      if (previous) {
        if (previous.checksum !== migration.checksum) {
          throw new MigrationError(`migration ${migration.name} was changed after it was applied`);
        }
        continue;
      }
      try {
        await tx.exec(migration.sql);
      } catch (error) {
        throw new MigrationError(`migration ${migration.name} failed: ${(error as Error).message}`);
      }
      await tx.query(
        `INSERT INTO "_prisma_migrations" (id, checksum, migration_name, started_at, finished_at, applied_steps_count)
         VALUES ($1, $2, $3, now(), now(), 1)`,
        [randomUUID(), migration.checksum, migration.name],
      );
      done.push(migration.name);
    }
    return done;
  });
}
