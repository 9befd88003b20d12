import type { FieldError } from '../errors.js';

/**
 * The one rule for text and JSON the service accepts from a caller, applied at the edge (the REST
 * guard, GraphQL variables and literals) before anything is decided, counted or stored:
 *
 * - no U+0000 and no unpaired UTF-16 surrogate in any string or object key: PostgreSQL can store
 *   neither (`text` refuses NUL, `jsonb` refuses both), so such input could otherwise pass every
 *   check, reach a tool and then fail the write of its record;
 * - JSON nests at most MAX_JSON_DEPTH levels: canonical hashing and GraphQL coercion recurse, and
 *   a deeper document would overflow the stack after a tool had been called.
 *
 * The walk is iterative, so a hostile document cannot overflow the stack here either.
 */

export const MAX_JSON_DEPTH = 64;

export const UNSTORABLE_TEXT_MESSAGE = 'must not contain NUL (U+0000) or unpaired UTF-16 surrogates';
export const TOO_DEEP_MESSAGE = `must not nest deeper than ${MAX_JSON_DEPTH} levels`;

// U+0000, a high surrogate not followed by a low one, or a low surrogate not preceded by a high one.
const unstorable = /\u0000|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

/** Whether PostgreSQL can store the string as `text` and inside `jsonb`. */
export const isStorableText = (text: string): boolean => !unstorable.test(text);

const child = (path: string, key: string | number) =>
  typeof key === 'number' ? `${path}[${key}]` : path ? `${path}.${key}` : key;

/**
 * The first problem of a parsed JSON value (or any plain value built from one), named by its path
 * under `root` ("action.params.note", "items[3]"); undefined when the value is acceptable.
 */
export function findUnstorable(value: unknown, root: string, maxDepth = MAX_JSON_DEPTH): FieldError | undefined {
  const stack: { value: unknown; path: string; depth: number }[] = [{ value, path: root, depth: 0 }];
  while (stack.length) {
    const { value: current, path, depth } = stack.pop()!;
    if (typeof current === 'string') {
      if (!isStorableText(current)) return { field: path || 'body', message: UNSTORABLE_TEXT_MESSAGE };
      continue;
    }
    if (typeof current !== 'object' || current === null) continue;
    if (depth >= maxDepth) return { field: path || 'body', message: TOO_DEEP_MESSAGE };
    if (Array.isArray(current)) {
      for (let i = current.length - 1; i >= 0; i--)
        stack.push({ value: current[i], path: child(path, i), depth: depth + 1 });
      continue;
    }
    const keys = Object.keys(current);
    for (let i = keys.length - 1; i >= 0; i--) {
      const key = keys[i];
      if (!isStorableText(key)) return { field: path || 'body', message: `has a key that ${UNSTORABLE_TEXT_MESSAGE}` };
      stack.push({ value: (current as Record<string, unknown>)[key], path: child(path, key), depth: depth + 1 });
    }
  }
  return undefined;
}

/** Whether a value nests deeper than `maxDepth` levels (iteratively: the value may be hostile). */
export function nestsDeeperThan(value: unknown, maxDepth = MAX_JSON_DEPTH): boolean {
  const stack: { value: unknown; depth: number }[] = [{ value, depth: 0 }];
  while (stack.length) {
    const { value: current, depth } = stack.pop()!;
    if (typeof current !== 'object' || current === null) continue;
    if (depth >= maxDepth) return true;
    for (const item of Array.isArray(current) ? current : Object.values(current))
      stack.push({ value: item, depth: depth + 1 });
  }
  return false;
}
