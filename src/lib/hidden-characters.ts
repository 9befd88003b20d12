/**
 * Characters a reader does not see and a model reads (docs/decisions/0085-content-detectors.md):
 * Unicode tag characters (U+E0000–E007F, as UTF-16 surrogate pairs), the bidirectional controls,
 * and the zero-width ones. The content detector `hidden_text` reports them; an upstream's tool
 * definitions reach agents without them and operators with them escaped.
 */
export const HIDDEN_CHARACTERS =
  /\udb40[\udc00-\udc7f]|[\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c]|[\u200b-\u200d\u2060\ufeff\u180e]/g;

const escaped = (character: string) =>
  [...character].map((unit) => `\\u${unit.charCodeAt(0).toString(16).padStart(4, '0')}`).join('');

/** The text with each hidden character written as its JSON escape (`\u200b`, `\udb40\udc41`): visible, and the same JSON. */
export const escapeHiddenCharacters = (text: string): string =>
  text.replace(HIDDEN_CHARACTERS, (character) =>
    character.length === 2 ? escaped(character[0]) + escaped(character[1]) : escaped(character),
  );

/** A copy of a JSON value with every hidden character removed from its strings (map keys too). */
export function withoutHiddenCharacters<T>(value: T): T {
  const strip = (current: unknown): unknown => {
    if (typeof current === 'string') return current.replace(HIDDEN_CHARACTERS, '');
    if (Array.isArray(current)) return current.map(strip);
    if (typeof current !== 'object' || current === null) return current;
    return Object.fromEntries(Object.entries(current).map(([key, item]) => [strip(key) as string, strip(item)]));
  };
  return strip(value) as T;
}
