import { readFileSync } from 'node:fs';
import { mkdtemp, rm, cp, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import wasm from '@prisma/prisma-schema-wasm';
import { migrate, readMigrations, MigrationError } from '../../src/db/migrate.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';

/**
 * The migrations are hand-written SQL (the schema engine cannot be downloaded everywhere we
 * build), so this proves that a database migrated by our runner is the one schema.prisma describes:
 * every model is a table, every scalar field a column of the right type and nullability, every
 * unique and primary key exists, and `_prisma_migrations` is what `prisma migrate deploy` expects.
 */

interface DmmfField {
  name: string;
  dbName?: string | null;
  kind: 'scalar' | 'enum' | 'object' | 'unsupported';
  type: string;
  isList: boolean;
  isRequired: boolean;
  isUnique: boolean;
  isId: boolean;
  nativeType: [string, string[]] | null;
  hasDefaultValue: boolean;
  isUpdatedAt: boolean;
  default?: { name?: string };
}
interface DmmfModel {
  name: string;
  dbName: string | null;
  fields: DmmfField[];
  primaryKey: { fields: string[] } | null;
  uniqueFields: string[][];
}

const schemaText = readFileSync(new URL('../../prisma/schema.prisma', import.meta.url), 'utf8');
const dmmf = JSON.parse(wasm.get_dmmf(JSON.stringify({ prismaSchema: schemaText }))).datamodel as {
  models: DmmfModel[];
  enums: { name: string; values: { name: string }[] }[];
};

function expectedSqlType(field: DmmfField): string {
  if (field.kind === 'enum') return `USER-DEFINED:${field.type}`;
  const native = field.nativeType?.[0];
  const base = (() => {
    switch (field.type) {
      case 'String':
        return native === 'Uuid' ? 'uuid' : 'text';
      case 'Int':
        return 'integer';
      case 'BigInt':
        return 'bigint';
      case 'Boolean':
        return 'boolean';
      case 'DateTime':
        return native === 'Timestamptz' ? 'timestamp with time zone' : 'timestamp without time zone';
      case 'Json':
        return 'jsonb';
      case 'Float':
        return 'double precision';
      case 'Bytes':
        return 'bytea';
      case 'Decimal':
        return 'numeric';
      default:
        throw new Error(`no mapping for ${field.type}`);
    }
  })();
  return field.isList ? `ARRAY:${base}` : base;
}

interface ColumnRow {
  table_name: string;
  column_name: string;
  data_type: string;
  udt_name: string;
  is_nullable: 'YES' | 'NO';
  column_default: string | null;
}

let t: TestDatabase;
beforeAll(async () => {
  t = await createTestDatabase({ migrate: false });
});
afterAll(() => t.close());

test('the runner migrates an empty database and records Prisma-compatible history', async () => {
  const applied = await migrate(t.db.sql);
  const migrations = await readMigrations();
  expect(applied).toEqual(migrations.map((m) => m.name));
  expect(applied.length).toBeGreaterThan(0);

  const rows = await t.db.sql.query<{
    migration_name: string;
    checksum: string;
    finished_at: Date | null;
    applied_steps_count: number;
  }>(
    'SELECT migration_name, checksum, finished_at, applied_steps_count FROM "_prisma_migrations" ORDER BY migration_name',
  );
  expect(rows.map((r) => [r.migration_name, r.checksum])).toEqual(migrations.map((m) => [m.name, m.checksum]));
  for (const row of rows) {
    expect(row.finished_at).not.toBeNull();
    expect(row.checksum).toMatch(/^[0-9a-f]{64}$/);
  }
  // A second run is a no-op, as `prisma migrate deploy` would be.
  expect(await migrate(t.db.sql)).toEqual([]);
});

test('every Prisma model is a table with every scalar field as a column of the right type and nullability', async () => {
  const columns = await t.db.sql.query<ColumnRow>(
    `SELECT table_name, column_name, data_type, udt_name, is_nullable, column_default
     FROM information_schema.columns WHERE table_schema = 'public'`,
  );
  const byTable = new Map<string, Map<string, ColumnRow>>();
  for (const c of columns) {
    if (!byTable.has(c.table_name)) byTable.set(c.table_name, new Map());
    byTable.get(c.table_name)!.set(c.column_name, c);
  }
  const problems: string[] = [];
  for (const model of dmmf.models) {
    const table = model.dbName ?? model.name;
    const actual = byTable.get(table);
    if (!actual) {
      problems.push(`table ${table} (model ${model.name}) is missing`);
      continue;
    }
    const expectedColumns = new Set<string>();
    for (const field of model.fields.filter((f) => f.kind === 'scalar' || f.kind === 'enum')) {
      const column = field.dbName ?? field.name;
      expectedColumns.add(column);
      const row = actual.get(column);
      if (!row) {
        problems.push(`${table}.${column} is missing`);
        continue;
      }
      const type =
        row.data_type === 'USER-DEFINED'
          ? `USER-DEFINED:${row.udt_name}`
          : row.data_type === 'ARRAY'
            ? `ARRAY:${{ _text: 'text', _int4: 'integer', _uuid: 'uuid' }[row.udt_name] ?? row.udt_name}`
            : row.data_type;
      if (type !== expectedSqlType(field))
        problems.push(`${table}.${column} is ${type}, expected ${expectedSqlType(field)}`);
      // Prisma creates list columns nullable; everything else follows `?`.
      const nullable = field.isList ? true : !field.isRequired;
      if ((row.is_nullable === 'YES') !== nullable) problems.push(`${table}.${column} nullable=${row.is_nullable}`);
      // uuid()/cuid() defaults are generated by the client, every other default by the database.
      const clientDefault = ['uuid', 'cuid', 'nanoid', 'ulid'].includes(field.default?.name ?? '');
      if (field.hasDefaultValue && !field.isUpdatedAt && !clientDefault && row.column_default === null) {
        problems.push(`${table}.${column} has no database default`);
      }
    }
    for (const column of actual.keys()) {
      if (!expectedColumns.has(column)) problems.push(`${table}.${column} exists but is not in schema.prisma`);
    }
  }
  expect(problems).toEqual([]);
});

test('enums, primary keys and unique constraints exist as declared', async () => {
  const enumRows = await t.db.sql.query<{ name: string; value: string }>(
    `SELECT t.typname AS name, e.enumlabel AS value FROM pg_type t JOIN pg_enum e ON e.enumtypid = t.oid
     ORDER BY t.typname, e.enumsortorder`,
  );
  for (const e of dmmf.enums) {
    expect(enumRows.filter((r) => r.name === e.name).map((r) => r.value)).toEqual(e.values.map((v) => v.name));
  }

  const indexRows = await t.db.sql.query<{ table: string; columns: string[]; unique: boolean; primary: boolean }>(
    `SELECT c.relname AS table, i.indisunique AS unique, i.indisprimary AS primary,
            array_agg(a.attname::text ORDER BY array_position(i.indkey, a.attnum))::text[] AS columns
     FROM pg_index i
     JOIN pg_class c ON c.oid = i.indrelid
     JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'public'
     JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = ANY(i.indkey)
     GROUP BY c.relname, i.indexrelid, i.indisunique, i.indisprimary`,
  );
  const has = (table: string, columns: string[], kind: 'primary' | 'unique') =>
    indexRows.some((r) => r.table === table && r[kind] && r.columns.join(',') === columns.join(','));
  for (const model of dmmf.models) {
    const table = model.dbName ?? model.name;
    const column = (name: string) => {
      const field = model.fields.find((f) => f.name === name)!;
      return field.dbName ?? field.name;
    };
    const primary = model.primaryKey?.fields ?? model.fields.filter((f) => f.isId).map((f) => f.name);
    expect({ table, primary: has(table, primary.map(column), 'primary') }).toEqual({ table, primary: true });
    for (const field of model.fields.filter((f) => f.isUnique)) {
      expect({ table, field: field.name, unique: has(table, [column(field.name)], 'unique') }).toEqual({
        table,
        field: field.name,
        unique: true,
      });
    }
    for (const fields of model.uniqueFields) {
      expect({ table, fields, unique: has(table, fields.map(column), 'unique') }).toEqual({
        table,
        fields,
        unique: true,
      });
    }
  }
});

test('a migration edited after it was applied is refused', async () => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'agw-migrations-'));
  try {
    await cp(new URL('../../prisma/migrations', import.meta.url), dir, { recursive: true });
    const [first] = await readMigrations(dir);
    await writeFile(path.join(dir, first.name, 'migration.sql'), `${first.sql}\n-- edited\n`);
    await expect(migrate(t.db.sql, dir)).rejects.toThrow(MigrationError);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
