// `prisma generate`: the Prisma client and the Pothos types into src/generated/, which `npm run
// build` compiles into dist/. Run by `npm install`/`npm ci` (postinstall, with `--if-installed`)
// and by `npm run generate`.
//
// The Prisma CLI is a dev dependency: a production install (`npm ci --omit=dev --omit=optional`)
// has no CLI and needs no src/generated (it runs a dist/ built where the dev dependencies are), so
// with `--if-installed` the script says so and succeeds; without it, a missing CLI is an error.
//
// `prisma generate` insists on a schema-engine binary path although it never runs it, and the
// engine cannot be downloaded on offline build machines; any executable satisfies the check.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const cli = fileURLToPath(new URL('../node_modules/prisma/build/index.js', import.meta.url));
if (!existsSync(cli)) {
  const why = 'the Prisma CLI (a dev dependency) is not installed';
  if (process.argv.includes('--if-installed')) {
    process.stderr.write(
      `prisma generate skipped: ${why}; src/generated is needed only to build dist/ (npm ci without --omit, then npm run build)\n`,
    );
    process.exit(0);
  }
  process.stderr.write(`prisma generate cannot run: ${why}; run npm ci without --omit=dev\n`);
  process.exit(1);
}

const env = { ...process.env };
env.PRISMA_SCHEMA_ENGINE_BINARY ??= process.execPath;
env.PRISMA_HIDE_UPDATE_MESSAGE = '1';
// Generators such as prisma-pothos-types are found on PATH, as under `npx`.
const bin = fileURLToPath(new URL('../node_modules/.bin', import.meta.url));
env.PATH = `${bin}${path.delimiter}${env.PATH ?? ''}`;
const result = spawnSync(process.execPath, [cli, 'generate'], { stdio: 'inherit', env });
process.exit(result.status ?? 1);
