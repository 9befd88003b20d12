/**
 * A String field whose values are a closed set, declared with the field: `t.exposeString('code',
 * closedValues(REASON_CODES))`. GraphQL keeps it a String (API key scopes like `gateway:execute`
 * are no GraphQL names, and reason codes may grow without breaking GraphQL clients); the OpenAPI
 * document (src/http/openapi.ts) turns the extension into the property's `enum`.
 */
export const CLOSED_VALUES_EXTENSION = 'closedValues';

export const closedValues = (values: readonly string[]) => ({ extensions: { [CLOSED_VALUES_EXTENSION]: values } });
