// Builds dist/ from src/ with tsc (tsconfig.build.json). `--if-stale` (npm start) skips the build
// when dist/ was built from exactly the inputs there are now.
//
// The inputs are every file under src/ (src/generated included), both tsconfigs, package.json
// (its "type" decides what tsc emits), package-lock.json (the compiler and the types it checks
// against) and this script. Their paths and content hashes (scripts/build-stamp.mjs) make one
// stamp, written to dist/.build-stamp.json after a successful build with the list of files the
// build emitted. A start skips the build only when the stamp equals the inputs' and every emitted
// file is still there. A build empties dist/ first, so the output of a deleted or renamed source
// does not stay.
//
// Besides tsc's output, dist/vendor/ gets the third-party browser files the service serves that
// come from dev dependencies (ReDoc's standalone bundle): a production install then needs neither
// redoc nor its dependencies (docs/decisions/0046-production-install.md). The lockfile is an input,
// so a new version of them is copied on the next start.
//
// Plain Node (no tsx, no dependencies): it runs on every start.
import { spawnSync } from 'node:child_process';
import { chmodSync, copyFileSync, existsSync, mkdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { filesUnder, hashOfFiles, readStamp, root, stalenessOf } from './build-stamp.mjs';

const dist = path.join(root, 'dist');
const stampFile = path.join(dist, '.build-stamp.json');
/** Files copied from node_modules into dist/vendor/ after tsc: [from, to under dist/]. */
const VENDORED = [
  ['node_modules/redoc/bundles/redoc.standalone.js', 'vendor/redoc/redoc.standalone.js'],
  ['node_modules/redoc/bundles/redoc.standalone.js.LICENSE.txt', 'vendor/redoc/redoc.standalone.js.LICENSE.txt'],
];
const CONFIG_INPUTS = [
  'tsconfig.json',
  'tsconfig.build.json',
  'package.json',
  'package-lock.json',
  'scripts/build.mjs',
  'scripts/build-stamp.mjs',
];

/** One hash over the inputs' paths and contents. */
export const inputsHash = () => hashOfFiles([...CONFIG_INPUTS, ...filesUnder('src')]);

/** Why dist/ must be built again, or undefined when it is current. */
export function staleness(inputs = inputsHash()) {
  const stamp = readStamp(stampFile);
  return stalenessOf({ stamp, inputs, outDir: dist, outputs: stamp?.outputs ?? [], outName: 'dist' });
}

export function build(inputs = inputsHash()) {
  const tsc = path.join(root, 'node_modules/typescript/bin/tsc');
  if (!existsSync(tsc)) {
    // An install without dev dependencies (npm ci --omit=dev …): dist/ is built where they are.
    process.stderr.write(
      'cannot build dist/: TypeScript is a dev dependency and is not installed here; run `npm ci` (without --omit) and `npm run build`\n',
    );
    process.exit(1);
  }
  rmSync(dist, { recursive: true, force: true });
  const result = spawnSync(process.execPath, [tsc, '-p', 'tsconfig.build.json'], { cwd: root, stdio: 'inherit' });
  if (result.status !== 0) process.exit(result.status ?? 1);
  chmodSync(path.join(dist, 'cli/agent-gateway.js'), 0o755);
  for (const [from, to] of VENDORED) {
    mkdirSync(path.dirname(path.join(dist, to)), { recursive: true });
    copyFileSync(path.join(root, from), path.join(dist, to));
  }
  // Hashed again: a source edited while tsc ran must not be stamped as built.
  const after = inputsHash();
  if (after !== inputs) return;
  const outputs = filesUnder('dist').map((file) => file.slice('dist/'.length));
  writeFileSync(`${stampFile}.tmp`, `${JSON.stringify({ inputs, outputs })}\n`);
  renameSync(`${stampFile}.tmp`, stampFile);
}

if (process.argv[1] && fileURLToPath(import.meta.url) === path.resolve(process.argv[1])) {
  const ifStale = process.argv.includes('--if-stale');
  const inputs = inputsHash();
  const why = ifStale ? staleness(inputs) : 'asked to';
  if (why) {
    if (ifStale) process.stderr.write(`building dist/ (${why})\n`);
    build(inputs);
  }
}
