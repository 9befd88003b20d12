import type { SqlConnection } from '../db/sql.js';

/** The statements of the shared config version (config-cache.ts): its one row in `config_versions`. */

/** The version as text (a bigint), or undefined when the row is missing. */
export async function readConfigVersion(sql: SqlConnection): Promise<string | undefined> {
  const [row] = await sql.query<{ version: string }>(
    'SELECT version::text AS version FROM config_versions WHERE id = 1',
  );
  return row?.version;
}

/** Moves the version on in the writer's Prisma transaction. */
export async function incrementConfigVersion(tx: {
  $executeRaw: (q: TemplateStringsArray) => Promise<number>;
}): Promise<void> {
  await tx.$executeRaw`UPDATE config_versions SET version = version + 1 WHERE id = 1`;
}

/** Moves the version on in the writer's transaction on the raw driver. */
export async function incrementConfigVersionOn(tx: SqlConnection): Promise<void> {
  await tx.query('UPDATE config_versions SET version = version + 1 WHERE id = 1');
}
