/**
 * `npm install` must leave package-lock.json as it is. npm rewrites the lockfile when its root
 * entry no longer mirrors package.json (a dependency, range, bin, engine or licence edited by
 * hand, without `npm install`), or when a locked package does not satisfy its dependent's range.
 * The first is checked here without the registry; .ci/run checks the whole file by running
 * `npm install --package-lock-only` after `npm ci` and comparing.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const pkg = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8'));
const lock = JSON.parse(readFileSync(path.join(root, 'package-lock.json'), 'utf8'));

test('the lockfile root mirrors package.json', () => {
  const locked = lock.packages[''];
  expect(lock.name).toBe(pkg.name);
  expect(lock.version).toBe(pkg.version);
  expect(lock.lockfileVersion).toBe(3);
  expect(locked).toEqual({
    name: pkg.name,
    version: pkg.version,
    // npm sets it from the package's own install scripts (postinstall: prisma generate).
    hasInstallScript: Boolean(pkg.scripts.preinstall || pkg.scripts.install || pkg.scripts.postinstall),
    license: pkg.license,
    dependencies: pkg.dependencies,
    devDependencies: pkg.devDependencies,
    bin: pkg.bin,
    engines: pkg.engines,
  });
});

test('every direct dependency is locked at the top of node_modules', () => {
  for (const name of [...Object.keys(pkg.dependencies), ...Object.keys(pkg.devDependencies)]) {
    expect([name, typeof lock.packages[`node_modules/${name}`]?.version]).toEqual([name, 'string']);
  }
});
