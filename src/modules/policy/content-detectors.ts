import { HIDDEN_CHARACTERS } from '../../lib/hidden-characters.js';
import { isValidIBAN } from 'ibantools';

/**
 * What policy conditions learn of a call's content (`secrets(x)`, `pii(x)`, `hidden_text(x)`) and
 * what `redact` policies replace, as pure functions over text. Every scanner is linear in its
 * input: a scan moves forward through the text and never looks at a character again except
 * within a bounded window (a candidate is at most a few hundred characters, and the scan resumes
 * after it). A hostile string cannot make a detector slower than reading it, so the evaluation
 * budget can charge them by the character (docs/decisions/0085-content-detectors.md).
 *
 * The formats follow the issuers' published shapes; checksums are checked where a format has one
 * (Luhn and the networks' prefixes for cards, ISO 13616 for IBANs through `ibantools`), so that
 * an order number is not a card. Phone numbers have no checksum; they are recognised by how they
 * are written (an international `+` form, or a North American number with its separators).
 */

export const SECRET_KINDS = [
  'private_key',
  'aws_access_key',
  'github_token',
  'slack_token',
  'stripe_key',
  'google_api_key',
  'jwt',
  'generic_secret',
] as const;
export const PII_KINDS = ['email', 'phone', 'payment_card', 'iban', 'us_ssn'] as const;
export const HIDDEN_TEXT_KINDS = ['tag_characters', 'bidi_controls', 'zero_width'] as const;

export type SecretKind = (typeof SECRET_KINDS)[number];
export type PiiKind = (typeof PII_KINDS)[number];
export type HiddenTextKind = (typeof HIDDEN_TEXT_KINDS)[number];
export type ContentKind = SecretKind | PiiKind | HiddenTextKind;

export const DETECTORS = ['secrets', 'pii', 'hidden_text'] as const;
export type Detector = (typeof DETECTORS)[number];

/** A match in one string: its kind and the half-open range of UTF-16 code units it covers. */
export interface Finding {
  kind: ContentKind;
  start: number;
  end: number;
}

type Found = (kind: ContentKind, start: number, end: number) => void;

// ---------------------------------------------------------------------------------------------
// Secrets

/**
 * The prefixes of the token formats with a fixed shape. One alternation, scanned once: at each
 * position it tries a handful of fixed strings. After a hit the scan resumes past the token's
 * characters, so a run of repeated prefixes ("eyJeyJeyJ…") is read once, not once per prefix.
 */
const tokenPrefixes =
  /-----BEGIN |AKIA|ASIA|ABIA|ACCA|gh[pousr]_|github_pat_|xox[abposr]-|[rs]k_(?:live|test)_|AIza|eyJ/g;

const isAlnum = (code: number) =>
  (code >= 48 && code <= 57) || (code >= 65 && code <= 90) || (code >= 97 && code <= 122);
const isUpperOrDigit = (code: number) => (code >= 48 && code <= 57) || (code >= 65 && code <= 90);
const isBase64Url = (code: number) => isAlnum(code) || code === 45 || code === 95;
const isTokenChar = (code: number) => isBase64Url(code);

/** The end of the run of characters `accepts` from `from`, read at most `limit` characters far. */
function runEnd(text: string, from: number, accepts: (code: number) => boolean, limit = 4096): number {
  const stop = Math.min(text.length, from + limit);
  let at = from;
  while (at < stop && accepts(text.charCodeAt(at))) at++;
  return at;
}

/** Whether a token may start at `at`: not in the middle of a longer word of token characters. */
const startsToken = (text: string, at: number) => at === 0 || !isTokenChar(text.charCodeAt(at - 1));

const PEM_END = '-----END ';
const PRIVATE_KEY_LABEL = /^-----BEGIN (?:[A-Z0-9]+ ){0,3}PRIVATE KEY-----/;

/** A PEM private key block: from BEGIN to the end of its END line (or the text's end when cut off). */
function privateKeyEnd(text: string, at: number): number {
  if (!PRIVATE_KEY_LABEL.test(text.slice(at, at + 64))) return -1;
  const end = text.indexOf(PEM_END, at + 11);
  if (end < 0) return text.length;
  const close = text.indexOf('-----', end + PEM_END.length);
  return close < 0 ? text.length : close + 5;
}

/** A JWT: three base64url parts, the first a JSON header with `alg`. */
function jwtEnd(text: string, at: number): number {
  const header = runEnd(text, at, isBase64Url);
  if (text.charCodeAt(header) !== 46) return -header - 1;
  const payload = runEnd(text, header + 1, isBase64Url);
  if (payload - header < 4 || text.charCodeAt(payload) !== 46) return -payload - 1;
  const signature = runEnd(text, payload + 1, isBase64Url);
  try {
    const decoded = JSON.parse(Buffer.from(text.slice(at, header), 'base64url').toString('utf8')) as unknown;
    if (typeof decoded !== 'object' || decoded === null || !('alg' in decoded)) return -signature - 1;
  } catch {
    return -signature - 1;
  }
  return signature;
}

/**
 * Where the token starting at `at` with `prefix` ends when it has its format's shape, else minus
 * one minus where the scan may resume (past what was read).
 */
function tokenEnd(text: string, at: number, prefix: string): { kind: SecretKind; end: number } {
  const after = at + prefix.length;
  const fixed = (kind: SecretKind, accepts: (code: number) => boolean, min: number, max: number) => {
    const end = runEnd(text, after, accepts, max + 1);
    const length = end - after;
    return { kind, end: length >= min && length <= max && !isTokenChar(text.charCodeAt(end)) ? end : -end - 1 };
  };
  switch (prefix[0]) {
    case '-':
      return { kind: 'private_key', end: privateKeyEnd(text, at) };
    case 'A':
      if (prefix === 'AIza') return fixed('google_api_key', isBase64Url, 35, 35);
      return fixed('aws_access_key', isUpperOrDigit, 16, 16);
    case 'g':
      return prefix === 'github_pat_'
        ? fixed('github_token', isBase64Url, 60, 255)
        : fixed('github_token', isAlnum, 36, 255);
    case 'x':
      return fixed('slack_token', (code) => isAlnum(code) || code === 45, 10, 255);
    case 'e':
      return { kind: 'jwt', end: jwtEnd(text, at) };
    default:
      return fixed('stripe_key', isAlnum, 10, 247);
  }
}

function scanTokens(text: string, found: Found): void {
  tokenPrefixes.lastIndex = 0;
  for (let match = tokenPrefixes.exec(text); match; match = tokenPrefixes.exec(text)) {
    const at = match.index;
    const prefix = match[0];
    if (prefix[0] !== '-' && !startsToken(text, at)) {
      // Inside a longer word: skip the word, whatever it holds.
      tokenPrefixes.lastIndex = runEnd(text, at, isTokenChar, text.length);
      continue;
    }
    const { kind, end } = tokenEnd(text, at, prefix);
    if (end >= 0) found(kind, at, end);
    tokenPrefixes.lastIndex = Math.max(end >= 0 ? end : -end - 1, at + 1);
  }
}

/** Words that name a credential when they make up a field's name or an assignment's left side. */
const credentialWords = new Set([
  'password',
  'passwd',
  'passphrase',
  'pwd',
  'secret',
  'token',
  'apikey',
  'credential',
  'credentials',
  'privatekey',
  'accesskey',
  'secretkey',
  'clientsecret',
  'authorization',
]);

/** Whether a field name names a credential: "password", "api_key", "clientSecret", "X-Auth-Token". */
export function isCredentialName(name: string): boolean {
  if (name.length > 64) return false;
  const words = name
    .replace(/([a-z0-9])([A-Z])/g, '$1 $2')
    .toLowerCase()
    .split(/[^a-z0-9]+/)
    .filter(Boolean);
  if (words.some((word) => credentialWords.has(word))) return true;
  // Two words that name one: api key, access key, private key, client secret.
  return words.some((word, i) => credentialWords.has(word + (words[i + 1] ?? '')));
}

/**
 * Whether a value looks like a secret rather than a placeholder: at least 8 characters without
 * spaces, and at least 3 bits of Shannon entropy per character ("changeme" and "xxxxxxxx" are
 * not; "P@ssw0rd!" and a random key are).
 */
export function isHighEntropy(value: string): boolean {
  if (value.length < 8 || value.length > 1024 || /\s/.test(value)) return false;
  if (/^(?:\$\{[^}]*\}|\{\{[^}]*\}\}|<[^>]*>|\*+)$/.test(value)) return false;
  const counts = new Map<string, number>();
  for (const char of value) counts.set(char, (counts.get(char) ?? 0) + 1);
  let bits = 0;
  for (const count of counts.values()) {
    const p = count / value.length;
    bits -= p * Math.log2(p);
  }
  return bits >= 3;
}

/**
 * `password=…`, `api_key: "…"`, `"token": "…"` inside text. Every quantifier is bounded, and after
 * a match the scan resumes past it, so the scan is linear.
 */
const assignment =
  /(?<![A-Za-z0-9_-])([A-Za-z][A-Za-z0-9_-]{1,40})["']?[ \t]{0,3}[:=][ \t]{0,3}(?:Bearer[ \t]{1,3})?["']?([^\s"',;&]{8,256})/g;

function scanAssignments(text: string, found: Found): void {
  assignment.lastIndex = 0;
  for (let match = assignment.exec(text); match; match = assignment.exec(text)) {
    const [whole, name, value] = match;
    if (isCredentialName(name) && isHighEntropy(value)) {
      const start = match.index + whole.length - value.length;
      found('generic_secret', start, start + value.length);
    }
  }
}

/** Secrets in one string; `field` is the name it is the value of, when it is a map's value. */
export function scanSecrets(text: string, field: string | null, found: Found): void {
  let any = false;
  const noted: Found = (kind, start, end) => {
    any = true;
    found(kind, start, end);
  };
  scanTokens(text, noted);
  scanAssignments(text, noted);
  // A whole value under a credential's name, when nothing more specific was found in it.
  if (!any && field !== null && isCredentialName(field) && isHighEntropy(text)) found('generic_secret', 0, text.length);
}

// ---------------------------------------------------------------------------------------------
// Personal data

const isEmailLocal = (code: number) =>
  isAlnum(code) || code === 46 || code === 95 || code === 37 || code === 43 || code === 45;
const isEmailDomain = (code: number) => isAlnum(code) || code === 46 || code === 45;

/** Emails: a local part of up to 64 characters, `@`, a domain with a dot and a top-level name of letters. */
function scanEmails(text: string, found: Found): void {
  let at = text.indexOf('@');
  while (at >= 0) {
    let start = at;
    const floor = Math.max(0, at - 64);
    while (start > floor && isEmailLocal(text.charCodeAt(start - 1))) start--;
    while (start < at && text.charCodeAt(start) === 46) start++;
    let end = runEnd(text, at + 1, isEmailDomain, 255);
    while (end > at + 1 && (text.charCodeAt(end - 1) === 46 || text.charCodeAt(end - 1) === 45)) end--;
    const domain = text.slice(at + 1, end);
    const dot = domain.lastIndexOf('.');
    if (start < at && dot > 0 && /^[A-Za-z]{2,24}$/.test(domain.slice(dot + 1)) && !domain.includes('..')) {
      found('email', start, end);
      at = text.indexOf('@', end);
    } else {
      at = text.indexOf('@', at + 1);
    }
  }
}

/**
 * Runs of digits with the separators numbers are written with: spaces, dashes, dots, parentheses,
 * a leading `+`. Each separator single, the run at most 40 characters; the scan resumes after it.
 */
const numberRun = /\+?\(?\d(?:[ .-]?\(?\d\)?){6,29}/g;

/** The Luhn check digit test. */
export function luhnValid(digits: string): boolean {
  let sum = 0;
  for (let i = 0; i < digits.length; i++) {
    let digit = digits.charCodeAt(digits.length - 1 - i) - 48;
    if (i % 2 === 1) {
      digit *= 2;
      if (digit > 9) digit -= 9;
    }
    sum += digit;
  }
  return sum % 10 === 0;
}

/** The issuer prefixes and lengths of the card networks (Visa, Mastercard, Amex, Discover, Diners, JCB, UnionPay). */
function isCardNumber(digits: string): boolean {
  const n = digits.length;
  if (n < 13 || n > 19 || !luhnValid(digits)) return false;
  const two = Number(digits.slice(0, 2));
  const four = Number(digits.slice(0, 4));
  if (digits[0] === '4') return n === 13 || n === 16 || n === 19;
  if ((two >= 51 && two <= 55) || (four >= 2221 && four <= 2720)) return n === 16;
  if (two === 34 || two === 37) return n === 15;
  if (two === 36 || two === 38 || two === 30) return n === 14 || n === 16;
  if (four === 6011 || two === 65 || (four >= 6440 && four <= 6499) || two === 62) return n >= 16;
  if (four >= 3528 && four <= 3589) return n >= 16;
  return false;
}

/** 123-45-6789: an area not 000, 666 or 9xx, a group not 00, a serial not 0000. */
const ssnShape = /^(\d{3})([- ])(\d{2})\2(\d{4})$/;
function isSsn(run: string): boolean {
  const parts = ssnShape.exec(run);
  if (!parts) return false;
  const [, area, , group, serial] = parts;
  return area !== '000' && area !== '666' && area[0] !== '9' && group !== '00' && serial !== '0000';
}

/** (415) 555-0132, 415-555-0132, 415.555.0132, 1 415 555 0132: a North American number with separators. */
const nanpShape = /^(?:\+?1[ .-]?)?(?:\(\d{3}\) ?|\d{3}[ .-])\d{3}[ .-]\d{4}$/;

/** A North American area code or exchange: it starts with 2–9. */
const nanpPart = /^(?:\+?1[ .-]?)?\(?([2-9])\d{2}\)?[ .-]?([2-9])/;

/** E.164: `+`, a country code that does not start with 0, 8 to 15 digits in all. */
function isPhone(run: string, digits: string): boolean {
  if (run.startsWith('+')) return digits.length >= 8 && digits.length <= 15 && digits[0] !== '0';
  return nanpShape.test(run) && nanpPart.test(run);
}

function scanNumbers(text: string, found: Found): void {
  numberRun.lastIndex = 0;
  for (let match = numberRun.exec(text); match; match = numberRun.exec(text)) {
    let run = match[0];
    let start = match.index;
    // Part of a longer word or number (an id, a hash): not a number of its own.
    const before = start > 0 ? text.charCodeAt(start - 1) : 32;
    const after = text.charCodeAt(start + run.length);
    if (isAlnum(before) || (before === 46 && isAlnum(text.charCodeAt(start - 2))) || isAlnum(after)) continue;
    if (run.endsWith(')') && !run.includes('(')) run = run.slice(0, -1);
    if (run.startsWith('(') && !run.includes(')')) {
      run = run.slice(1);
      start++;
    }
    const digits = run.replace(/\D/g, '');
    const end = start + run.length;
    if (/^[\d -]+$/.test(run) && isCardNumber(digits)) found('payment_card', start, end);
    else if (isSsn(run)) found('us_ssn', start, end);
    else if (isPhone(run, digits)) found('phone', start, end);
  }
}

/** IBANs, electronic (DE89370400440532013000) or printed in groups of four (DE89 3704 0044 …). */
const ibanRun = /[A-Z]{2}\d{2}(?: ?[A-Z0-9]{1,4}){3,8}/g;

function scanIbans(text: string, found: Found): void {
  ibanRun.lastIndex = 0;
  for (let match = ibanRun.exec(text); match; match = ibanRun.exec(text)) {
    const start = match.index;
    if (start > 0 && isAlnum(text.charCodeAt(start - 1))) continue;
    // The run may take in a following word in capitals; the longest prefix that is an IBAN counts.
    const groups = match[0].split(' ');
    for (let count = groups.length; count >= 1; count--) {
      const candidate = groups.slice(0, count).join(' ');
      const end = start + candidate.length;
      if (!isAlnum(text.charCodeAt(end)) && isValidIBAN(candidate.replace(/ /g, ''))) {
        found('iban', start, end);
        ibanRun.lastIndex = end;
        break;
      }
      if (count === 1) break;
    }
  }
}

export function scanPii(text: string, found: Found): void {
  scanEmails(text, found);
  scanIbans(text, found);
  scanNumbers(text, found);
}

// ---------------------------------------------------------------------------------------------
// Hidden text

const hiddenCharacters = new RegExp(HIDDEN_CHARACTERS.source, 'g');
const pictographic = /\p{Extended_Pictographic}/u;
const isBidiControl = (code: number) =>
  (code >= 0x202a && code <= 0x202e) ||
  (code >= 0x2066 && code <= 0x2069) ||
  code === 0x200e ||
  code === 0x200f ||
  code === 0x061c;

/** The character before `at` (a surrogate pair read whole). */
const charBefore = (text: string, at: number) => {
  const code = text.charCodeAt(at - 1);
  return code >= 0xdc00 && code <= 0xdfff && at >= 2 ? text.slice(at - 2, at) : text.slice(at - 1, at);
};
const charAt = (text: string, at: number) => String.fromCodePoint(text.codePointAt(at) ?? 32);

/**
 * Characters a reader does not see and a model reads: Unicode tag characters (U+E0000–E007F),
 * the bidirectional controls, and the zero-width ones. A zero-width joiner between two emoji
 * (a family, a flag sequence) is how those are written, and is not hidden text.
 */
export function scanHiddenText(text: string, found: Found): void {
  // A run of hidden characters of one kind is one finding (a smuggled instruction is a run of tags).
  let run: Finding | null = null;
  const add = (kind: HiddenTextKind, start: number, end: number) => {
    if (run && run.kind === kind && run.end === start) run.end = end;
    else {
      if (run) found(run.kind, run.start, run.end);
      run = { kind, start, end };
    }
  };
  hiddenCharacters.lastIndex = 0;
  for (let match = hiddenCharacters.exec(text); match; match = hiddenCharacters.exec(text)) {
    const at = match.index;
    const code = match[0].charCodeAt(0);
    if (match[0].length === 2) add('tag_characters', at, at + 2);
    else if (code === 0x200d && pictographic.test(charBefore(text, at)) && pictographic.test(charAt(text, at + 1)))
      continue;
    else add(isBidiControl(code) ? 'bidi_controls' : 'zero_width', at, at + 1);
  }
  const last = run as Finding | null;
  if (last) found(last.kind, last.start, last.end);
}

// ---------------------------------------------------------------------------------------------
// Values

/** Findings in order of their start, those that overlap merged into the first (the longest of those that start together). */
function merged(findings: Finding[]): Finding[] {
  findings.sort((a, b) => a.start - b.start || b.end - a.end);
  const out: Finding[] = [];
  for (const finding of findings) {
    const last = out[out.length - 1];
    if (last && finding.start < last.end) last.end = Math.max(last.end, finding.end);
    else out.push({ ...finding });
  }
  return out;
}

/** Every finding of `detector` in one string, in order, overlapping ones merged. */
export function findingsIn(detector: Detector, text: string, field: string | null = null): Finding[] {
  const findings: Finding[] = [];
  const found: Found = (kind, start, end) => findings.push({ kind, start, end });
  if (detector === 'secrets') scanSecrets(text, field, found);
  else if (detector === 'pii') scanPii(text, found);
  else scanHiddenText(text, found);
  return merged(findings);
}

/** Each string of a JSON value (map keys too), with the name of the field it is the value of. */
function eachString(value: unknown, visit: (text: string, field: string | null) => void): void {
  const stack: { value: unknown; field: string | null }[] = [{ value, field: null }];
  while (stack.length) {
    const { value: current, field } = stack.pop()!;
    if (typeof current === 'string') visit(current, field);
    else if (Array.isArray(current)) for (const item of current) stack.push({ value: item, field });
    else if (typeof current === 'object' && current !== null) {
      for (const [key, item] of Object.entries(current)) {
        visit(key, null);
        stack.push({ value: item, field: key });
      }
    }
  }
}

/** The kinds `detector` finds anywhere in a value, sorted: what `secrets(x)`, `pii(x)` and `hidden_text(x)` return. */
export function kindsIn(detector: Detector, value: unknown): ContentKind[] {
  const kinds = new Set<ContentKind>();
  eachString(value, (text, field) => {
    for (const { kind } of findingsIn(detector, text, field)) kinds.add(kind);
  });
  return [...kinds].sort();
}

/**
 * `kindsIn` scanned once per object and detector: several policies of a request that ask about
 * the same params share one scan (docs/decisions/0086-policy-history-and-labels.md). Keyed by the
 * object itself, which lives as long as its request; strings are scanned each time.
 */
const scans = new WeakMap<object, Map<Detector, ContentKind[]>>();

export function scannedKindsIn(detector: Detector, value: unknown): ContentKind[] {
  if (typeof value !== 'object' || value === null) return kindsIn(detector, value);
  let byDetector = scans.get(value);
  if (!byDetector) scans.set(value, (byDetector = new Map()));
  let kinds = byDetector.get(detector);
  if (!kinds) byDetector.set(detector, (kinds = kindsIn(detector, value)));
  return kinds;
}

/** Whether `scannedKindsIn` already holds this object's scan: a second call costs nothing to scan. */
export const alreadyScanned = (detector: Detector, value: unknown): boolean =>
  typeof value === 'object' && value !== null && scans.get(value)?.has(detector) === true;

/** Replaces each finding in one string with `[REDACTED:<kind>]`, counting them. */
function redactText(
  text: string,
  field: string | null,
  detectors: readonly Detector[],
  counts: Map<ContentKind, number>,
): string {
  // Several detectors' findings may overlap: merged, each stretch of text is replaced once, whole.
  const findings = merged(detectors.flatMap((detector) => findingsIn(detector, text, field)));
  if (!findings.length) return text;
  let out = '';
  let at = 0;
  for (const { kind, start, end } of findings) {
    out += `${text.slice(at, start)}[REDACTED:${kind}]`;
    counts.set(kind, (counts.get(kind) ?? 0) + 1);
    at = end;
  }
  return out + text.slice(at);
}

export interface Redacted<T> {
  value: T;
  /** How many matches of each kind were replaced, by kind name. */
  redactions: { kind: ContentKind; count: number }[];
}

/**
 * A copy of a JSON value with the matches of `detectors` replaced in every string (map keys too).
 * Recursive: params and tool results reach it no deeper than MAX_JSON_DEPTH (the edge and the
 * connectors refuse deeper ones).
 */
export function redact<T>(value: T, detectors: readonly Detector[]): Redacted<T> {
  const counts = new Map<ContentKind, number>();
  const copy = (current: unknown, field: string | null): unknown => {
    if (typeof current === 'string') return redactText(current, field, detectors, counts);
    if (Array.isArray(current)) return current.map((item) => copy(item, field));
    if (typeof current !== 'object' || current === null) return current;
    const out: Record<string, unknown> = {};
    for (const [key, item] of Object.entries(current)) out[redactText(key, null, detectors, counts)] = copy(item, key);
    return out;
  };
  const redacted = copy(value, null) as T;
  const redactions = [...counts].sort(([a], [b]) => (a < b ? -1 : 1)).map(([kind, count]) => ({ kind, count }));
  return { value: redacted, redactions };
}
