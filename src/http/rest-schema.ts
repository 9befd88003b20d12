import { MapperKind, mapSchema } from '@graphql-tools/utils';
import { GraphQLObjectType, type GraphQLSchema, Kind, parse, printType } from 'graphql';

/**
 * Relations for dashboards (a manifest's history, its approver, an org's manifests) belong to
 * GraphQL only: SOFA selects every field of a return type, so left in, they would bloat every REST
 * response. Fields marked with `graphqlOnly` are removed from the schema SOFA and the OpenAPI
 * document see; resolvers are unchanged.
 */
export const graphqlOnly = { graphqlOnly: true } as const;

export function restSchema(schema: GraphQLSchema): GraphQLSchema {
  const withoutGraphqlOnly = mapSchema(schema, {
    [MapperKind.OBJECT_FIELD]: (field) => (field.extensions?.graphqlOnly ? null : field),
  });
  return mapSchema(withoutGraphqlOnly, { [MapperKind.ROOT_OBJECT]: withDefinitionNode });
}

/**
 * A schema built in code (Pothos) has no AST, and SOFA reads each argument's description from
 * the root type's definition node: without one it prints and parses the whole Query or Mutation
 * type again for every variable of every route, about 0.4 s of CPU each time a router is built.
 * The node it would print, made once.
 */
function withDefinitionNode(type: GraphQLObjectType): GraphQLObjectType {
  if (type.astNode) return type;
  const [definition] = parse(printType(type)).definitions;
  if (definition?.kind !== Kind.OBJECT_TYPE_DEFINITION) return type;
  return new GraphQLObjectType({ ...type.toConfig(), astNode: definition });
}
