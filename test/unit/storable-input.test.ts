import {
  findUnstorable,
  isStorableText,
  MAX_JSON_DEPTH,
  nestsDeeperThan,
  TOO_DEEP_MESSAGE,
  UNSTORABLE_TEXT_MESSAGE,
} from '../../src/lib/storable-input.js';

const nested = (depth: number): unknown => {
  let value: unknown = 'leaf';
  for (let i = 0; i < depth; i++) value = [value];
  return value;
};

describe('the edge rule for storable input', () => {
  test.each([
    ['a\u0000b', false],
    ['x\ud800', false],
    ['\udc00x', false],
    ['\udfff\ud800', false],
    ['emoji 😀 is a valid pair', true],
    ['plain', true],
    ['', true],
  ])('isStorableText(%j) is %s', (text, expected) => {
    expect(isStorableText(text)).toBe(expected);
  });

  test('names the path of the first bad string, key or depth', () => {
    expect(findUnstorable({ action: { params: { note: 'a\u0000' } } }, '')).toEqual({
      field: 'action.params.note',
      message: UNSTORABLE_TEXT_MESSAGE,
    });
    expect(findUnstorable({ list: ['ok', 'x\ud800'] }, 'body')).toEqual({
      field: 'body.list[1]',
      message: UNSTORABLE_TEXT_MESSAGE,
    });
    expect(findUnstorable({ p: { 'k\u0000': 1 } }, '')?.field).toBe('p');
    expect(findUnstorable(nested(MAX_JSON_DEPTH), 'v')).toBeUndefined();
    expect(findUnstorable(nested(MAX_JSON_DEPTH + 1), 'v')?.message).toBe(TOO_DEEP_MESSAGE);
  });

  test('walks a document nested far beyond the stack without overflowing', () => {
    const text = '['.repeat(200_000) + ']'.repeat(200_000);
    expect(findUnstorable(JSON.parse(text), 'body')?.message).toBe(TOO_DEEP_MESSAGE);
  });

  test('accepts ordinary JSON', () => {
    expect(findUnstorable({ a: [1, true, null, { b: 'c' }], d: 'é' }, '')).toBeUndefined();
  });
});

describe('nestsDeeperThan', () => {
  test('counts arrays and objects, iteratively', () => {
    expect(nestsDeeperThan(nested(MAX_JSON_DEPTH))).toBe(false);
    expect(nestsDeeperThan(nested(MAX_JSON_DEPTH + 1))).toBe(true);
    expect(nestsDeeperThan({ a: { b: { c: 1 } } }, 3)).toBe(false);
    expect(nestsDeeperThan({ a: { b: { c: {} } } }, 3)).toBe(true);
    expect(nestsDeeperThan(JSON.parse('['.repeat(100_000) + ']'.repeat(100_000)))).toBe(true);
  });
});
