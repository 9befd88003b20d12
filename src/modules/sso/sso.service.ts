import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { errors as joseErrors } from 'jose';
import type { Deps } from '../../deps.js';
import { sqlConnectionOf } from '../../db/prisma-sql.js';
import type { SqlConnection } from '../../db/sql.js';
import { AppError, FieldErrors, isUniqueViolation, notFound } from '../../errors.js';
import { type OrgSso, Prisma, type User } from '../../generated/prisma/client.js';
import { countAttempt } from '../../lib/attempt-throttle.js';
import { sha256Hex } from '../../lib/hash.js';
import { fixedWindow } from '../../lib/rate-counter.js';
import type { SecretBox } from '../../lib/secret-box.js';
import { type Actor, actorOf } from '../audit/audit-events.js';
import { recordAudit } from '../audit/audit.service.js';
import type { Principal, UserRole } from '../../authz/authz.js';
import type { SessionService } from '../auth/session.service.js';
import type { UserService } from '../user/user.service.js';
import { IdentityProviderError, createIdentityProviders, type ProviderMetadata } from './identity-provider.js';
import { type SsoRefusal, checkIdentity, isRefusal } from './sso-identity.js';
import { REDACTED_SECRET, type SsoSettingsInput, checkSsoSettings } from './sso-settings.js';
import {
  deleteExpiredSsoHandoffs,
  deleteSso,
  findSso,
  findSsoBySlug,
  insertSsoCode,
  insertSsoLogin,
  lockSso,
  lockSsoSecrets,
  slugOfOrg,
  ssoEnforced,
  takeSsoCode,
  takeSsoLogin,
  updateSsoSecret,
  upsertSso,
} from './sso.store.js';

/**
 * Operators' single sign-on with the org's OpenID provider (docs/decisions/0061-operator-single-sign-on.md).
 *
 * `GET /auth/sso/{org_slug}` (start) sends the browser to the provider with an authorization code
 * request: PKCE (S256), `state` and `nonce`, each 32 random bytes. The sign-in is stored by the
 * SHA-256 of its state for 10 minutes, bound to the browser by a cookie whose SHA-256 it keeps.
 * `GET /auth/sso/callback` takes it once, exchanges the code (with the verifier and the client
 * secret), checks the ID token and the org's rules, provisions the user on their first sign-in, and
 * hands the console a one-time code (60 s) in the fragment of `/console/sso`, which the console
 * exchanges for a session (`POST /api/v1/auth/sso/exchange`). Nothing secret travels in a query
 * string the gateway answers, and the session's tokens never appear in a URL.
 */

export const SSO_LOGIN_TTL_SECONDS = 600;
export const SSO_CODE_TTL_SECONDS = 60;
export const SSO_CALLBACK_PATH = '/auth/sso/callback';
export const SSO_START_PREFIX = '/auth/sso/';
/** Sign-ins started per client address per minute: each stores a row and sends a browser to a provider. */
export const SSO_STARTS_PER_ADDRESS_PER_MINUTE = 30;
const SSO_CODE_PREFIX = 'agsso_';
const ssoCodePattern = /^agsso_[A-Za-z0-9_-]{43}$/;

const random = () => randomBytes(32).toString('base64url');
const pkceChallenge = (verifier: string) => createHash('sha256').update(verifier).digest('base64url');

/** What `GET /api/v1/orgs/{org_id}/sso` shows: the secret never. */
export interface SsoView {
  org_id: string;
  issuer: string;
  client_id: string;
  client_secret: string;
  allowed_domains: string[];
  default_role: UserRole;
  role_claim: string | null;
  role_map: Record<string, UserRole> | null;
  scopes: string[];
  enforce: boolean;
  allow_private_network: boolean;
  /** Where the provider sends the browser back: register it with the provider. */
  redirect_uri: string;
  /** Where operators of the org start a sign-in. */
  sign_in_url: string;
  created_at: Date;
  updated_at: Date;
}

/** The configuration as audited: the view without addresses and times, never the secret. */
const snapshotOf = (row: OrgSso) => ({
  issuer: row.issuer,
  client_id: row.clientId,
  allowed_domains: row.allowedDomains,
  default_role: row.defaultRole,
  role_claim: row.roleClaim,
  role_map: (row.roleMap ?? null) as Record<string, string> | null,
  scopes: row.scopes,
  enforce: row.enforce,
  allow_private_network: row.allowPrivateNetwork,
});

/** Where `start` sends the browser, and the cookie that binds the sign-in to it. */
export interface SsoStart {
  redirect: string;
  browserSecret: string;
}

/** What the callback ends in: a one-time code for the console, or why not. */
export type SsoCallbackOutcome = { code: string } | SsoRefusal;

export interface SsoCallbackParams {
  state?: string;
  code?: string;
  error?: string;
  error_description?: string;
  iss?: string;
}

interface Collaborators {
  users: Pick<UserService, 'findByEmail' | 'createInTransaction'>;
  sessions: Pick<SessionService, 'startSession' | 'endPasswordSessionsOfNonAdmins'>;
}

const refusal = (code: SsoRefusal['code'], description: string): SsoRefusal => ({ code, description });
const sameHash = (a: string, b: string) =>
  a.length === b.length && timingSafeEqual(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8'));
const ssoActor = (user: Pick<User, 'id' | 'email'>): Actor => ({ type: 'user', id: user.id, label: user.email });

/**
 * Seals every client secret not yet sealed with the current key (`agent-gateway reencrypt`, in the
 * caller's transaction); returns how many it rewrote.
 */
export async function reencryptSsoSecrets(conn: SqlConnection, secrets: SecretBox): Promise<number> {
  const stale = (await lockSsoSecrets(conn)).filter((row) => !secrets.isCurrent(row.client_secret));
  for (const row of stale) await updateSsoSecret(conn, row.org_id, secrets.reseal(row.client_secret));
  return stale.length;
}

export function createSsoService({ env, db, secrets, logger }: Deps, { users, sessions }: Collaborators) {
  const providers = createIdentityProviders({ privateNetworks: env.outboundPrivateNetworks });
  const redirectUri = `${env.publicUrl}${SSO_CALLBACK_PATH}`;
  const signInUrl = (slug: string) => `${env.publicUrl}${SSO_START_PREFIX}${encodeURIComponent(slug)}`;

  const viewOf = (row: OrgSso, slug: string): SsoView => ({
    org_id: row.orgId,
    ...snapshotOf(row),
    role_map: (row.roleMap ?? null) as Record<string, UserRole> | null,
    client_secret: REDACTED_SECRET,
    redirect_uri: redirectUri,
    sign_in_url: signInUrl(slug),
    created_at: row.createdAt,
    updated_at: row.updatedAt,
  });

  async function get(orgId: string): Promise<SsoView> {
    const [row, slug] = await Promise.all([findSso(db.prisma, orgId), slugOfOrg(db.prisma, orgId)]);
    if (!row || !slug) throw notFound('Single sign-on configuration');
    return viewOf(row, slug);
  }

  /**
   * Replaces the org's configuration after reading the provider's discovery document afresh: a
   * provider that cannot be reached, or whose document is unusable, is a 422 naming `issuer`.
   */
  async function configure(orgId: string, input: SsoSettingsInput, actor: Principal): Promise<SsoView> {
    const stored = await findSso(db.prisma, orgId);
    const settings = checkSsoSettings(input, {
      secretStored: stored !== null,
      privateNetworks: env.outboundPrivateNetworks,
    });
    try {
      await providers.metadata(settings, true);
    } catch (error) {
      if (!(error instanceof IdentityProviderError)) throw error;
      const errors = new FieldErrors();
      errors.add('issuer', `the provider's discovery document could not be used: ${error.message}`);
      errors.throwIfAny();
    }
    const row = await db.prisma.$transaction(async (tx) => {
      const before = await lockSso(tx, orgId);
      const { clientSecret, ...columns } = settings;
      const saved = await upsertSso(tx, orgId, {
        ...columns,
        roleMap: settings.roleMap ?? Prisma.DbNull,
        // Write-only: an omitted secret keeps the stored one (sealed as it was).
        clientSecret: clientSecret === null ? before!.clientSecret : secrets.seal(clientSecret),
      });
      // Refused from the commit on by the bearer check; revoked in the same transaction so that
      // they stay ended if `enforce` is turned off again, and `enforce` never commits without it.
      const enforceTurnedOn = saved.enforce && !before?.enforce;
      const sessionsEnded = enforceTurnedOn
        ? { password_sessions_ended: await sessions.endPasswordSessionsOfNonAdmins(orgId, sqlConnectionOf(tx)) }
        : {};
      await recordAudit(tx, orgId, actorOf(actor), {
        action: 'sso.configured',
        targetType: 'sso_configuration',
        targetId: orgId,
        before: before ? snapshotOf(before) : undefined,
        after: { ...snapshotOf(saved), client_secret_set: clientSecret !== null, ...sessionsEnded },
      });
      return saved;
    });
    return viewOf(row, (await slugOfOrg(db.prisma, orgId))!);
  }

  async function remove(orgId: string, actor: Principal): Promise<boolean> {
    return db.prisma.$transaction(async (tx) => {
      const removed = await deleteSso(tx, orgId);
      if (!removed) throw notFound('Single sign-on configuration');
      await recordAudit(tx, orgId, actorOf(actor), {
        action: 'sso.removed',
        targetType: 'sso_configuration',
        targetId: orgId,
        before: snapshotOf(removed),
      });
      return true;
    });
  }

  /** The provider's metadata, or the refusal a sign-in shows when it cannot be read. */
  async function providerOf(row: OrgSso): Promise<ProviderMetadata | SsoRefusal> {
    try {
      return await providers.metadata({ issuer: row.issuer, allowPrivateNetwork: row.allowPrivateNetwork });
    } catch (error) {
      if (!(error instanceof IdentityProviderError)) throw error;
      logger.warn({ org_id: row.orgId, issuer: row.issuer, reason: error.message }, 'sso: provider unavailable');
      return refusal('provider_unavailable', `The identity provider cannot be reached: ${error.message}`);
    }
  }

  /**
   * `GET /auth/sso/{org_slug}`: where the browser goes to sign in, or why it cannot (an org
   * without single sign-on and an unknown slug read the same).
   */
  async function start(slug: string, clientAddress: string): Promise<SsoStart | SsoRefusal> {
    await countAttempt(
      db.sql,
      [{ bucket: `sso-starts:address:${clientAddress}`, limit: SSO_STARTS_PER_ADDRESS_PER_MINUTE }],
      fixedWindow(60),
      { message: 'Too many single sign-ons started from this address; try again shortly', period: '1m' },
    );
    const org = /^[a-z0-9-]{1,63}$/.test(slug) ? await findSsoBySlug(db.prisma, slug) : null;
    if (!org?.sso) return refusal('sso_not_configured', `No organization "${slug}" signs in with single sign-on`);
    const provider = await providerOf(org.sso);
    if (isRefusal(provider)) return provider;
    const { authorization_endpoint } = provider;
    const state = random();
    const nonce = random();
    const codeVerifier = random();
    const browserSecret = random();
    await insertSsoLogin(db.sql, {
      stateHash: sha256Hex(state),
      orgId: org.id,
      browserHash: sha256Hex(browserSecret),
      nonce,
      codeVerifier,
      ttlSeconds: SSO_LOGIN_TTL_SECONDS,
    });
    const url = new URL(authorization_endpoint);
    const params = {
      response_type: 'code',
      client_id: org.sso.clientId,
      redirect_uri: redirectUri,
      scope: org.sso.scopes.join(' '),
      state,
      nonce,
      code_challenge: pkceChallenge(codeVerifier),
      code_challenge_method: 'S256',
    };
    for (const [name, value] of Object.entries(params)) url.searchParams.set(name, value);
    return { redirect: url.toString(), browserSecret };
  }

  /** The org's user with `email`, provisioned with `role` on a first sign-in; refused when another org has the email. */
  async function userFor(orgId: string, identity: { email: string; role: UserRole; subject: string }, issuer: string) {
    const existing = await users.findByEmail(identity.email);
    if (existing && existing.orgId !== orgId)
      return refusal('email_taken', `${identity.email} belongs to a user of another organization`);
    const code = `${SSO_CODE_PREFIX}${random()}`;
    const handOff = (tx: Prisma.TransactionClient, user: User) =>
      insertSsoCode(tx, { codeHash: sha256Hex(code), userId: user.id, orgId, ttlSeconds: SSO_CODE_TTL_SECONDS });
    if (existing) {
      await db.prisma.$transaction((tx) => handOff(tx, existing));
      return { code };
    }
    try {
      await db.prisma.$transaction(async (tx) => {
        const user = await users.createInTransaction(tx, {
          orgId,
          email: identity.email,
          passwordHash: null,
          role: identity.role,
        });
        await recordAudit(tx, orgId, ssoActor(user), {
          action: 'user.provisioned',
          targetType: 'user',
          targetId: user.id,
          after: { email: user.email, role: user.role, issuer, subject: identity.subject },
        });
        await handOff(tx, user);
      });
    } catch (error) {
      // The same person's first sign-in twice at once: the other one provisioned them.
      if (isUniqueViolation(error)) return userFor(orgId, identity, issuer);
      throw error;
    }
    return { code };
  }

  /** The provider's answer for `login`'s org: an ID token's identity, or why it is refused. */
  async function identityOf(row: OrgSso, code: string, login: { nonce: string; code_verifier: string }) {
    const provider = await providerOf(row);
    if (isRefusal(provider)) return provider;
    const metadata = provider;
    try {
      const idToken = await providers.exchangeCode(
        metadata,
        {
          clientId: row.clientId,
          clientSecret: secrets.open(row.clientSecret),
          code,
          redirectUri,
          codeVerifier: login.code_verifier,
        },
        row.allowPrivateNetwork,
      );
      const claims = await providers.verifyIdToken(metadata, idToken, row.clientId, row.allowPrivateNetwork);
      return checkIdentity(claims, {
        nonce: login.nonce,
        allowedDomains: row.allowedDomains,
        defaultRole: row.defaultRole,
        roleClaim: row.roleClaim,
        roleMap: (row.roleMap ?? null) as Record<string, UserRole> | null,
      });
    } catch (error) {
      if (error instanceof IdentityProviderError) {
        logger.warn({ org_id: row.orgId, reason: error.message }, 'sso: provider failed the sign-in');
        return refusal('provider_unavailable', error.message);
      }
      if (error instanceof joseErrors.JOSEError)
        return refusal('invalid_id_token', `The provider's ID token is refused: ${error.message}`);
      throw error;
    }
  }

  /** `GET /auth/sso/callback`: the provider's answer, checked; a one-time code for the console, or why not. */
  async function callback(params: SsoCallbackParams, browserSecret: string | undefined): Promise<SsoCallbackOutcome> {
    if (!params.state) return refusal('invalid_request', 'The provider sent no state back; start the sign-in again');
    const login = await takeSsoLogin(db.sql, sha256Hex(params.state));
    if (!login?.live)
      return refusal('invalid_request', 'This sign-in is unknown, expired or already used; start it again');
    if (!browserSecret || !sameHash(sha256Hex(browserSecret), login.browser_hash))
      return refusal('invalid_request', 'This sign-in was started in another browser; start it again here');
    if (params.error) {
      const detail = (params.error_description ?? params.error).slice(0, 300);
      return refusal('access_denied', `The identity provider refused the sign-in: ${detail}`);
    }
    const row = await findSso(db.prisma, login.org_id);
    if (!row) return refusal('sso_not_configured', 'Single sign-on was turned off for this organization');
    // RFC 9207: a provider that names itself must be the one this sign-in went to (mix-up attacks).
    if (params.iss !== undefined && params.iss !== row.issuer)
      return refusal('invalid_request', 'The answer comes from another identity provider than this sign-in went to');
    if (!params.code) return refusal('invalid_request', 'The provider sent no authorization code');
    const identity = await identityOf(row, params.code, login);
    if (isRefusal(identity)) return identity;
    return userFor(row.orgId, identity, row.issuer);
  }

  /**
   * `POST /api/v1/auth/sso/exchange`: the one-time code for what a password login answers. Used
   * once; 401 when unknown, used or older than 60 seconds.
   */
  async function exchange(code: string) {
    if (!ssoCodePattern.test(code)) throw new AppError('INVALID_TOKEN', 'The sign-in code is malformed');
    const user = await db.prisma.$transaction(async (tx) => {
      const taken = await takeSsoCode(tx, sha256Hex(code));
      if (!taken) throw new AppError('INVALID_TOKEN', 'The sign-in code is unknown or was already used');
      if (!taken.live) throw new AppError('INVALID_TOKEN', 'The sign-in code has expired; sign in again');
      const found = taken.user;
      if (!found) throw new AppError('INVALID_TOKEN', 'The user of this sign-in code no longer exists');
      await recordAudit(tx, found.orgId, ssoActor(found), {
        action: 'session.sso_login',
        targetType: 'user',
        targetId: found.id,
        after: { email: found.email, role: found.role },
      });
      return found;
    });
    const session = await sessions.startSession(
      { id: user.id, orgId: user.orgId, email: user.email, role: user.role },
      'sso',
    );
    return { token: session.access_token, refresh_token: session.refresh_token, expires: session.expires, user };
  }

  /**
   * Why a password login of `user` is refused, or undefined: an org that enforces single sign-on
   * signs its users in through the provider, except its admins (break-glass).
   */
  async function passwordLoginRefusal(user: Pick<User, 'orgId' | 'role'>): Promise<string | undefined> {
    if (user.role === 'admin' || !(await ssoEnforced(db.prisma, user.orgId))) return undefined;
    return 'This organization signs in with single sign-on: use "Sign in with SSO" with its slug';
  }

  const prune = () => deleteExpiredSsoHandoffs(db.sql);

  return { get, configure, remove, start, callback, exchange, passwordLoginRefusal, prune, redirectUri };
}

export type SsoService = ReturnType<typeof createSsoService>;
