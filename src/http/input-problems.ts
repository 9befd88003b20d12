import { isEnumType, type GraphQLSchema } from 'graphql';
import type { FieldError } from '../errors.js';

/**
 * REST bodies are checked with GraphQL's input coercion (strict types), but a REST client should
 * never read GraphQL's words ("Int cannot represent non-integer value", `of required type
 * "String!"`): each problem is said in the REST facade's terms, at the path of the field it is
 * about. Messages the service wrote itself (custom scalars) pass unchanged.
 */

export const REQUIRED = 'required';

const scalarMessages: Record<string, string> = {
  String: 'must be a string',
  Int: 'must be an integer from -2147483648 to 2147483647',
  Float: 'must be a number',
  Boolean: 'must be true or false',
  ID: 'must be a string or an integer',
};

const at = (path: string, field: string) => (path ? `${path}.${field}` : field);

/** One problem GraphQL's coercion reported at `path`, in the facade's words. */
export function inputProblem(path: string, graphqlMessage: string, schema: GraphQLSchema): FieldError {
  let match = /^Field "([^"]+)" of required type "[^"]+" was not provided\.?$/.exec(graphqlMessage);
  if (match) return { field: at(path, match[1]), message: REQUIRED };
  match = /^Field "([^"]+)" is not defined by type "[^"]+"\.?/.exec(graphqlMessage);
  if (match) return { field: at(path, match[1]), message: 'is not a known field' };
  if (/^Expected non-nullable type "[^"]+" not to be null\.?$/.test(graphqlMessage))
    return { field: path, message: 'must not be null' };
  match = /^(String|Int|Float|Boolean|ID) cannot represent/.exec(graphqlMessage);
  if (match) return { field: path, message: scalarMessages[match[1]] };
  match = /^Value ".*" does not exist in "([^"]+)" enum\.?/.exec(graphqlMessage);
  if (match) {
    const type = schema.getType(match[1]);
    const values = isEnumType(type) ? type.getValues().map((v) => v.name) : [];
    return { field: path, message: values.length ? `must be one of ${values.join(', ')}` : 'is not an allowed value' };
  }
  if (/^Expected type "[^"]+" to be an object\.?$/.test(graphqlMessage))
    return { field: path, message: 'must be an object' };
  return { field: path, message: graphqlMessage };
}
