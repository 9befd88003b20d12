import { AppError } from '../errors.js';
import { parseTimestamp, timestampProblem } from '../lib/timestamp.js';
import { builder } from './builder.js';
import { JSON_SHAPE_EXTENSION } from './closed-values.js';

builder.scalarType('Timestamp', {
  description: 'ISO 8601 UTC timestamp with milliseconds, e.g. 2026-01-01T00:00:00.000Z',
  serialize: (value) => (value instanceof Date ? value.toISOString() : new Date(value).toISOString()),
  parseValue: (value) => {
    const date = parseTimestamp(value);
    if (!date) throw new AppError('VALIDATION_ERROR', `Timestamp ${timestampProblem}`);
    return date;
  },
});

builder.scalarType('JSON', {
  description: 'Any JSON value',
  serialize: (value) => value,
  parseValue: (value) => value,
});

/**
 * A JSON value whose shape is known and published: introspection, GraphiQL and generated clients
 * see its name and description, `specifiedByURL` points at its JSON Schema in the OpenAPI
 * document (which gives REST bodies the same schema). GraphQL passes the value through as JSON on
 * purpose: its module validates it and reports every problem at once in the API's words (a
 * manifest's mistyped field is an entry of `validate`'s `errors`, not a GraphQL coercion error;
 * its unknown fields are kept with a warning), which an input object type could not do.
 */
export function shapedJsonScalar(
  name: 'ManifestPayload' | 'ToolConfig' | 'ToolConfigInput',
  description: string,
  schema: Record<string, unknown>,
) {
  return builder.scalarType(name, {
    description,
    specifiedByURL: `/openapi.json#/components/schemas/${name}`,
    serialize: (value) => value,
    parseValue: (value) => value,
    extensions: { [JSON_SHAPE_EXTENSION]: schema },
  });
}
