/**
 * scripts/prisma-generate.mjs without the Prisma CLI, as in a production install
 * (`npm ci --omit=dev --omit=optional`): the postinstall (`--if-installed`) says why it generates
 * nothing and succeeds, so the install does not fail; asked directly (`npm run generate`) it fails.
 * Run on a copy of the script in a scratch directory with no node_modules.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { copyFile, mkdir, mkdtemp, rm } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
let project: string;

beforeAll(async () => {
  await mkdir(path.join(root, '.scratch'), { recursive: true });
  project = await mkdtemp(path.join(root, '.scratch', 'prisma-generate-'));
  await mkdir(path.join(project, 'scripts'));
  await copyFile(path.join(root, 'scripts/prisma-generate.mjs'), path.join(project, 'scripts/prisma-generate.mjs'));
});

afterAll(async () => {
  await rm(project, { recursive: true, force: true });
});

function run(...args: string[]) {
  const result = spawnSync(process.execPath, ['scripts/prisma-generate.mjs', ...args], {
    cwd: project,
    encoding: 'utf8',
    env: { ...process.env, NODE_OPTIONS: '' },
  });
  return { code: result.status, stdout: result.stdout, stderr: result.stderr };
}

test('the postinstall without the Prisma CLI skips generation and says why', () => {
  const pkg = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8'));
  expect(pkg.scripts.postinstall).toBe('node scripts/prisma-generate.mjs --if-installed');
  expect(pkg.devDependencies.prisma).toBeDefined();
  expect(pkg.dependencies.prisma).toBeUndefined();
  expect(run('--if-installed')).toEqual({
    code: 0,
    stdout: '',
    stderr: expect.stringMatching(
      /^prisma generate skipped: the Prisma CLI \(a dev dependency\) is not installed; .*npm run build\)\n$/,
    ),
  });
});

test('`npm run generate` without the Prisma CLI fails and says why', () => {
  expect(run()).toEqual({
    code: 1,
    stdout: '',
    stderr: expect.stringContaining('prisma generate cannot run: the Prisma CLI (a dev dependency) is not installed'),
  });
});
