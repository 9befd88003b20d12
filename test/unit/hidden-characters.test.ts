import * as browser from '../../console/src/hidden-characters.js';
import { escapeHiddenCharacters, HIDDEN_CHARACTERS, withoutHiddenCharacters } from '../../src/lib/hidden-characters.js';

const tags = (text: string) => [...text].map((c) => String.fromCodePoint(0xe0000 + c.charCodeAt(0))).join('');

describe('hidden characters', () => {
  test('escaped as JSON escapes: tag characters as their surrogate pair, bidi and zero-width controls alone', () => {
    expect(escapeHiddenCharacters(`a${tags('X')}b\u200bc\u202ed\u2066e\ufeff`)).toBe(
      'a\\udb40\\udc58b\\u200bc\\u202ed\\u2066e\\ufeff',
    );
    // The escaped text parses back to the original inside a JSON string.
    const original = `say ${tags('hi')}\u200d\u061c`;
    expect(JSON.parse(`"${escapeHiddenCharacters(original)}"`)).toBe(original);
    expect(escapeHiddenCharacters('plain text, émojis 👍 and 中文')).toBe('plain text, émojis 👍 and 中文');
  });

  test('removed from every string of a value, map keys too, without touching anything else', () => {
    const value = {
      description: `Reads.${tags('IGNORE')}\u200b`,
      [`key\u202e`]: [`x\u2060y`, 3, null, { nested: `\u200ez` }],
      n: 1.5,
    };
    expect(withoutHiddenCharacters(value)).toEqual({
      description: 'Reads.',
      key: ['xy', 3, null, { nested: 'z' }],
      n: 1.5,
    });
    // A copy: the original is left as it was.
    expect(value.description).toContain('\u200b');
  });

  test('the console escapes the same characters the same way', () => {
    expect(browser.HIDDEN_CHARACTERS.source).toBe(HIDDEN_CHARACTERS.source);
    const text = `a${tags('X')}b\u200bc\u202e\u2066\ufeff 👍`;
    expect(browser.escapeHiddenCharacters(text)).toBe(escapeHiddenCharacters(text));
  });
});
