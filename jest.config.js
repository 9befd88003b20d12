/**
 * ESM throughout (jose is ESM-only): ts-jest transpiles, Node's VM modules run the tests.
 * `npm test` runs the files in three workers, then the `*.measured.test.ts` files one at a time:
 * they compare latencies (one org's under another's flood) or measure a service's memory (an
 * export read after a pause), which a second test file running on the same two cores would
 * distort. Three workers on two cores: a file waiting on a child process, a browser or a timer
 * leaves a core to the others (about 6% sooner than two on this machine).
 */
export default {
  testEnvironment: 'node',
  extensionsToTreatAsEsm: ['.ts'],
  moduleNameMapper: { '^(\\.{1,2}/.*)\\.js$': '$1' },
  transform: {
    // Type errors are `npm run typecheck`'s job; transpiling file by file keeps the run fast.
    '^.+\\.ts$': ['ts-jest', { useESM: true, isolatedModules: true, diagnostics: false }],
  },
  testMatch: ['<rootDir>/test/**/*.test.ts'],
  // Tests build throwaway projects under .scratch/ and delete them; a jest started meanwhile
  // (test/optional-programs.test.ts runs one) must not map a package.json that is about to go.
  modulePathIgnorePatterns: ['<rootDir>/\\.scratch/'],
  // The suites that measure the heap first, on fresh workers (test/support/test-sequencer.js).
  testSequencer: '<rootDir>/test/support/test-sequencer.js',
  // src/ as JavaScript once per run, for the tests' child processes (test/support/global-setup.js).
  globalSetup: '<rootDir>/test/support/global-setup.js',
  testTimeout: 60000,
  maxWorkers: 3,
};
