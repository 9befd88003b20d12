/**
 * scripts/build.mjs, which `npm start` runs with `--if-stale`: it skips tsc only when dist/ was
 * built from exactly the current inputs. Run on a copy of the script in a small project (the
 * real tsconfigs, package.json and lockfile, two source files, node_modules linked), so each
 * build takes a second or two and the checkout's own dist/ is not touched.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, statSync, utimesSync } from 'node:fs';
import { appendFile, copyFile, mkdir, mkdtemp, readFile, rename, rm, symlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
let project: string;

beforeAll(async () => {
  await mkdir(path.join(root, '.scratch'), { recursive: true });
  project = await mkdtemp(path.join(root, '.scratch', 'build-script-'));
  await mkdir(path.join(project, 'scripts'));
  await mkdir(path.join(project, 'src/cli'), { recursive: true });
  for (const file of [
    'tsconfig.json',
    'tsconfig.build.json',
    'package.json',
    'package-lock.json',
    'scripts/build.mjs',
    'scripts/build-stamp.mjs',
  ]) {
    await copyFile(path.join(root, file), path.join(project, file));
  }
  await symlink(path.join(root, 'node_modules'), path.join(project, 'node_modules'));
  await writeFile(path.join(project, 'src/main.ts'), "export const greeting: string = 'one';\n");
  await writeFile(path.join(project, 'src/cli/agent-gateway.ts'), "#!/usr/bin/env node\nconsole.log('cli');\n");
});

afterAll(async () => {
  await rm(project, { recursive: true, force: true });
});

/** `node scripts/build.mjs [--if-stale]` in the project: whether it built, and why. */
function run(...args: string[]) {
  const result = spawnSync(process.execPath, ['scripts/build.mjs', ...args], {
    cwd: project,
    encoding: 'utf8',
    env: { ...process.env, NODE_OPTIONS: '' },
  });
  return { code: result.status, stdout: result.stdout, stderr: result.stderr };
}

const dist = (file: string) => path.join(project, 'dist', file);
const start = () => run('--if-stale');
const built = (why: string) => ({ code: 0, stdout: '', stderr: `building dist/ (${why})\n` });
const skipped = { code: 0, stdout: '', stderr: '' };

test('builds when there is no stamp, then skips while nothing changed', async () => {
  expect(start()).toEqual(built('no build stamp'));
  expect(await readFile(dist('main.js'), 'utf8')).toContain("'one'");
  expect(statSync(dist('cli/agent-gateway.js')).mode & 0o111).toBe(0o111);
  const stamp = JSON.parse(await readFile(dist('.build-stamp.json'), 'utf8'));
  expect(stamp.outputs).toEqual(
    expect.arrayContaining(['main.js', 'cli/agent-gateway.js', 'vendor/redoc/redoc.standalone.js']),
  );
  // ReDoc's bundle is served from the build: redoc is a dev dependency (src/http/docs.ts).
  expect(await readFile(dist('vendor/redoc/redoc.standalone.js'), 'utf8')).toContain('Redoc');
  const mtime = statSync(dist('main.js')).mtimeMs;
  expect(start()).toEqual(skipped);
  expect(statSync(dist('main.js')).mtimeMs).toBe(mtime);
}, 60_000);

test('a changed source rebuilds, even with its modification time put back', async () => {
  const file = path.join(project, 'src/main.ts');
  const { atime, mtime } = statSync(file);
  await writeFile(file, "export const greeting: string = 'two';\n");
  utimesSync(file, atime, mtime);
  expect(start()).toEqual(built('sources or configuration changed'));
  expect(await readFile(dist('main.js'), 'utf8')).toContain("'two'");
  expect(start()).toEqual(skipped);
}, 60_000);

test('an added, renamed or deleted source rebuilds, and no output of a vanished source stays', async () => {
  await writeFile(path.join(project, 'src/extra.ts'), 'export const extra = 1;\n');
  expect(start()).toEqual(built('sources or configuration changed'));
  expect(existsSync(dist('extra.js'))).toBe(true);
  await rename(path.join(project, 'src/extra.ts'), path.join(project, 'src/renamed.ts'));
  expect(start()).toEqual(built('sources or configuration changed'));
  expect(existsSync(dist('extra.js'))).toBe(false);
  expect(existsSync(dist('renamed.js'))).toBe(true);
  await rm(path.join(project, 'src/renamed.ts'));
  expect(start()).toEqual(built('sources or configuration changed'));
  expect(existsSync(dist('renamed.js'))).toBe(false);
  expect(existsSync(dist('renamed.js.map'))).toBe(false);
  expect(start()).toEqual(skipped);
}, 120_000);

test('tsconfig, package.json or the lockfile changing rebuilds; so does a missing output', async () => {
  for (const file of ['tsconfig.json', 'tsconfig.build.json', 'package.json', 'package-lock.json']) {
    await appendFile(path.join(project, file), '\n');
    expect([file, start()]).toEqual([file, built('sources or configuration changed')]);
    expect([file, start()]).toEqual([file, skipped]);
  }
  await rm(dist('cli/agent-gateway.js'));
  expect(start()).toEqual(built('dist/cli/agent-gateway.js is missing'));
  expect(existsSync(dist('cli/agent-gateway.js'))).toBe(true);
}, 180_000);

test('a failed build fails the start and is not stamped; `build` always builds', async () => {
  const file = path.join(project, 'src/main.ts');
  await writeFile(file, 'export const greeting: string = 3;\n');
  const failed = start();
  expect(failed.code).not.toBe(0);
  expect(failed.stdout).toContain('TS2322');
  expect(existsSync(dist('.build-stamp.json'))).toBe(false);
  await writeFile(file, "export const greeting: string = 'three';\n");
  expect(start()).toEqual(built('no build stamp'));
  expect(run()).toEqual(skipped); // an explicit build says nothing, and builds
  expect(await readFile(dist('main.js'), 'utf8')).toContain("'three'");
  expect(start()).toEqual(skipped);
}, 120_000);
