import { lexicographicSortSchema, printSchema } from 'graphql';
import { packageVersion } from './app.js';
import { schema } from './http/schema.js';
import { buildOpenApiDocument } from './http/openapi.js';

/** The committed contract files under schema/, rendered from the code. */
export function renderContracts(): Record<'schema.graphql' | 'openapi.json', string> {
  return {
    'schema.graphql': `${printSchema(lexicographicSortSchema(schema))}\n`,
    'openapi.json': `${JSON.stringify(buildOpenApiDocument(schema, packageVersion), null, 2)}\n`,
  };
}
