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
        scalars: { Timestamp: 'string', JSON: 'unknown' },
        enumsAsTypes: true,
        avoidOptionals: { field: true },
      },
    },
  },
};

export default config;
