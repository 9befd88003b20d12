#!/usr/bin/env node
// `agent-gateway` (package.json "bin"): runs the compiled command line, dist/cli/agent-gateway.js.
//
// In a checkout (src/ and scripts/build.mjs beside it) dist/ is built first when it is missing or
// stale, as `npm start` does (content hashes, scripts/build.mjs), the build's output going to
// stderr so that stdout stays the command's. Where it cannot be built (no TypeScript: an install
// without dev dependencies) a stale dist/ runs as it is, after a warning, and a missing one is an
// error that says to run `npm run build`. In the Docker image there is no src/: dist/ just runs.
//
// `npx agent-gateway …` in a checkout runs this file: npm 11 links the project into its npx cache
// and runs the project's own bin (docs/decisions/0046-production-install.md).
//
// Plain Node, no dependencies.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const at = (relative) => fileURLToPath(new URL(`../${relative}`, import.meta.url));
const cli = at('dist/cli/agent-gateway.js');
const say = (line) => process.stderr.write(`agent-gateway: ${line}\n`);

if (existsSync(at('src')) && existsSync(at('scripts/build.mjs'))) {
  const { staleness } = await import(new URL('../scripts/build.mjs', import.meta.url).href);
  const why = staleness();
  if (why && existsSync(at('node_modules/typescript/bin/tsc'))) {
    say(`building dist/ (${why})`);
    const built = spawnSync(process.execPath, [at('scripts/build.mjs')], { cwd: at(''), stdio: ['ignore', 2, 2] });
    if (built.status !== 0) {
      say('building dist/ failed (above); `npm run build` builds it again');
      process.exit(2);
    }
  } else if (why && existsSync(cli)) {
    say(
      `dist/ is stale (${why}) and cannot be built here (TypeScript, a dev dependency, is not installed); running it as it is`,
    );
  }
}

if (!existsSync(cli)) {
  say(
    `dist/ is not built in ${at('')}: run \`npm run build\` there (after \`npm ci\`, which installs the compiler), then try again`,
  );
  process.exit(2);
}
await import(new URL('../dist/cli/agent-gateway.js', import.meta.url).href);
