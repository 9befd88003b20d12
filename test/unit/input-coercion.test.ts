import {
  coerceInputValue,
  GraphQLInputObjectType,
  GraphQLInt,
  GraphQLList,
  GraphQLNonNull,
  GraphQLString,
  isEnumType,
  isInputObjectType,
  isListType,
  isNonNullType,
  isScalarType,
  type GraphQLInputType,
} from 'graphql';
import { coerceInput, compiledCoercion } from '../../src/api/input-coercion.js';
import { schema } from '../../src/http/schema.js';

/**
 * The compiled coercion against GraphQL's, over every argument of every field of the schema (the
 * REST bodies come from them), with values drawn at random: right, wrong, missing, extra, null,
 * single for a list. For each: the compiled path gives up exactly when GraphQL reports an error,
 * gives GraphQL's value when it does not, and `coerceInput` reports GraphQL's errors word for word.
 */

/** A small deterministic generator (mulberry32), so that a failure can be replayed. */
function random(seed: number) {
  let state = seed >>> 0;
  const next = () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return {
    chance: (p: number) => next() < p,
    pick: <T>(items: readonly T[]) => items[Math.floor(next() * items.length)],
  };
}
type Random = ReturnType<typeof random>;

const oddValues = [null, 0, 1.5, -3, 'text', '', true, false, [], ['a'], {}, { x: 1 }, '2026-11-29T10:00:00Z', 'nope'];

function scalarValue(name: string, r: Random): unknown {
  switch (name) {
    case 'String':
    case 'ID':
      return r.pick(['a', 'billing', 'x'.repeat(40), 'ünï', '42']);
    case 'Int':
      return r.pick([0, 7, 1000, -1]);
    case 'Float':
      return r.pick([0, 0.5, 120.5]);
    case 'Boolean':
      return r.pick([true, false]);
    case 'JSON':
      return r.pick([{ a: 1 }, { nested: { list: [1, 'two'] } }, [1, 2], 'text', 3]);
    case 'Timestamp':
      return r.pick(['2026-11-29T10:00:00Z', '2026-11-29T10:00:00.123+01:00']);
    default:
      return r.pick(['a', 1, '2026-11-29T10:00:00Z']);
  }
}

/** A value for `type`: usually a right one, sometimes wrong in one of the ways clients get it wrong. */
function valueFor(type: GraphQLInputType, r: Random, depth = 0): unknown {
  if (r.chance(0.06)) return r.pick(oddValues);
  if (isNonNullType(type)) return valueFor(type.ofType, r, depth);
  if (r.chance(0.04)) return r.chance(0.5) ? null : undefined;
  if (isListType(type)) {
    if (r.chance(0.2)) return valueFor(type.ofType, r, depth + 1);
    return Array.from({ length: r.pick([0, 1, 2, 3]) }, () => valueFor(type.ofType, r, depth + 1));
  }
  if (isInputObjectType(type)) {
    if (depth > 4) return {};
    const value: Record<string, unknown> = {};
    for (const field of Object.values(type.getFields())) {
      if (r.chance(isNonNullType(field.type) ? 0.95 : 0.6)) value[field.name] = valueFor(field.type, r, depth + 1);
    }
    if (r.chance(0.05)) value[r.pick(['unknown', 'constructor', 'toString'])] = 1;
    return value;
  }
  if (isEnumType(type)) return r.chance(0.9) ? r.pick(type.getValues()).name : r.pick(['NOT_A_VALUE', 3]);
  if (isScalarType(type)) return scalarValue(type.name, r);
  throw new Error(`unexpected type ${String(type)}`);
}

/** GraphQL's coercion: its value and its errors as the REST facade words them (path and message). */
function graphqlCoercion(value: unknown, type: GraphQLInputType) {
  const errors: string[] = [];
  const coerced = coerceInputValue(value, type, (path, _invalid, error) =>
    errors.push(`${path.join('.')}: ${error.message}`),
  );
  return { coerced, errors };
}

const inputs = [schema.getQueryType(), schema.getMutationType()]
  .flatMap((root) => Object.values(root!.getFields()))
  .flatMap((field) => field.args.map((arg) => ({ where: `${field.name}(${arg.name})`, type: arg.type })));

test('the schema has input objects, lists, enums and custom scalars among its arguments to compare', () => {
  const named = (type: GraphQLInputType): GraphQLInputType =>
    isNonNullType(type) || isListType(type) ? named(type.ofType) : type;
  expect(inputs.length).toBeGreaterThan(50);
  expect(inputs.some(({ type }) => isInputObjectType(named(type)))).toBe(true);
  expect(inputs.some(({ type }) => isEnumType(named(type)))).toBe(true);
  expect(inputs.some(({ type }) => isListType(isNonNullType(type) ? type.ofType : type))).toBe(true);
  expect(inputs.some(({ type }) => named(type).toString() === 'JSON')).toBe(true);
});

test('over random values of every argument, the compiled path agrees with GraphQL: clean exactly when GraphQL reports nothing, and the same value', () => {
  const r = random(44);
  let clean = 0;
  let invalid = 0;
  for (let round = 0; round < 60; round++) {
    for (const { where, type } of inputs) {
      const value = valueFor(type, r);
      const expected = graphqlCoercion(value, type);
      const compiled = compiledCoercion(type)(value);
      const context = { where, value: JSON.stringify(value), errors: expected.errors };
      if (expected.errors.length) {
        invalid++;
        expect({ ...context, compiled }).toEqual({ ...context, compiled: 'invalid' });
      } else {
        clean++;
        expect({ ...context, compiled }).toStrictEqual({ ...context, compiled: { value: expected.coerced } });
      }
      // What the facade calls: GraphQL's value and errors either way.
      const errors: string[] = [];
      const coerced = coerceInput(value, type, (path, _invalid, error) =>
        errors.push(`${path.join('.')}: ${error.message}`),
      );
      expect({ ...context, errors, coerced }).toStrictEqual({ ...context, coerced: expected.coerced });
    }
  }
  // Both kinds were drawn often enough for the comparison to mean something.
  expect(clean).toBeGreaterThan(1000);
  expect(invalid).toBeGreaterThan(300);
});

test('defaults, a single value for a list, oneOf and a type that contains itself, on types made for the purpose', () => {
  const Filter: GraphQLInputObjectType = new GraphQLInputObjectType({
    name: 'Filter',
    fields: () => ({
      tags: { type: new GraphQLList(new GraphQLNonNull(GraphQLString)) },
      limit: { type: GraphQLInt, defaultValue: 20 },
      not: { type: Filter },
    }),
  });
  const Target = new GraphQLInputObjectType({
    name: 'Target',
    isOneOf: true,
    fields: { id: { type: GraphQLString }, slug: { type: GraphQLString } },
  });
  const cases: [GraphQLInputType, unknown][] = [
    [Filter, { tags: 'vip' }],
    [Filter, { tags: ['vip', 'gold'], not: { tags: 'x', not: { limit: 3 } } }],
    [Filter, { tags: [null] }],
    [Filter, { limit: 'ten' }],
    [Filter, { not: [] }],
    [Target, { id: 'a' }],
    [Target, { id: 'a', slug: 'b' }],
    [Target, { id: null }],
    [Target, {}],
  ];
  const outcomes = cases.map(([type, value]) => {
    const expected = graphqlCoercion(value, type);
    const compiled = compiledCoercion(type)(value);
    expect(compiled).toStrictEqual(expected.errors.length ? 'invalid' : { value: expected.coerced });
    return compiled === 'invalid' ? 'invalid' : compiled.value;
  });
  expect(outcomes).toEqual([
    { tags: ['vip'], limit: 20 },
    { tags: ['vip', 'gold'], limit: 20, not: { tags: ['x'], limit: 20, not: { limit: 3 } } },
    'invalid',
    'invalid',
    'invalid',
    { id: 'a' },
    'invalid',
    'invalid',
    'invalid',
  ]);
});
