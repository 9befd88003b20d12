/**
 * `npm test` runs jest's workers without V8's Sparkplug tier: with it, Node 24 leaves a stale
 * pointer in a frame that a later full collection dereferences (nodejs/node#62393), which killed a
 * worker with SIGSEGV in a CI run (docs/decisions/0070-jest-without-sparkplug.md).
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const scripts: Record<string, string> = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')).scripts;

test('the jest script starts Node with --no-sparkplug, and npm test runs jest only through it', () => {
  expect(scripts.jest.split(' ').slice(0, 4)).toEqual([
    'node',
    '--no-sparkplug',
    '--experimental-vm-modules',
    'node_modules/jest/bin/jest.js',
  ]);
  const steps = scripts.test.split('&&').map((step) => step.trim());
  const jestSteps = steps.filter((step) => /\bjest\b/.test(step));
  expect(jestSteps.length).toBe(2);
  for (const step of jestSteps) expect(step.startsWith('npm run jest --silent -- ')).toBe(true);
});

// Jest forks its workers with the parent's execArgv. Run by hand as `npx jest`, the flag is absent,
// and this test is skipped rather than failed.
const throughTheScript = process.env.npm_lifecycle_event === 'jest';
(throughTheScript ? test : test.skip)('this worker was started with the flag', () => {
  expect(process.execArgv).toContain('--no-sparkplug');
});
