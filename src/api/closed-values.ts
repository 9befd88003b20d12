/**
 * What a field or argument declares for the OpenAPI document (src/http/openapi.ts) beyond its
 * GraphQL type, declared with the field itself (and `graphqlOnly` below: a field REST leaves out):
 * - `closedValues(values)`: a String whose values are a closed set. GraphQL keeps it a String (API
 *   key scopes like `gateway:execute` are no GraphQL names, and reason codes may grow without
 *   breaking GraphQL clients); the document gives the property an `enum`.
 * A JSON value whose shape is known (a manifest, a tool's config) is a scalar of its own
 * (`shapedJsonScalar` in scalars.ts) carrying its schema under JSON_SHAPE_EXTENSION: the document
 * gives it a component of that name.
 */
export const CLOSED_VALUES_EXTENSION = 'closedValues';
export const JSON_SHAPE_EXTENSION = 'jsonShape';

export const closedValues = (values: readonly string[]) => ({ extensions: { [CLOSED_VALUES_EXTENSION]: values } });

/**
 * Relations for dashboards (a manifest's history, its approver, an org's manifests) belong to
 * GraphQL only: SOFA selects every field of a return type, so left in, they would bloat every REST
 * response. Fields marked with `graphqlOnly` are removed from the schema SOFA and the OpenAPI
 * document see; resolvers are unchanged.
 */
export const graphqlOnly = { graphqlOnly: true } as const;
