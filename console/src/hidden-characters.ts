/**
 * Characters a reader does not see and a model reads: the list of the service's
 * src/lib/hidden-characters.ts (docs/decisions/0088-hidden-text-in-upstream-definitions.md), here for
 * the browser, which builds without the service's sources; test/unit/hidden-characters.test.ts
 * holds the two lists equal.
 */
export const HIDDEN_CHARACTERS =
  /\udb40[\udc00-\udc7f]|[\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c]|[\u200b-\u200d\u2060\ufeff\u180e]/g;

const escaped = (unit: string) => `\\u${unit.charCodeAt(0).toString(16).padStart(4, '0')}`;

/** Each hidden character as its JSON escape, by UTF-16 code unit (`\u200b`, `\udb40\udc41`): visible, and the same JSON. */
export const escapeHiddenCharacters = (text: string): string =>
  text.replace(HIDDEN_CHARACTERS, (character) => character.split('').map(escaped).join(''));
