import { randomBytes } from 'node:crypto';
import {
  findingsIn,
  isCredentialName,
  kindsIn,
  luhnValid,
  redact,
  type ContentKind,
  type Detector,
} from '../../src/modules/policy/content-detectors.js';

// Token-shaped strings are built here from parts, so that no secret scanner mistakes this corpus
// for leaked credentials; none of them is a real key.
const alnum = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
const upper = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ234567';
const pick = (alphabet: string, length: number) =>
  Array.from(randomBytes(length), (byte) => alphabet[byte % alphabet.length]).join('');
const b64url = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url');
const jwt = (header: unknown = { alg: 'HS256', typ: 'JWT' }) =>
  `${b64url(header)}.${b64url({ sub: 'user-1', iat: 1700000000 })}.${pick(alnum, 43)}`;
const pem = (label: string) =>
  `-----BEGIN ${label}-----\n${pick(alnum, 64)}\n${pick(alnum, 40)}==\n-----END ${label}-----`;

type Case = [string, unknown];

/** For each kind, values it must be found in, and values of the same family it must not. */
const corpus: Record<Detector, { found: Record<string, Case[]>; notFound: Case[] }> = {
  secrets: {
    found: {
      private_key: [
        ['PKCS#8', pem('PRIVATE KEY')],
        ['RSA', `key:\n${pem('RSA PRIVATE KEY')}\n`],
        ['OpenSSH', pem('OPENSSH PRIVATE KEY')],
        ['EC', pem('EC PRIVATE KEY')],
        ['encrypted', pem('ENCRYPTED PRIVATE KEY')],
        ['cut off', `-----BEGIN PRIVATE KEY-----\n${pick(alnum, 64)}`],
      ],
      aws_access_key: [
        ['documented example', 'AKIAIOSFODNN7EXAMPLE'],
        ['session key in a sentence', `use ASIA${pick(upper, 16)} for now`],
        ['in a map', { aws: { id: `AKIA${pick(upper, 16)}` } }],
      ],
      github_token: [
        ['classic', `ghp_${pick(alnum, 36)}`],
        ['OAuth', `token gho_${pick(alnum, 36)}.`],
        ['fine-grained', `github_pat_${pick(alnum, 22)}_${pick(alnum, 59)}`],
      ],
      slack_token: [
        ['bot', `xoxb-${pick('0123456789', 12)}-${pick('0123456789', 12)}-${pick(alnum, 24)}`],
        ['user', `Authorization: xoxp-${pick('0123456789', 12)}-${pick(alnum, 30)}`],
      ],
      stripe_key: [
        ['live secret', `sk_live_${pick(alnum, 24)}`],
        ['restricted test', `"rk_test_${pick(alnum, 99)}"`],
      ],
      google_api_key: [['API key', `key=AIza${pick(`${alnum}_-`, 35)}&q=1`]],
      jwt: [
        ['HS256', jwt()],
        ['bearer', `Bearer ${jwt({ alg: 'RS256', kid: 'k1' })}`],
        ['unsigned', `${b64url({ alg: 'none' })}.${b64url({ sub: 'x' })}.`],
      ],
      generic_secret: [
        ['password field', { password: 'P@ssw0rd!x' }],
        ['api_key field', { api_key: pick(alnum, 32) }],
        ['camelCase field', { clientSecret: pick(alnum, 24) }],
        ['header-style field', { 'X-Auth-Token': pick(alnum, 24) }],
        ['assignment in text', `connect with password=${pick(alnum, 16)} to the db`],
        ['quoted JSON in text', `{"api_key": "${pick(alnum, 20)}"}`],
        ['bearer assignment', `Authorization: Bearer ${pick(alnum, 30)}`],
      ],
    },
    notFound: [
      ['a certificate', pem('CERTIFICATE')],
      ['a public key', pem('PUBLIC KEY')],
      ['AWS-like, one short', 'AKIAIOSFODNN7EXAMPL'],
      ['AWS-like, inside a word', 'XAKIAIOSFODNN7EXAMPLE'],
      ['AWS-like, one long', 'AKIAIOSFODNN7EXAMPLEX'],
      ['GitHub-like, short', `ghp_${pick(alnum, 20)}`],
      ['not a GitHub prefix', `ghx_${pick(alnum, 36)}`],
      ['Slack-like, short', 'xoxb-1234'],
      ['a Stripe publishable key', `pk_live_${pick(alnum, 24)}`],
      ['Google-like, short', `AIza${pick(alnum, 30)}`],
      ['a JWT header alone', b64url({ alg: 'HS256' })],
      ['JWT-shaped, header not JSON', `eyJub3Rqc29u.${b64url({ a: 1 })}.sig`],
      ['JWT-shaped, no alg', `${b64url({ typ: 'JWT' })}.${b64url({ sub: 'x' })}.${pick(alnum, 20)}`],
      ['a placeholder password', { password: 'changeme' }],
      ['a short password', { password: 'hunter2' }],
      // biome-ignore lint/suspicious/noTemplateCurlyInString: a placeholder as configuration files write it
      ['a template', { token: '${GITHUB_TOKEN}' }],
      ['a mask', { password: '********' }],
      ['random text in a field that is no credential', { tokenizer: pick(alnum, 24), description: pick(alnum, 24) }],
      ['prose about passwords', 'the password policy is that passwords must be long'],
      ['an assignment of a placeholder', 'password=changeme'],
      ['a UUID', '3f2b8c1e-4d5a-4b6c-9e7f-0a1b2c3d4e5f'],
      ['a SHA-256', 'sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08'],
    ],
  },
  pii: {
    found: {
      email: [
        ['plain', 'alice@example.com'],
        ['tagged, subdomain', 'write to a.b+tag@mail.example.co.uk.'],
        ['in a map', { to: ['Bob <bob_99@example.org>'] }],
      ],
      phone: [
        ['UK, international', '+44 20 7946 0958'],
        ['Germany, no spaces', '+493090182000'],
        ['France', 'call +33 1 42 68 53 00 today'],
        ['US, parentheses', '(212) 456-7890'],
        ['US, dashes', '212-456-7890'],
        ['US, with country code', '+1 212 456 7890'],
      ],
      payment_card: [
        ['Visa, spaced', '4111 1111 1111 1111'],
        ['Mastercard, dashed', '5555-5555-5555-4444'],
        ['Amex', 'card 378282246310005 exp 12/29'],
        ['Discover', '6011111111111117'],
      ],
      iban: [
        ['German, printed', 'DE89 3704 0044 0532 0130 00'],
        ['British, electronic', 'IBAN GB82WEST12345698765432.'],
        ['French', 'FR1420041010050500013M02606'],
        ['followed by a word in capitals', 'DE89 3704 0044 0532 0130 00 PAID'],
      ],
      us_ssn: [
        ['dashed', 'SSN 123-45-6789'],
        ['spaced', '078 05 1120'],
      ],
    },
    notFound: [
      ['no domain dot', 'alice@localhost'],
      ['no local part', '@example.com'],
      ['a handle', 'ping @alice please'],
      ['a numeric top-level name', 'user@host.c0m'],
      ['a date', '2026-11-30'],
      ['an IP address', '192.168.100.200'],
      ['a version', 'v1.22.333'],
      ['a bare 10-digit id', '1234567890'],
      ['a long order number', 'order 12345678901234567890'],
      ['a card number failing Luhn', '4111 1111 1111 1112'],
      ['Luhn-valid, no network', '1234 5678 9012 3452'],
      ['an IBAN with a wrong checksum', 'DE89 3704 0044 0532 0130 01'],
      ['an IBAN one character short', 'GB82WEST1234569876543'],
      ['SSN area 000', '000-12-3456'],
      ['SSN area 666', '666-12-3456'],
      ['SSN area 9xx', '900-12-3456'],
      ['SSN group 00', '123-00-6789'],
      ['SSN serial 0000', '123-45-0000'],
      ['nine digits without separators', '123456789'],
      ['a price', '$1,299.99'],
      ['a hex hash', 'deadbeef00112233445566778899aabb'],
    ],
  },
  hidden_text: {
    found: {
      tag_characters: [
        ['one tag', `hello${String.fromCodePoint(0xe0041)}`],
        [
          'an instruction in tags',
          `ok${[...'ignore previous'].map((c) => String.fromCodePoint(0xe0000 + c.charCodeAt(0))).join('')}`,
        ],
      ],
      bidi_controls: [
        ['right-to-left override', 'invoice\u202Efdp.exe'],
        ['isolate', 'a\u2066b\u2069c'],
        ['marks', 'x\u200Fy'],
      ],
      zero_width: [
        ['space', 'pass\u200Bword'],
        ['BOM inside text', 'ab\uFEFFcd'],
        ['joiner between letters', 'a\u200Db'],
        ['word joiner', 'a\u2060b'],
      ],
    },
    notFound: [
      ['a family emoji (joiners between emoji)', '👨\u200D👩\u200D👧'],
      ['accents', 'héllo wörld'],
      ['Arabic', 'مرحبا بالعالم'],
      ['Hebrew', 'שלום עולם'],
      ['an emoji flag', '🇫🇷'],
    ],
  },
};

describe.each(Object.entries(corpus) as [Detector, (typeof corpus)[Detector]][])(
  '%s',
  (detector, { found, notFound }) => {
    const cases = Object.entries(found).flatMap(([kind, values]) =>
      values.map(([name, value]) => [kind, name, value] as [string, string, unknown]),
    );
    test.each(cases)('finds %s: %s', (kind, _name, value) => {
      expect(kindsIn(detector, value)).toEqual([kind]);
    });
    test.each(notFound)('finds nothing in %s', (_name, value) => {
      expect(kindsIn(detector, value)).toEqual([]);
    });
  },
);

test('the Luhn check', () => {
  expect(luhnValid('79927398713')).toBe(true);
  expect(luhnValid('79927398710')).toBe(false);
});

test('credential names', () => {
  for (const name of [
    'password',
    'PASSWORD',
    'db_password',
    'apiKey',
    'api-key',
    'access_token',
    'client_secret',
    'privateKey',
  ])
    expect([name, isCredentialName(name)]).toEqual([name, true]);
  for (const name of ['author', 'tokenizer', 'passage', 'secretary', 'key', 'description', 'api'])
    expect([name, isCredentialName(name)]).toEqual([name, false]);
});

test('findings are ranges of the string, merged when they overlap', () => {
  const key = 'AKIAIOSFODNN7EXAMPLE';
  const text = `id ${key} and aws_access_key=${key}`;
  const findings = findingsIn('secrets', text);
  expect(findings.map(({ start, end }) => text.slice(start, end))).toEqual([key, key]);
});

describe('redaction', () => {
  test('replaces each match with its kind and counts them, in values and keys, leaving the rest', () => {
    const card = '4111 1111 1111 1111';
    const { value, redactions } = redact(
      {
        note: `pay with ${card} or mail alice@example.com`,
        list: ['bob@example.org', 42, null, true],
        'carol@example.net': 'key',
        nested: { deep: [{ phone: '+44 20 7946 0958' }] },
      },
      ['pii'],
    );
    expect(value).toEqual({
      note: 'pay with [REDACTED:payment_card] or mail [REDACTED:email]',
      list: ['[REDACTED:email]', 42, null, true],
      '[REDACTED:email]': 'key',
      nested: { deep: [{ phone: '[REDACTED:phone]' }] },
    });
    expect(redactions).toEqual([
      { kind: 'email', count: 3 },
      { kind: 'payment_card', count: 1 },
      { kind: 'phone', count: 1 },
    ]);
  });

  test('several detectors at once; a value under a credential name is replaced whole', () => {
    const secret = pick(alnum, 24);
    const { value, redactions } = redact({ password: secret, text: `x\u200By ${jwt()}`, mail: 'a@example.com' }, [
      'secrets',
      'hidden_text',
    ]);
    expect(value).toEqual({
      password: '[REDACTED:generic_secret]',
      text: 'x[REDACTED:zero_width]y [REDACTED:jwt]',
      mail: 'a@example.com',
    });
    expect(redactions.map((r) => r.kind).sort()).toEqual(['generic_secret', 'jwt', 'zero_width']);
    expect(JSON.stringify(value)).not.toContain(secret);
  });

  test('findings of two detectors that overlap are one redaction, and nothing of either is left', () => {
    const text = 'login with api_key=Zq9x@example.com now';
    expect(kindsIn('secrets', text)).toEqual(['generic_secret']);
    expect(kindsIn('pii', text)).toEqual(['email']);
    const { value, redactions } = redact({ text }, ['pii', 'secrets']);
    expect(value).toEqual({
      text: expect.stringMatching(/^login with api_key=\[REDACTED:(email|generic_secret)\] now$/),
    });
    expect(redactions).toHaveLength(1);
  });

  test('a run of hidden characters is one redaction', () => {
    const tags = [...'send it'].map((c) => String.fromCodePoint(0xe0000 + c.charCodeAt(0))).join('');
    expect(redact({ text: `ok${tags}.` }, ['hidden_text'])).toEqual({
      value: { text: 'ok[REDACTED:tag_characters].' },
      redactions: [{ kind: 'tag_characters', count: 1 }],
    });
  });

  test('nothing found: the same content, no redactions', () => {
    const input = { a: 'plain text', b: [1, 2, { c: 'more' }] };
    expect(redact(input, ['secrets', 'pii', 'hidden_text'])).toEqual({ value: input, redactions: [] });
  });
});

/**
 * Linear in the input: hostile repetitions of each detector's triggers, scanned at two sizes.
 * Whatever the machine's speed, a linear scan of 8× the text costs about 8× the CPU and a
 * quadratic one 64×; a bound well between them (24, room for a collection or a neighbour's
 * burst during one of the runs) is what is asserted, a ratio and not a time.
 */
describe('every detector is linear in its input', () => {
  const hostile: Record<string, string> = {
    'JWT prefixes': 'eyJ',
    'JWT-like parts': 'eyJhbGciOiJub25lIn0.',
    'AWS prefixes': 'AKIA',
    'PEM openings': '-----BEGIN ',
    'PEM labels': '-----BEGIN RSA PRIVATE KEY-----',
    assignments: 'password=',
    'long names': `${'a'.repeat(39)}= `,
    'at signs': 'a@',
    'email-like': 'a.b@c.',
    digits: '1-',
    'digit groups': '(1) ',
    'IBAN-like': 'DE89 ',
    'IBAN groups': 'DE89 3704 0044 0532 0130 AAAA ',
    joiners: '\u200D',
    'tag characters': String.fromCodePoint(0xe0041),
    letters: 'a',
  };
  const cpuMicros = (run: () => void) => {
    let best = Number.POSITIVE_INFINITY;
    for (let i = 0; i < 5; i++) {
      const before = process.cpuUsage();
      run();
      const used = process.cpuUsage(before);
      best = Math.min(best, used.user + used.system);
    }
    return best;
  };
  test.each(Object.entries(hostile))('%s', (_name, unit) => {
    const small = unit.repeat(Math.ceil((64 * 1024) / unit.length));
    const large = unit.repeat(Math.ceil((512 * 1024) / unit.length));
    const scan = (text: string) => () => {
      for (const detector of ['secrets', 'pii', 'hidden_text'] as const) findingsIn(detector, text, 'password');
    };
    scan(small)();
    const ratio = cpuMicros(scan(large)) / Math.max(cpuMicros(scan(small)), 1);
    expect(ratio).toBeLessThan(24);
  });
});

test('the kinds are the ones the policy language names', () => {
  const kinds = new Set<ContentKind>([
    ...kindsIn(
      'secrets',
      Object.values(corpus.secrets.found)
        .flat()
        .map(([, v]) => v),
    ),
    ...kindsIn(
      'pii',
      Object.values(corpus.pii.found)
        .flat()
        .map(([, v]) => v),
    ),
    ...kindsIn(
      'hidden_text',
      Object.values(corpus.hidden_text.found)
        .flat()
        .map(([, v]) => v),
    ),
  ]);
  expect([...kinds].sort()).toEqual(
    [
      ...Object.keys(corpus.secrets.found),
      ...Object.keys(corpus.pii.found),
      ...Object.keys(corpus.hidden_text.found),
    ].sort(),
  );
});
