/**
 * scripts/build-console.mjs, which install (`prepare`), `npm start` and `npm test` run with
 * `--if-stale`: content-hashed files, skipped while its inputs are unchanged, rebuilt when one
 * changes, a failed build keeps the previous one. Run on a copy of the console in a scratch
 * project (node_modules linked), so the checkout's own console/dist is not touched.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { appendFile, copyFile, cp, mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
let project: string;

beforeAll(async () => {
  await mkdir(path.join(root, '.scratch'), { recursive: true });
  project = await mkdtemp(path.join(root, '.scratch', 'console-build-'));
  await mkdir(path.join(project, 'scripts'));
  await mkdir(path.join(project, 'schema'));
  for (const file of [
    'package.json',
    'package-lock.json',
    'codegen.ts',
    'schema/schema.graphql',
    'scripts/build-console.mjs',
    'scripts/build-stamp.mjs',
  ]) {
    await copyFile(path.join(root, file), path.join(project, file));
  }
  for (const dir of ['src', 'graphql'])
    await cp(path.join(root, 'console', dir), path.join(project, 'console', dir), { recursive: true });
  for (const file of ['index.html', 'icon.svg', 'tsconfig.json'])
    await copyFile(path.join(root, 'console', file), path.join(project, 'console', file));
  await symlink(path.join(root, 'node_modules'), path.join(project, 'node_modules'));
});

afterAll(async () => {
  await rm(project, { recursive: true, force: true });
});

function run(...args: string[]) {
  const result = spawnSync(process.execPath, ['scripts/build-console.mjs', ...args], {
    cwd: project,
    encoding: 'utf8',
    env: { ...process.env, NODE_OPTIONS: '' },
  });
  return { code: result.status, stderr: result.stderr };
}

const dist = (file = '') => path.join(project, 'console/dist', file);
const assets = () => readdirSync(dist('assets')).sort();
const script = () => assets().find((file) => /^console-[A-Z0-9]+\.js$/.test(file))!;

test('builds hashed, precompressed files and an index naming them, then skips while nothing changed', async () => {
  const first = run('--if-stale');
  expect(first.code).toBe(0);
  expect(first.stderr).toMatch(/^building console\/dist\/ \(no build stamp\)\n/);
  const js = script();
  const css = assets().find((file) => /^console-[A-Z0-9]+\.css$/.test(file))!;
  expect(assets()).toEqual(expect.arrayContaining([js, `${js}.br`, `${js}.gz`, css, `${css}.br`, `${css}.gz`]));
  const index = await readFile(dist('index.html'), 'utf8');
  expect(index).toContain(`<script type="module" src="/console/assets/${js}"></script>`);
  expect(index).toContain(`href="/console/assets/${css}"`);
  expect(index).not.toMatch(/\{\{|<script>/);
  const stamp = JSON.parse(await readFile(dist('build.json'), 'utf8'));
  expect(Object.keys(stamp.files).sort()).toEqual(
    [
      'index.html',
      ...assets()
        .filter((f) => !/\.(br|gz)$/.test(f))
        .map((f) => `assets/${f}`),
    ].sort(),
  );
  // The bundle carries the operations' text but no GraphQL runtime.
  const bundle = await readFile(dist(`assets/${js}`), 'utf8');
  expect(bundle).toContain('session_login');
  expect(bundle).not.toContain('GraphQLSchema');

  expect(run('--if-stale')).toEqual({ code: 0, stderr: '' });
  expect(script()).toBe(js);
}, 120_000);

test('a changed source rebuilds under a new name; a deleted output rebuilds', async () => {
  const before = script();
  await appendFile(
    path.join(project, 'console/src/ui.tsx'),
    '\nexport const BUILD_PROBE = "probe-one";\nconsole.log(BUILD_PROBE);\n',
  );
  const changed = run('--if-stale');
  expect(changed).toEqual({
    code: 0,
    stderr: expect.stringMatching(/^building console\/dist\/ \(sources or configuration changed\)\n/),
  });
  expect(script()).not.toBe(before);
  expect(await readFile(dist(`assets/${script()}`), 'utf8')).toContain('probe-one');

  await rm(dist(`assets/${script()}`));
  expect(run('--if-stale').stderr).toMatch(
    /^building console\/dist\/ \(console\/dist\/assets\/console-[A-Z0-9]+\.js is missing\)\n/,
  );
  expect(existsSync(dist(`assets/${script()}`))).toBe(true);
}, 120_000);

test('a failed build exits non-zero and leaves the previous build in place', async () => {
  const working = script();
  await writeFile(path.join(project, 'console/src/broken.tsx'), 'export const x = ;\n');
  await appendFile(path.join(project, 'console/src/main.tsx'), "\nimport './broken';\n");
  const failed = run('--if-stale');
  expect(failed.code).toBe(1);
  expect(failed.stderr).toContain('console build failed');
  expect(script()).toBe(working);
  expect(readdirSync(path.join(project, 'console')).filter((name) => name.startsWith('.dist-'))).toEqual([]);
}, 120_000);

test('without the dev dependencies: install (--if-stale) goes on with the console off and says so; a build asked for fails', async () => {
  // A production install (npm ci --omit=dev …): the same project, no node_modules.
  const bare = await mkdtemp(path.join(root, '.scratch', 'console-build-bare-'));
  try {
    await cp(project, bare, {
      recursive: true,
      filter: (source) => !source.includes('node_modules') && !source.includes(`${path.sep}dist`),
    });
    const runIn = (...args: string[]) => {
      const result = spawnSync(process.execPath, ['scripts/build-console.mjs', ...args], {
        cwd: bare,
        encoding: 'utf8',
        env: { ...process.env, NODE_OPTIONS: '' },
      });
      return { code: result.status, stderr: result.stderr };
    };
    const install = runIn('--if-stale');
    expect(install.code).toBe(0);
    expect(install.stderr).toContain(
      'console/dist/ not built, so the operator console is off in this install: building the console needs the dev dependencies ' +
        '(@graphql-codegen/cli, esbuild, preact not installed): run npm ci without --omit, then npm run build:console\n',
    );
    expect(existsSync(path.join(bare, 'console/dist'))).toBe(false);
    const asked = runIn();
    expect(asked.code).toBe(1);
    expect(asked.stderr).toContain('console build failed: building the console needs the dev dependencies');
  } finally {
    await rm(bare, { recursive: true, force: true });
  }
});
