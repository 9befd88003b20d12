// Builds the operator console into console/dist/ from console/ with esbuild: typed operations from
// the project's codegen (console/generated/), then one JavaScript module and one stylesheet named
// by their content hash under console/dist/assets/, precompressed (.br, .gz), and the index page
// pointing at them. The service serves that directory at /console (src/http/console.ts).
//
// Run by `npm install`/`npm ci` (the root `prepare` script), by `npm start` and by `npm test` with
// `--if-stale`: skipped when console/dist/ was built from exactly the inputs there are now (content
// hashes, as scripts/build.mjs does for dist/). Codegen and esbuild are needed only to build:
// the service itself reads the files.
import { createHash } from 'node:crypto';
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { brotliCompressSync, constants, gzipSync } from 'node:zlib';
import { filesUnder, hashOfFiles, readStamp, root, stalenessOf } from './build-stamp.mjs';

const consoleDir = path.join(root, 'console');
export const outDir = path.join(consoleDir, 'dist');
const stampFile = path.join(outDir, 'build.json');
const CONFIG_INPUTS = [
  'schema/schema.graphql',
  'codegen.ts',
  'package-lock.json',
  'scripts/build-console.mjs',
  'scripts/build-stamp.mjs',
  'console/index.html',
  'console/icon.svg',
  'console/tsconfig.json',
];
const SOURCE_DIRS = ['console/src', 'console/graphql'];
/** Module scripts, `??=`, private fields: browsers of the last two or three years. */
const TARGETS = ['chrome111', 'firefox111', 'safari16.4'];

export const inputsHash = () => hashOfFiles([...CONFIG_INPUTS, ...SOURCE_DIRS.flatMap(filesUnder)]);

/** Why console/dist/ must be built again, or undefined when it is current. */
export function staleness(inputs = inputsHash()) {
  const stamp = readStamp(stampFile);
  return stalenessOf({ stamp, inputs, outDir, outputs: Object.keys(stamp?.files ?? {}), outName: 'console/dist' });
}

/** Codegen, esbuild and Preact are dev dependencies: a production install cannot build. */
function needDevDependencies() {
  const missing = ['@graphql-codegen/cli', 'esbuild', 'preact'].filter(
    (name) => !existsSync(path.join(root, 'node_modules', name, 'package.json')),
  );
  if (missing.length === 0) return;
  const error = new Error(
    `building the console needs the dev dependencies (${missing.join(', ')} not installed): run npm ci without --omit, then npm run build:console`,
  );
  error.code = 'NO_DEV_DEPENDENCIES';
  throw error;
}

function codegen() {
  // Its package exports do not include the bin, so the path within node_modules.
  const cli = path.join(root, 'node_modules/@graphql-codegen/cli/cjs/bin.js');
  const env = { ...process.env, CODEGEN_TARGET: 'console' };
  const result = spawnSync(process.execPath, [cli, '--config', 'codegen.ts', '--silent'], {
    cwd: root,
    stdio: 'inherit',
    env,
  });
  if (result.status !== 0) throw new Error(`graphql-codegen failed (status ${result.status})`);
}

/** Bundles, writes the index page and the compressed copies into `building`; the file sizes. */
async function bundleInto(building) {
  const esbuild = await import('esbuild');
  const assetsDir = path.join(building, 'assets');
  const result = await esbuild.build({
    absWorkingDir: root,
    entryPoints: { console: 'console/src/main.tsx' },
    bundle: true,
    format: 'esm',
    platform: 'browser',
    target: TARGETS,
    jsx: 'automatic',
    jsxImportSource: 'preact',
    minify: true,
    sourcemap: false,
    legalComments: 'none',
    entryNames: '[name]-[hash]',
    assetNames: '[name]-[hash]',
    outdir: assetsDir,
    metafile: true,
    logLevel: 'warning',
    define: { 'process.env.NODE_ENV': '"production"' },
  });
  const outputs = Object.keys(result.metafile.outputs).map((file) =>
    path.relative(building, path.join(root, file)).split(path.sep).join('/'),
  );
  const script = outputs.find((file) => file.endsWith('.js'));
  const stylesheet = outputs.find((file) => file.endsWith('.css'));
  if (!script || !stylesheet) throw new Error(`esbuild wrote no script or no stylesheet: ${outputs.join(', ')}`);
  // The icon named by its content hash like the bundle (the page names it, so browsers do not ask
  // for /favicon.ico).
  const iconBytes = readFileSync(path.join(consoleDir, 'icon.svg'));
  const icon = `assets/icon-${createHash('sha256').update(iconBytes).digest('hex').slice(0, 8).toUpperCase()}.svg`;
  writeFileSync(path.join(building, icon), iconBytes);
  outputs.push(icon);
  const template = readFileSync(path.join(consoleDir, 'index.html'), 'utf8');
  const index = template
    .replace('{{script}}', `/console/${script}`)
    .replace('{{stylesheet}}', `/console/${stylesheet}`)
    .replace('{{icon}}', `/console/${icon}`);
  writeFileSync(path.join(building, 'index.html'), index);

  // Compressed once here at the highest levels (slow, but once per build), so the service never
  // compresses the console per request.
  const files = {};
  for (const file of ['index.html', ...outputs]) {
    const bytes = readFileSync(path.join(building, file));
    const br = brotliCompressSync(bytes, {
      params: { [constants.BROTLI_PARAM_QUALITY]: 11, [constants.BROTLI_PARAM_SIZE_HINT]: bytes.length },
    });
    const gz = gzipSync(bytes, { level: 9 });
    writeFileSync(path.join(building, `${file}.br`), br);
    writeFileSync(path.join(building, `${file}.gz`), gz);
    files[file] = { bytes: bytes.length, gzip: gz.length, br: br.length };
  }
  return files;
}

export async function build(inputs = inputsHash()) {
  needDevDependencies();
  codegen();
  // Built beside, then swapped in: a service reading console/dist (or a second build started at
  // the same time, as two test files can) never sees half a build.
  const building = path.join(consoleDir, `.dist-${process.pid}`);
  rmSync(building, { recursive: true, force: true });
  let files;
  try {
    files = await bundleInto(building);
  } catch (error) {
    rmSync(building, { recursive: true, force: true });
    throw error;
  }
  // Hashed again: a source edited during the build must not be stamped as built (the service
  // reads build.json to find the files, so an unstamped build is served only after a rebuild).
  if (inputsHash() === inputs)
    writeFileSync(path.join(building, 'build.json'), `${JSON.stringify({ inputs, files }, null, 2)}\n`);
  rmSync(outDir, { recursive: true, force: true });
  try {
    renameSync(building, outDir);
  } catch (error) {
    // Another build swapped its own in first: from the same inputs, so as good as this one.
    rmSync(building, { recursive: true, force: true });
    if (!existsSync(stampFile)) throw error;
  }
  return files;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === path.resolve(process.argv[1])) {
  const ifStale = process.argv.includes('--if-stale');
  const inputs = inputsHash();
  const why = ifStale ? staleness(inputs) : 'asked to';
  if (why) {
    if (ifStale) process.stderr.write(`building console/dist/ (${why})\n`);
    try {
      const files = await build(inputs);
      for (const [file, size] of Object.entries(files)) {
        process.stderr.write(`  console/dist/${file}: ${size.bytes} bytes, gzip ${size.gzip}, br ${size.br}\n`);
      }
    } catch (error) {
      // An install without dev dependencies (or a start after one) still installs and serves the
      // API, with the console off: start-up does not advertise it, and /console answers 503
      // saying it was not built in this install and how to get it. Asked to build, it fails.
      if (ifStale && error.code === 'NO_DEV_DEPENDENCIES') {
        process.stderr.write(
          `console/dist/ not built, so the operator console is off in this install: ${error.message}\n`,
        );
        process.exit(0);
      }
      process.stderr.write(`console build failed: ${error.message}\n`);
      process.exit(1);
    }
  }
}
