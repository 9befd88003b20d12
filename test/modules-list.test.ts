/**
 * Every module that says what it contributes (its `*.module.ts`) is in the list the edge registers
 * from (src/modules/modules.ts), under its folder's name: a module left out would lose its
 * operations, loaders and jobs without a word (docs/decisions/0066-operations-declared-once.md).
 */
import { readdir } from 'node:fs/promises';
import { modules } from '../src/modules/modules.js';
import { restRoutes, schema } from '../src/http/schema.js';

const modulesDir = new URL('../src/modules/', import.meta.url);

test("every module's *.module.ts is listed once, under its folder's name", async () => {
  const declared: Array<{ folder: string; exported: unknown[] }> = [];
  for (const folder of await readdir(modulesDir, { withFileTypes: true })) {
    if (!folder.isDirectory()) continue;
    const file = (await readdir(new URL(`${folder.name}/`, modulesDir))).find((f) => f.endsWith('.module.ts'));
    if (!file) continue;
    const exported = Object.values(await import(new URL(`${folder.name}/${file}`, modulesDir).href));
    declared.push({ folder: folder.name, exported });
  }
  expect(declared.length).toBeGreaterThan(10);
  for (const { folder, exported } of declared) {
    const listed = modules.filter((module) => exported.includes(module));
    expect({ folder, listed: listed.map((m) => m.name) }).toEqual({ folder, listed: [folder] });
  }
  expect(new Set(modules.map((m) => m.name)).size).toBe(modules.length);
});

test('the root fields are exactly the operations the modules list, each with its route if it has one', () => {
  const operations = modules.flatMap((module) => module.operations);
  const fields = [
    ...Object.keys(schema.getQueryType()!.getFields()).map((name) => `Query.${name}`),
    ...Object.keys(schema.getMutationType()!.getFields()).map((name) => `Mutation.${name}`),
  ];
  expect(fields.sort()).toEqual(operations.map((o) => o.field).sort());
  expect([...restRoutes.keys()].sort()).toEqual(
    operations
      .filter((o) => o.rest)
      .map((o) => o.field)
      .sort(),
  );
});
