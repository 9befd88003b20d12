import { builder } from './builder.js';
import type { RestRoute } from './rest-routes.js';

type QueryField = Parameters<typeof builder.queryField>[1];
type MutationField = Parameters<typeof builder.mutationField>[1];

/**
 * One operation of the API, declared once: a root field of the GraphQL schema and, unless it is
 * GraphQL-only, its REST route, from which the REST facade serves it and the OpenAPI document
 * describes it. Declaring it adds nothing anywhere: its module lists it (its `*.module.ts`), and
 * the edge's schema assembly (src/http/schema.ts) registers the modules' operations.
 */
export interface Operation {
  /** `Query.name` or `Mutation.name`. */
  readonly field: string;
  /** Where the REST facade serves it; none for an operation only GraphQL serves. */
  readonly rest: RestRoute | undefined;
  /** Adds the field to the schema: called once, by the schema assembly. */
  readonly register: () => void;
}

export interface OperationDeclaration<Field> {
  /** The GraphQL field, as Pothos's `builder.queryField` / `builder.mutationField` take it. */
  field: Field;
  rest?: RestRoute;
}

export function query(name: string, { field, rest }: OperationDeclaration<QueryField>): Operation {
  return { field: `Query.${name}`, rest, register: () => builder.queryField(name, field) };
}

export function mutation(name: string, { field, rest }: OperationDeclaration<MutationField>): Operation {
  return { field: `Mutation.${name}`, rest, register: () => builder.mutationField(name, field) };
}
