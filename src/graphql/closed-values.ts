/**
 * What a field or argument declares for the OpenAPI document (src/http/openapi.ts) beyond its
 * GraphQL type, declared with the field itself:
 * - `closedValues(values)`: a String whose values are a closed set. GraphQL keeps it a String (API
 *   key scopes like `gateway:execute` are no GraphQL names, and reason codes may grow without
 *   breaking GraphQL clients); the document gives the property an `enum`.
 * - `jsonShape(schema)`: a JSON field or argument whose shape is known (a tool's config): the
 *   document describes it with this OpenAPI schema instead of "any value".
 */
export const CLOSED_VALUES_EXTENSION = 'closedValues';
export const JSON_SHAPE_EXTENSION = 'jsonShape';

export const closedValues = (values: readonly string[]) => ({ extensions: { [CLOSED_VALUES_EXTENSION]: values } });

export const jsonShape = (schema: Record<string, unknown>) => ({ extensions: { [JSON_SHAPE_EXTENSION]: schema } });
