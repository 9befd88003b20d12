/**
 * The lint rules of `npm run lint` catch what they exist for (docs/decisions/0051, 0065, 0066): run
 * on a small project with the repository's own configuration, a statement in a service, an import
 * of another module's store, a module importing the edge, a lower layer importing a higher one and
 * a root field added to the builder directly fail, and the same code where it belongs passes.
 */
import { spawnSync } from 'node:child_process';
import { cp, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
let project: string;

beforeAll(async () => {
  await mkdir(path.join(root, '.scratch'), { recursive: true });
  project = await mkdtemp(path.join(root, '.scratch', 'lint-rules-'));
  await cp(path.join(root, 'biome.json'), path.join(project, 'biome.json'));
  await cp(path.join(root, 'lint'), path.join(project, 'lint'), { recursive: true });
  await cp(path.join(root, '.dependency-cruiser.cjs'), path.join(project, '.dependency-cruiser.cjs'));
  await cp(path.join(root, 'tsconfig.json'), path.join(project, 'tsconfig.json'));
  await mkdir(path.join(project, 'src/modules/alpha'), { recursive: true });
  await mkdir(path.join(project, 'src/modules/beta'), { recursive: true });
});
afterAll(() => rm(project, { recursive: true, force: true }));

function run(bin: string, args: string[]) {
  const result = spawnSync(process.execPath, [path.join(root, 'node_modules', bin), ...args], {
    cwd: project,
    encoding: 'utf8',
  });
  return { code: result.status, output: `${result.stdout}${result.stderr}` };
}
const biome = (file: string) =>
  run('@biomejs/biome/bin/biome', ['lint', '--vcs-enabled=false', '--config-path', project, file]);
const depcruise = () =>
  run('dependency-cruiser/bin/dependency-cruiser.mjs', ['src', '--config', '.dependency-cruiser.cjs']);

const statement = `export async function find(db: { prisma: { user: { findMany(): Promise<unknown[]> } } }) {
  return db.prisma.user.findMany();
}
`;

test('a database statement in a service fails the lint; the same in a store passes', async () => {
  await writeFile(path.join(project, 'src/modules/alpha/alpha.service.ts'), statement);
  const inService = biome('src/modules/alpha/alpha.service.ts');
  expect(inService.code).not.toBe(0);
  expect(inService.output).toContain("A database statement belongs in the module's *.store.ts");

  await writeFile(path.join(project, 'src/modules/alpha/alpha.store.ts'), statement);
  const inStore = biome('src/modules/alpha/alpha.store.ts');
  expect(inStore.output).not.toContain('A database statement belongs');
  expect(inStore.code).toBe(0);
});

test("importing another module's store fails the boundary check; its service passes", async () => {
  await writeFile(path.join(project, 'src/modules/alpha/alpha.service.ts'), "export const alpha = 'a';\n");
  await writeFile(
    path.join(project, 'src/modules/beta/beta.service.ts'),
    "import { find } from '../alpha/alpha.store.js';\nexport const beta = find;\n",
  );
  const throughStore = depcruise();
  expect(throughStore.code).not.toBe(0);
  expect(throughStore.output).toContain('store-of-another-folder');

  await writeFile(
    path.join(project, 'src/modules/beta/beta.service.ts'),
    "import { alpha } from '../alpha/alpha.service.js';\nexport const beta = alpha;\n",
  );
  const throughService = depcruise();
  expect(throughService.output).not.toContain('error');
  expect(throughService.code).toBe(0);
});

test('a module importing the edge fails, a type-only import too; the API layer it declares with passes', async () => {
  await mkdir(path.join(project, 'src/http'), { recursive: true });
  await mkdir(path.join(project, 'src/api'), { recursive: true });
  await writeFile(path.join(project, 'src/http/edge.ts'), 'export interface Edge {\n  id: string;\n}\n');
  await writeFile(path.join(project, 'src/api/toolkit.ts'), 'export interface Toolkit {\n  id: string;\n}\n');
  const schemaFile = path.join(project, 'src/modules/alpha/alpha.graphql.ts');

  await writeFile(schemaFile, "import * as edge from '../../http/edge.js';\nexport const alpha = edge;\n");
  const fromEdge = depcruise();
  expect(fromEdge.code).not.toBe(0);
  expect(fromEdge.output).toContain('module-imports-edge');

  await writeFile(schemaFile, "import type { Edge } from '../../http/edge.js';\nexport type Alpha = Edge;\n");
  const typeFromEdge = depcruise();
  expect(typeFromEdge.code).not.toBe(0);
  expect(typeFromEdge.output).toContain('module-imports-edge');

  await writeFile(schemaFile, "import type { Toolkit } from '../../api/toolkit.js';\nexport type Alpha = Toolkit;\n");
  const fromApi = depcruise();
  expect(fromApi.output).not.toContain('error');
  expect(fromApi.code).toBe(0);
  await rm(schemaFile);
});

test('the API layer and the permission table import nothing above them, not even a type', async () => {
  await mkdir(path.join(project, 'src/authz'), { recursive: true });
  const toolkit = path.join(project, 'src/api/toolkit.ts');
  const table = path.join(project, 'src/authz/authz.ts');
  await writeFile(table, "export type Action = 'org:read';\n");

  await writeFile(path.join(project, 'src/services.ts'), 'export interface Services {\n  id: string;\n}\n');
  // A module, the edge, the composition root: each is above the API layer.
  for (const above of ['../modules/alpha/alpha.service.js', '../http/edge.js', '../services.js']) {
    await writeFile(toolkit, `import type * as Above from '${above}';\nexport type Toolkit = typeof Above;\n`);
    const apiUp = depcruise();
    expect({ above, failed: apiUp.code !== 0 }).toEqual({ above, failed: true });
    expect(apiUp.output).toContain('api-imports-above');
  }
  await writeFile(toolkit, "import type { Action } from '../authz/authz.js';\nexport type Toolkit = Action;\n");

  await writeFile(table, "import type { Toolkit } from '../api/toolkit.js';\nexport type Action = Toolkit;\n");
  const tableUp = depcruise();
  expect(tableUp.code).not.toBe(0);
  expect(tableUp.output).toContain('authz-imports-above');

  await writeFile(table, "export type Action = 'org:read';\n");
  const downward = depcruise();
  expect(downward.output).not.toContain('error');
  expect(downward.code).toBe(0);
});

test('a root field added to the builder directly fails; declared as an operation it passes', async () => {
  const schemaFile = path.join(project, 'src/modules/alpha/alpha.graphql.ts');
  for (const method of ['queryField', 'mutationField', 'queryFields', 'mutationFields']) {
    await writeFile(
      schemaFile,
      `import { builder } from '../../api/builder.js';\nbuilder.${method}('alpha', (t) => t.string({ resolve: () => 'a' }));\n`,
    );
    const direct = biome('src/modules/alpha/alpha.graphql.ts');
    expect({ method, failed: direct.code !== 0 }).toEqual({ method, failed: true });
    expect(direct.output).toContain('A root field is an operation');
  }

  await writeFile(
    schemaFile,
    "import { query } from '../../api/operations.js';\n" +
      "export const alphaQuery = query('alpha', { field: (t) => t.string({ resolve: () => 'a' }) });\n",
  );
  const declared = biome('src/modules/alpha/alpha.graphql.ts');
  expect(declared.output).not.toContain('A root field is an operation');
  expect(declared.code).toBe(0);
  await rm(schemaFile);
});
