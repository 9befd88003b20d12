import { buildOperationNodeForField, createGraphQLError } from '@graphql-tools/utils';
import {
  GraphQLBoolean,
  isEqualType,
  isInputObjectType,
  isScalarType,
  Kind,
  OperationTypeNode,
  type DocumentNode,
  type GraphQLSchema,
  type TypeNode,
  type VariableDefinitionNode,
} from 'graphql';
import qs from 'qs';
import { createSofa } from 'sofa-api';

/*
 * What SOFA does for a GET route, for the read lane (decision 0078) to do without yoga's request
 * pipeline and SOFA's router: the operation SOFA's router builds for a Query field (sofa-api's
 * `createQueryRoute`, with the models and depth of `createSofa`), and the variables its handler
 * reads from the query string (`useHandler`: `qs`, then `parseVariable`). Both are SOFA's own
 * functions or the same calls with the same arguments, so the two ways answer alike;
 * test/read-lane.test.ts sends every GET route both ways and compares the answers.
 */

export interface SofaQuery {
  document: DocumentNode;
  operationName: string | undefined;
  variables: readonly VariableDefinitionNode[];
}

/** SOFA's operation of each Query field of `restSchema` (the schema SOFA is given), built once. */
export function sofaQueries(restSchema: GraphQLSchema): (fieldName: string) => SofaQuery {
  const sofa = createSofa({ schema: restSchema, basePath: '' });
  const built = new Map<string, SofaQuery>();
  return (fieldName) => {
    let query = built.get(fieldName);
    if (!query) {
      const operation = buildOperationNodeForField({
        kind: OperationTypeNode.QUERY,
        schema: sofa.schema,
        field: fieldName,
        models: sofa.models,
        ignore: sofa.ignore,
        circularReferenceDepth: sofa.depthLimit,
      });
      query = {
        document: { kind: Kind.DOCUMENT, definitions: [operation] },
        operationName: operation.name?.value,
        variables: operation.variableDefinitions ?? [],
      };
      built.set(fieldName, query);
    }
    return query;
  };
}

/**
 * The variables SOFA's handler gives a GET's operation: each from the query string, parsed by
 * `qs`, an empty value as absent, converted by type as SOFA's `parseVariable` converts them.
 * Throws SOFA's 400 when a value does not convert.
 */
export function sofaVariables(query: SofaQuery, search: string, schema: GraphQLSchema): Record<string, unknown> {
  const given = qs.parse(search.startsWith('?') ? search.slice(1) : search) as Record<string, unknown>;
  const variables: Record<string, unknown> = {};
  try {
    for (const definition of query.variables) {
      const name = definition.variable.name.value;
      const value = given[name] || undefined;
      if (value === undefined || value === null) continue;
      const converted = convert(value, definition.type, schema);
      if (converted !== undefined) variables[name] = converted;
    }
  } catch (error) {
    const message = (error as Error).message || String(error);
    throw createGraphQLError(message, { extensions: { http: { status: 400 } } });
  }
  return variables;
}

/** sofa-api's `resolveVariable`: a scalar by its `serialize` ("true" is true for a Boolean), an input object from JSON. */
function convert(value: unknown, type: TypeNode, schema: GraphQLSchema): unknown {
  if (type.kind === Kind.NAMED_TYPE) {
    const named = schema.getType(type.name.value);
    if (isScalarType(named)) {
      return named.serialize(isEqualType(GraphQLBoolean, named) ? value === 'true' || value === true : value);
    }
    if (isInputObjectType(named)) return value && typeof value === 'object' ? value : JSON.parse(String(value));
    return value;
  }
  if (type.kind === Kind.LIST_TYPE) {
    return (Array.isArray(value) ? value : [value]).map((each) => convert(each, type.type, schema));
  }
  return convert(value, type.type, schema);
}
