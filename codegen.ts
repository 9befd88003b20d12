import type { CodegenConfig } from '@graphql-codegen/cli';

// A shaped JSON scalar (src/api/scalars.ts) is typed as the document it carries; the
// console's bundle takes no types from the server's sources, so there it is a plain object.
const scalars = {
  Timestamp: 'string',
  JSON: 'unknown',
  ToolConfig: 'Record<string, unknown>',
  ToolConfigInput: 'Record<string, unknown>',
};

// Typed documents, generated from the committed SDL: for the GraphQL tests (test/graphql/*.graphql)
// and for the operator console (console/graphql/*.graphql).
const targets: CodegenConfig['generates'] = {
  'test/generated/graphql.ts': {
    documents: ['test/graphql/**/*.graphql'],
    plugins: ['typescript-operations', 'typed-document-node'],
    config: {
      useTypeImports: true,
      scalars: { ...scalars, ManifestPayload: '../../src/modules/manifest/manifest-document.js#ManifestDocument' },
      enumsAsTypes: true,
      avoidOptionals: { field: true },
    },
  },
  // The client preset in string mode: each operation is its query text typed with its result
  // and variables, so the browser bundle carries no `graphql` runtime (no parser, no AST).
  'console/generated/': {
    documents: ['console/graphql/**/*.graphql'],
    preset: 'client',
    presetConfig: { fragmentMasking: false },
    config: {
      documentMode: 'string',
      useTypeImports: true,
      scalars: { ...scalars, ManifestPayload: 'Record<string, unknown>' },
      enumsAsTypes: true,
      avoidOptionals: { field: true },
    },
  },
};

// scripts/build-console.mjs generates the console's documents only (CODEGEN_TARGET=console): a
// production image builds the console without the test sources.
const only = process.env.CODEGEN_TARGET === 'console' ? 'console/generated/' : undefined;

const config: CodegenConfig = {
  schema: 'schema/schema.graphql',
  generates: only ? { [only]: targets[only] } : targets,
};

export default config;
