import { FieldErrors } from '../../errors.js';
import type { NetworkAccess, PrivateNetworks } from '../../lib/address-policy.js';
import { outboundUrlError } from '../../lib/outbound-http.js';
import { userRoles, type UserRole } from '../../authz/authz.js';

/**
 * An org's single sign-on configuration as an admin writes it (`PUT /api/v1/orgs/{org_id}/sso`),
 * checked field by field (docs/decisions/0061-operator-single-sign-on.md). Pure.
 */

export interface SsoSettingsInput {
  issuer: string;
  client_id: string;
  /** Write-only. Omitted (or "[redacted]") on a later PUT: the stored one is kept. */
  client_secret?: string | null;
  allowed_domains: readonly string[];
  default_role?: string | null;
  role_claim?: string | null;
  role_map?: unknown;
  scopes?: readonly string[] | null;
  enforce?: boolean | null;
  allow_private_network?: boolean | null;
}

/** The checked settings, the secret still in the clear (the service seals it). */
export interface SsoSettings {
  issuer: string;
  clientId: string;
  clientSecret: string | null;
  allowedDomains: string[];
  defaultRole: UserRole;
  roleClaim: string | null;
  roleMap: Record<string, UserRole> | null;
  scopes: string[];
  enforce: boolean;
  allowPrivateNetwork: boolean;
}

export const REDACTED_SECRET = '[redacted]';
export const DEFAULT_SCOPES = ['openid', 'email', 'profile'];
const MAX_DOMAINS = 50;
const MAX_ROLE_MAP_ENTRIES = 100;
const MAX_SCOPES = 20;
const domainPattern = /^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}$/;
/** RFC 6749 §3.3: a scope token is printable ASCII without space, quote or backslash. */
const scopePattern = /^[\x21\x23-\x5b\x5d-\x7e]{1,64}$/;
const printable = /^[\x21-\x7e]+$/;

function checkIssuer(errors: FieldErrors, issuer: string, access: NetworkAccess): string {
  const { allowPrivateNetwork } = access;
  const problem = outboundUrlError(issuer, access);
  if (problem) {
    errors.add('issuer', problem.message);
    return issuer;
  }
  const url = new URL(issuer);
  // OpenID Connect Discovery §3: the issuer is an https URL without query or fragment. Plain http
  // only where private networks are allowed (a provider on the premises, or a test).
  if (url.protocol !== 'https:' && !allowPrivateNetwork)
    errors.add('issuer', 'must be an https URL (http only with allow_private_network)');
  if (url.search || url.hash) errors.add('issuer', 'must not have a query or a fragment');
  return issuer;
}

function checkDomains(errors: FieldErrors, domains: readonly string[]): string[] {
  const normalized = [...new Set(domains.map((domain) => domain.trim().toLowerCase()))];
  if (normalized.length === 0)
    errors.add('allowed_domains', 'must list at least one email domain (e.g. "example.com")');
  if (normalized.length > MAX_DOMAINS) errors.add('allowed_domains', `must list at most ${MAX_DOMAINS} domains`);
  normalized.forEach((domain, i) => {
    if (!domainPattern.test(domain)) errors.add(`allowed_domains.${i}`, 'must be a domain name such as example.com');
  });
  return normalized;
}

function checkRoleMap(errors: FieldErrors, roleMap: unknown, roleClaim: string | null) {
  if (roleMap === null || roleMap === undefined) return null;
  if (typeof roleMap !== 'object' || Array.isArray(roleMap)) {
    errors.add('role_map', 'must be an object from claim values to roles');
    return null;
  }
  const entries = Object.entries(roleMap as Record<string, unknown>);
  if (!roleClaim) errors.add('role_map', 'needs role_claim: the claim whose values it maps');
  if (entries.length > MAX_ROLE_MAP_ENTRIES)
    errors.add('role_map', `must have at most ${MAX_ROLE_MAP_ENTRIES} entries`);
  for (const [value, role] of entries) {
    if (value.length === 0 || value.length > 256) errors.add('role_map', 'keys must be 1 to 256 characters');
    if (!userRoles.includes(role as UserRole))
      errors.add(`role_map.${value.slice(0, 64)}`, `must be one of ${userRoles.join(', ')}`);
  }
  return Object.fromEntries(entries) as Record<string, UserRole>;
}

function checkScopes(errors: FieldErrors, scopes: readonly string[] | null | undefined): string[] {
  if (!scopes) return DEFAULT_SCOPES;
  if (scopes.length > MAX_SCOPES) errors.add('scopes', `must list at most ${MAX_SCOPES} scopes`);
  scopes.forEach((scope, i) => {
    if (!scopePattern.test(scope)) errors.add(`scopes.${i}`, 'must be a scope token (printable, no spaces or quotes)');
  });
  // OpenID Connect needs `openid`; `email` releases the claims every sign-in checks.
  return [...new Set(['openid', 'email', ...scopes])];
}

/** The checked settings, or 422 VALIDATION_ERROR naming every field that is wrong. */
export function checkSsoSettings(
  input: SsoSettingsInput,
  { secretStored, privateNetworks }: { secretStored: boolean; privateNetworks: PrivateNetworks },
): SsoSettings {
  const errors = new FieldErrors();
  const allowPrivateNetwork = input.allow_private_network ?? false;
  const issuer = checkIssuer(errors, input.issuer, { privateNetworks, allowPrivateNetwork });
  if (!printable.test(input.client_id) || input.client_id.length > 512)
    errors.add('client_id', 'must be 1 to 512 printable characters without spaces');
  // "[redacted]", as the configuration reads, keeps the stored secret too: a form can send back what it showed.
  const clientSecret = input.client_secret === REDACTED_SECRET ? null : (input.client_secret ?? null);
  if (clientSecret === null && !secretStored)
    errors.add('client_secret', 'is required when single sign-on is first configured');
  if (clientSecret !== null && (clientSecret.length === 0 || clientSecret.length > 1024))
    errors.add('client_secret', 'must be 1 to 1024 characters');
  const defaultRole = (input.default_role ?? 'viewer') as UserRole;
  if (!userRoles.includes(defaultRole)) errors.add('default_role', `must be one of ${userRoles.join(', ')}`);
  const roleClaim = input.role_claim ?? null;
  if (roleClaim !== null && !/^[\x21-\x7e]{1,128}$/.test(roleClaim))
    errors.add('role_claim', 'must be a claim name: 1 to 128 printable characters');
  const settings: SsoSettings = {
    issuer,
    clientId: input.client_id,
    clientSecret,
    allowedDomains: checkDomains(errors, input.allowed_domains),
    defaultRole,
    roleClaim,
    roleMap: checkRoleMap(errors, input.role_map, roleClaim),
    scopes: checkScopes(errors, input.scopes),
    enforce: input.enforce ?? false,
    allowPrivateNetwork,
  };
  errors.throwIfAny();
  return settings;
}
