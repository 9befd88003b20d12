import type { CodegenConfig } from '@graphql-codegen/cli';

// Typed documents for the GraphQL tests, generated from the committed SDL and test/graphql/*.graphql.
const config: CodegenConfig = {
  schema: 'schema/schema.graphql',
  documents: ['test/graphql/**/*.graphql'],
  generates: {
    'test/generated/graphql.ts': {
      plugins: ['typescript-operations', 'typed-document-node'],
      config: {
        useTypeImports: true,
        // A shaped JSON scalar (src/graphql/scalars.ts) is typed as the document it carries.
        scalars: {
          Timestamp: 'string',
          JSON: 'unknown',
          ManifestPayload: '../../src/modules/manifest/manifest-document.js#ManifestDocument',
          ToolConfig: 'Record<string, unknown>',
          ToolConfigInput: 'Record<string, unknown>',
        },
        enumsAsTypes: true,
        avoidOptionals: { field: true },
      },
    },
  },
};

export default config;
