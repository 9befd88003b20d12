import path from 'node:path';

/**
 * The node arguments that run `src/<entry>.ts` as a process of its own: its JavaScript from jest's
 * global setup (test/support/global-setup.js), which spares each child tsx's compiling and loading
 * of the TypeScript. The child starts in the checkout as before, so relative paths (DATA_DIR's
 * `./data`) mean the same.
 */
export function nodeArguments(entry: 'main' | 'cli/agent-gateway'): string[] {
  const build = process.env.AGW_TEST_SERVICE_BUILD;
  if (!build) throw new Error('AGW_TEST_SERVICE_BUILD is not set: run the tests with jest.config.js (globalSetup)');
  return [path.join(build, `${entry}.js`)];
}
