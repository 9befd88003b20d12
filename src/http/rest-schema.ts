import { MapperKind, mapSchema } from '@graphql-tools/utils';
import type { GraphQLSchema } from 'graphql';

/**
 * Relations for dashboards (a manifest's history, its approver, an org's manifests) belong to
 * GraphQL only: SOFA selects every field of a return type, so left in, they would bloat every REST
 * response. Fields marked with `graphqlOnly` are removed from the schema SOFA and the OpenAPI
 * document see; resolvers are unchanged.
 */
export const graphqlOnly = { graphqlOnly: true } as const;

export function restSchema(schema: GraphQLSchema): GraphQLSchema {
  return mapSchema(schema, {
    [MapperKind.OBJECT_FIELD]: (field) => (field.extensions?.graphqlOnly ? null : field),
  });
}
