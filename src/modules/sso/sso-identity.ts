import type { JWTPayload } from 'jose';
import { isStorableText } from '../../lib/storable-input.js';
import type { UserRole } from '../../authz/authz.js';

/**
 * What a verified ID token says about who signs in, and whether the org accepts them
 * (docs/decisions/0061-operator-single-sign-on.md). Pure: the signature, issuer, audience and
 * expiry were checked already (identity-provider.ts); these are the org's own rules.
 */

/** Why a sign-in is refused, as the console shows it (`/console/sso#error=<code>`). */
export type SsoRefusalCode =
  | 'access_denied'
  | 'invalid_request'
  | 'invalid_id_token'
  | 'email_not_verified'
  | 'domain_not_allowed'
  | 'email_taken'
  | 'provider_unavailable'
  | 'sso_not_configured';

export interface SsoRefusal {
  code: SsoRefusalCode;
  description: string;
}

export interface SsoIdentity {
  subject: string;
  email: string;
  /** The role a new user gets: the mapped one, or the org's default. */
  role: UserRole;
}

export interface IdentityRules {
  nonce: string;
  allowedDomains: readonly string[];
  defaultRole: UserRole;
  roleClaim: string | null;
  roleMap: Readonly<Record<string, UserRole>> | null;
}

/** Most privileged first: a user in two mapped groups gets the higher role. */
const roleRank: Record<UserRole, number> = { admin: 0, operator: 1, viewer: 2 };

/** The role `claims` map to: the most privileged role any value of the claim maps to, else the default. */
export function mappedRole(claims: JWTPayload, rules: Pick<IdentityRules, 'defaultRole' | 'roleClaim' | 'roleMap'>) {
  if (!rules.roleClaim || !rules.roleMap) return rules.defaultRole;
  const claim = claims[rules.roleClaim];
  const values = (Array.isArray(claim) ? claim : [claim]).filter((value): value is string => typeof value === 'string');
  const roles = values.flatMap((value) => (Object.hasOwn(rules.roleMap!, value) ? [rules.roleMap![value]] : []));
  return roles.sort((a, b) => roleRank[a] - roleRank[b])[0] ?? rules.defaultRole;
}

const emailPattern = /^[^\s@]+@([^\s@]+\.[^\s@]+)$/;

/** The identity the claims establish, or why the org refuses it. */
export function checkIdentity(claims: JWTPayload, rules: IdentityRules): SsoIdentity | SsoRefusal {
  // OpenID Connect Core 1.0 §3.1.3.7 step 11: the nonce sent in the request, echoed in the token.
  if (typeof claims.nonce !== 'string' || claims.nonce !== rules.nonce)
    return { code: 'invalid_id_token', description: 'The ID token does not carry the nonce of this sign-in' };
  // Recorded in the user row and the audit: what the database cannot store is refused here, not there.
  if (typeof claims.sub !== 'string' || claims.sub.length > 255 || !isStorableText(claims.sub))
    return { code: 'invalid_id_token', description: 'The ID token has no usable subject (sub)' };
  const email =
    typeof claims.email === 'string' && isStorableText(claims.email) ? claims.email.trim().toLowerCase() : '';
  const domain = emailPattern.exec(email)?.[1];
  if (!domain || email.length > 254)
    return {
      code: 'invalid_id_token',
      description: 'The ID token has no email address; the provider must release the email scope',
    };
  // Some providers send the boolean as a string (Amazon Cognito); anything else is unverified.
  if (claims.email_verified !== true && claims.email_verified !== 'true')
    return { code: 'email_not_verified', description: `The provider has not verified ${email}` };
  if (!rules.allowedDomains.includes(domain))
    return { code: 'domain_not_allowed', description: `Emails at ${domain} may not sign in to this organization` };
  return { subject: claims.sub, email, role: mappedRole(claims, rules) };
}

/** Whether an outcome of the sign-in is its refusal (every other outcome lacks a description). */
export const isRefusal = <T extends object>(outcome: T | SsoRefusal): outcome is SsoRefusal => 'description' in outcome;
