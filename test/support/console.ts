/** What the console tests need besides the service: a current build and a browser. */
import { spawnSync } from 'node:child_process';
import { accessSync, constants } from 'node:fs';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('../..', import.meta.url));

/**
 * Builds console/dist/ when its sources changed (`npm test` has done it already; a test file run
 * alone may not have), so the tests never run against an older build.
 */
export function ensureConsoleBuilt(): void {
  const result = spawnSync(process.execPath, ['scripts/build-console.mjs', '--if-stale'], {
    cwd: root,
    encoding: 'utf8',
    env: { ...process.env, NODE_OPTIONS: '' },
  });
  if (result.status !== 0) throw new Error(`the console build failed:\n${result.stderr}`);
}

/** Debian's chromium (playwright's own browser builds cannot be downloaded here). */
const CHROMIUM_CANDIDATES = [process.env.CHROMIUM_PATH, '/usr/bin/chromium', '/usr/bin/chromium-browser'];

export function chromiumExecutable(): string {
  for (const candidate of CHROMIUM_CANDIDATES) {
    if (!candidate) continue;
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // the next one
    }
  }
  throw new Error(
    'No Chromium for the console tests: install Debian\'s package (apt-get install -y chromium, as .ci/run does) ' +
      'or set CHROMIUM_PATH to a Chromium executable',
  );
}

export const ARTIFACTS_DIR = fileURLToPath(new URL('../artifacts/', import.meta.url));
