/**
 * What the CEL library's work on a value costs, in budget operations (policy-condition-budget.ts).
 * One operation is about 20 ns of CPU on the CI machine (Node 20): one AST node evaluated, one
 * element an `in` compares. The other weights bring each kind of work to that scale:
 * - a map entry the library walks (Object.keys, for…in over a parsed JSON object) is 5 (100–300 ns);
 * - 10 characters of a string or bytes are 1 (`size()` counts code points at 8.5 ns each).
 * Scalars cost nothing here: the node that produced them was counted.
 */

export const MAP_ENTRY = 5;
const CHARACTERS_PER_OPERATION = 10;

export const stringUnits = (length: number) => Math.ceil(length / CHARACTERS_PER_OPERATION);

/**
 * The keys of the large plain objects seen, kept as long as the object lives: listing the keys of
 * a parsed JSON object with 40,000 of them takes ≈9 ms, so a request's big map is listed once,
 * not once per policy or per iteration. Small objects are listed again, which is cheaper than the
 * lookup.
 */
const keysOfLargeObjects = new WeakMap<object, string[]>();
const LARGE_OBJECT_KEYS = 64;

function keysOf(value: object): string[] {
  let keys = keysOfLargeObjects.get(value);
  if (keys) return keys;
  keys = Object.keys(value);
  if (keys.length > LARGE_OBJECT_KEYS) keysOfLargeObjects.set(value, keys);
  return keys;
}

const isPlainObject = (value: object) => {
  const prototype = Object.getPrototypeOf(value);
  return prototype === Object.prototype || prototype === null;
};

/** What walking a value's top level costs: its characters, elements or entries. */
export function shallowUnits(value: unknown): number {
  if (typeof value === 'string') return stringUnits(value.length);
  if (typeof value !== 'object' || value === null) return 0;
  if (Array.isArray(value)) return value.length;
  if (value instanceof Uint8Array) return stringUnits(value.length);
  if (value instanceof Set) return value.size;
  if (value instanceof Map) return value.size * MAP_ENTRY;
  // Timestamps, durations, unsigned ints: no walk.
  return isPlainObject(value) ? keysOf(value).length * MAP_ENTRY : 0;
}

/**
 * What the library spends finding a `dyn` value's type (evaluator.js `debugTypeDeep`, before an
 * operator or function on it, or to word an error): it follows the first element of each list
 * and map down, and lists a plain object's keys (for…in) to find its first one.
 */
export function typeUnits(value: unknown): number {
  if (typeof value !== 'object' || value === null) return 0;
  if (Array.isArray(value)) return typeUnits(value[0]);
  if (value instanceof Map || value instanceof Set) return typeUnits(value.values().next().value);
  if (!isPlainObject(value)) return 0;
  const keys = keysOf(value);
  return keys.length * MAP_ENTRY + (keys.length ? typeUnits((value as Record<string, unknown>)[keys[0]]) : 0);
}

/** Adds what walking each of `children` costs to `total`, up to `cap`. */
function addDeepUnits(total: number, children: Iterable<unknown>, cap: number): number {
  for (const child of children) {
    if (total > cap) break;
    if (typeof child === 'string') total += stringUnits(child.length);
    else if (typeof child === 'object' && child !== null) total += deepUnits(child, cap - total);
  }
  return total;
}

/**
 * What walking a whole value costs (a deep `==`, a function given an aggregate), computed only as
 * far as `cap`: past it the evaluation is over its budget anyway, so measuring never costs much
 * more than what it charges.
 */
export function deepUnits(value: unknown, cap: number): number {
  if (typeof value !== 'object' || value === null) return typeof value === 'string' ? stringUnits(value.length) : 0;
  if (Array.isArray(value)) return addDeepUnits(value.length, value, cap);
  if (value instanceof Set || value instanceof Map) return addDeepUnits(shallowUnits(value), value.values(), cap);
  if (!isPlainObject(value)) return shallowUnits(value);
  const keys = keysOf(value);
  const total = keys.length * MAP_ENTRY;
  if (total > cap) return total;
  const record = value as Record<string, unknown>;
  return addDeepUnits(
    total,
    keys.map((key) => record[key]),
    cap,
  );
}

/** How many elements `x in value` compares x with. */
export const elementsOf = (value: unknown): number =>
  Array.isArray(value) ? value.length : typeof value === 'object' && value !== null ? 1 : 0;
