/**
 * The org's rules on a verified ID token (src/modules/sso/sso-identity.ts): nonce, email, its
 * verification, the allowed domains, and the role mapping.
 */
import { checkIdentity, isRefusal, mappedRole, type IdentityRules } from '../../src/modules/sso/sso-identity.js';

const rules: IdentityRules = {
  nonce: 'the-nonce',
  allowedDomains: ['example.com', 'corp.example'],
  defaultRole: 'viewer',
  roleClaim: 'groups',
  roleMap: { admins: 'admin', ops: 'operator', 'read-only': 'viewer' },
};
const claims = (extra: Record<string, unknown> = {}) => ({
  sub: 'u1',
  nonce: 'the-nonce',
  email: 'Ada@Example.com ',
  email_verified: true,
  ...extra,
});

test('a verified email at an allowed domain is accepted, lower-cased, with the mapped role', () => {
  expect(checkIdentity(claims({ groups: ['ops'] }), rules)).toEqual({
    subject: 'u1',
    email: 'ada@example.com',
    role: 'operator',
  });
  // Cognito sends the boolean as a string.
  expect(isRefusal(checkIdentity(claims({ email_verified: 'true' }), rules))).toBe(false);
});

test.each([
  ['another nonce', { nonce: 'other' }, 'invalid_id_token'],
  ['no nonce', { nonce: undefined }, 'invalid_id_token'],
  ['no email', { email: undefined }, 'invalid_id_token'],
  ['an email that is not one', { email: 'not-an-email' }, 'invalid_id_token'],
  ['an email the database cannot store', { email: 'a\u0000b@example.com' }, 'invalid_id_token'],
  ['a subject the database cannot store', { sub: 'u\u0000' }, 'invalid_id_token'],
  ['a subject over 255 characters', { sub: 'u'.repeat(256) }, 'invalid_id_token'],
  ['an unverified email', { email_verified: false }, 'email_not_verified'],
  ['email_verified missing', { email_verified: undefined }, 'email_not_verified'],
  ['email_verified "false"', { email_verified: 'false' }, 'email_not_verified'],
  ['a domain not allowed', { email: 'ada@evil.com' }, 'domain_not_allowed'],
  ['a subdomain of an allowed domain', { email: 'ada@sub.example.com' }, 'domain_not_allowed'],
  ['an allowed domain as a suffix', { email: 'ada@notexample.com' }, 'domain_not_allowed'],
])('%s is refused', (_, extra, code) => {
  const outcome = checkIdentity(claims(extra), rules);
  expect(isRefusal(outcome) && outcome.code).toBe(code);
});

test('roles: the most privileged mapped value wins; a string claim maps too; nothing mapped is the default', () => {
  expect(mappedRole({ groups: ['read-only', 'admins', 'ops'] }, rules)).toBe('admin');
  expect(mappedRole({ groups: 'ops' }, rules)).toBe('operator');
  expect(mappedRole({ groups: ['unknown', 42] }, rules)).toBe('viewer');
  expect(mappedRole({}, rules)).toBe('viewer');
  expect(mappedRole({ groups: ['admins'] }, { ...rules, roleClaim: null })).toBe('viewer');
  // A claim value named like an Object.prototype member maps to nothing.
  expect(mappedRole({ groups: ['constructor', '__proto__'] }, { ...rules, defaultRole: 'operator' })).toBe('operator');
});
