/**
 * The README's test command passes on a machine with only its stated prerequisites: a browser
 * suite without its browser is skipped with a notice naming the install command, and with `CI`
 * set (where .ci/run installs every browser) the same suite fails. Runs jest on the real suites
 * with the browser pointed at nothing.
 */
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));

function jestWithout(file: string, env: Record<string, string>) {
  const { CI: _ci, ...inherited } = process.env;
  const result = spawnSync(process.execPath, ['node_modules/jest/bin/jest.js', '--ci', '--colors=false', file], {
    cwd: root,
    encoding: 'utf8',
    env: { ...inherited, NODE_OPTIONS: '--experimental-vm-modules', ...env },
    timeout: 120_000,
  });
  return { status: result.status, output: `${result.stdout}${result.stderr}` };
}

const suites = [
  { file: 'test/console.e2e.test.ts', variable: 'CHROMIUM_PATH', install: 'apt-get install chromium' },
  { file: 'test/pages.e2e.test.ts', variable: 'CHROMIUM_PATH', install: 'apt-get install chromium' },
  { file: 'test/console.firefox.test.ts', variable: 'FIREFOX_PATH', install: 'apt-get install firefox-esr' },
];

test.each(suites)(
  '$file without its browser is skipped with a notice naming `$install`',
  ({ file, variable, install }) => {
    const run = jestWithout(file, { [variable]: '/nonexistent/browser' });
    expect(run.output).toContain(`install it with \`${install}\``);
    expect(run.output).toMatch(/Tests:\s+\d+ skipped, \d+ total/);
    expect(run.status).toBe(0);
  },
);

test('with CI set, a browser suite without its browser fails', () => {
  const run = jestWithout('test/console.e2e.test.ts', { CHROMIUM_PATH: '/nonexistent/browser', CI: '1' });
  expect(run.output).toContain('CI needs it');
  expect(run.status).not.toBe(0);
});
