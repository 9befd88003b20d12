/** What the console tests need besides the service: a current build and a browser. */
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { optionalProgram } from './optional-programs.js';

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

/**
 * Debian's Chromium (playwright's own browser builds cannot be downloaded here), or CHROMIUM_PATH;
 * undefined, after a notice, when there is none (the browser tests are skipped then, except under CI).
 */
export function findChromium(): string | undefined {
  return optionalProgram('Chromium', ['/usr/bin/chromium', '/usr/bin/chromium-browser'], 'apt-get install chromium', {
    variable: 'CHROMIUM_PATH',
    value: process.env.CHROMIUM_PATH,
  });
}

export const ARTIFACTS_DIR = fileURLToPath(new URL('../artifacts/', import.meta.url));
