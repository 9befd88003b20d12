/** ESM throughout (jose is ESM-only): @swc/jest transpiles, Node's VM modules run the tests. */
export default {
  testEnvironment: 'node',
  extensionsToTreatAsEsm: ['.ts'],
  moduleNameMapper: { '^(\\.{1,2}/.*)\\.js$': '$1' },
  transform: {
    '^.+\\.ts$': [
      '@swc/jest',
      { jsc: { parser: { syntax: 'typescript' }, target: 'es2022' }, module: { type: 'es6' } },
    ],
  },
  testMatch: ['<rootDir>/test/**/*.test.ts'],
  testTimeout: 60000,
  maxWorkers: 2,
};
