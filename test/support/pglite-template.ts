import { createHash, randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rename, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { openDatabase } from '../../src/db/database.js';
import { readMigrations } from '../../src/db/migrate.js';

/**
 * A migrated PGlite data directory, dumped once and loaded by every test database: creating a
 * PGlite database runs initdb (about 1.5 s on this machine's cores), loading a dump about 0.35 s,
 * and migrating it again finds nothing to do. The dump sits in the system's temporary directory
 * under a name that hashes the migrations and PGlite's version, so a changed migration or an
 * upgraded PGlite makes a new one; workers that miss it at once each make it and the last rename
 * wins (the dumps are equivalent).
 */

// The package's exports do not include its package.json: read it where npm put it.
const pglitePackage = new URL('../../node_modules/@electric-sql/pglite/package.json', import.meta.url);

async function templatePath(): Promise<string> {
  const migrations = await readMigrations();
  const { version } = JSON.parse(await readFile(pglitePackage, 'utf8')) as { version: string };
  const hash = createHash('sha256').update(version);
  for (const migration of migrations) hash.update(`${migration.name}\0${migration.checksum}\0`);
  return path.join(tmpdir(), `agent-gateway-pglite-template-${hash.digest('hex').slice(0, 16)}.tar`);
}

async function makeTemplate(file: string): Promise<Blob> {
  const db = await openDatabase({ dataDir: 'memory://', migrate: true });
  try {
    const dump = await db.dumpDataDir!();
    const partial = `${file}.${randomBytes(6).toString('hex')}`;
    await writeFile(partial, Buffer.from(await dump.arrayBuffer()));
    await rename(partial, file);
    return dump;
  } finally {
    await db.close();
  }
}

/** The migrated template's dump, made on first use. */
export async function migratedTemplate(): Promise<Blob> {
  const file = await templatePath();
  try {
    return new Blob([await readFile(file)]);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
    return makeTemplate(file);
  }
}

/**
 * A new DATA_DIR holding the migrated template, for a service process whose test is not about a
 * first start: the child then skips initdb and the migrations (about 5 s of CPU a start).
 */
export async function migratedDataDir(prefix: string): Promise<string> {
  const dataDir = await mkdtemp(path.join(tmpdir(), prefix));
  const db = await openDatabase({ dataDir, loadDataDir: await migratedTemplate(), migrate: false });
  await db.close();
  return dataDir;
}
