import { MapperKind, mapSchema } from '@graphql-tools/utils';
import { GraphQLObjectType, type GraphQLSchema, Kind, parse, printType } from 'graphql';
import type { useSofa } from 'sofa-api';
import { sofaFieldPath, sofaPath } from '../api/rest-routes.js';
import { restRoutes } from './schema.js';

type RouteConfig = NonNullable<Parameters<typeof useSofa>[0]['routes']>[string];

/** The schema SOFA and the OpenAPI document see: without the fields marked `graphqlOnly` (src/api/closed-values.ts). */
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

/**
 * SOFA's routes: at their public paths for the OpenAPI document, at their fields' literal paths
 * for serving.
 */
export function sofaRouteConfig(at: 'public_path' | 'field_path' = 'public_path'): Record<string, RouteConfig> {
  return Object.fromEntries(
    [...restRoutes].map(([field, r]) => [
      field,
      {
        method: r.method,
        path: at === 'field_path' ? sofaFieldPath(field) : sofaPath(r),
        responseStatus: r.status ?? 200,
        tags: [r.tag],
        description: r.summary,
      },
    ]),
  );
}
