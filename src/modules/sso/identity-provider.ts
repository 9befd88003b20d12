import {
  createLocalJWKSet,
  errors as joseErrors,
  jwtVerify,
  type JSONWebKeySet,
  type JWTPayload,
  type JWTVerifyGetKey,
} from 'jose';
import type { PrivateNetworks } from '../../lib/address-policy.js';
import { sendOutbound, type OutboundOutcome } from '../../lib/outbound-http.js';

/**
 * An org's OpenID provider as the gateway talks to it (docs/decisions/0061-operator-single-sign-on.md):
 * its discovery document, its JWKS, its token endpoint and the signature of its ID tokens. Every
 * request goes through the outbound address policy (src/lib/outbound-http.ts: no private address
 * unless the org allows it, no redirect followed, a deadline and a size cap). Discovery documents
 * and key sets are kept per process; an ID token signed by a key the kept set lacks fetches the set
 * again, at most once a minute per provider, so a rotation at the provider is picked up at once
 * and a flood of forged `kid`s costs one request a minute.
 */

export const PROVIDER_TIMEOUT_MS = 5000;
const DOCUMENT_MAX_BYTES = 256 * 1024;
const DISCOVERY_KEPT_MS = 15 * 60 * 1000;
const JWKS_KEPT_MS = 60 * 60 * 1000;
export const JWKS_REFETCH_MIN_MS = 60 * 1000;
const MAX_KEPT = 1000;
/** Asymmetric algorithms only: a symmetric one would make the client secret a signing key, `none` signs nothing. */
export const ID_TOKEN_ALGORITHMS = [
  'RS256',
  'RS384',
  'RS512',
  'PS256',
  'PS384',
  'PS512',
  'ES256',
  'ES384',
  'ES512',
  'EdDSA',
];
/** Clock skew tolerated between the provider and the gateway when checking `exp`, `iat` and `nbf`. */
const CLOCK_TOLERANCE_SECONDS = 60;

/** The provider could not be reached or answered something unusable; the message says which, for an admin. */
export class IdentityProviderError extends Error {}

/** The part of an OpenID Provider Metadata document (OpenID Connect Discovery 1.0 §3) the gateway uses. */
export interface ProviderMetadata {
  issuer: string;
  authorization_endpoint: string;
  token_endpoint: string;
  jwks_uri: string;
  id_token_signing_alg_values_supported: string[];
  token_endpoint_auth_methods_supported: string[];
}

export interface ProviderAddress {
  issuer: string;
  /** Whether the provider may be on a private, loopback or link-local address (on-premises). */
  allowPrivateNetwork: boolean;
}

export interface CodeExchange {
  clientId: string;
  clientSecret: string;
  code: string;
  redirectUri: string;
  codeVerifier: string;
}

const isHttpUrl = (value: unknown): value is string => {
  if (typeof value !== 'string' || value.length > 2048) return false;
  try {
    return ['http:', 'https:'].includes(new URL(value).protocol);
  } catch {
    return false;
  }
};

const stringList = (value: unknown): string[] | undefined =>
  Array.isArray(value) && value.every((item) => typeof item === 'string') ? value : undefined;

/** Why a discovery document cannot be used, or the metadata it gives. */
export function readDiscoveryDocument(document: unknown, issuer: string): ProviderMetadata | string {
  if (typeof document !== 'object' || document === null || Array.isArray(document))
    return 'its discovery document is not a JSON object';
  const doc = document as Record<string, unknown>;
  // OpenID Connect Discovery 1.0 §4.3: the issuer in the document must be the one asked for, exactly.
  // What is quoted of the answer is only what an issuer can be (a URL, not too long): a tenant must
  // not read a server's answers through this message.
  if (doc.issuer !== issuer)
    return isHttpUrl(doc.issuer) && doc.issuer.length <= 255
      ? `its discovery document names the issuer ${JSON.stringify(doc.issuer)}, not ${JSON.stringify(issuer)}`
      : `its discovery document names no issuer URL (${JSON.stringify(issuer)} expected)`;
  for (const field of ['authorization_endpoint', 'token_endpoint', 'jwks_uri'] as const) {
    if (!isHttpUrl(doc[field])) return `its discovery document has no http(s) ${field}`;
  }
  return {
    issuer,
    authorization_endpoint: doc.authorization_endpoint as string,
    token_endpoint: doc.token_endpoint as string,
    jwks_uri: doc.jwks_uri as string,
    // Discovery §3: RS256 when the document does not say.
    id_token_signing_alg_values_supported: stringList(doc.id_token_signing_alg_values_supported) ?? ['RS256'],
    // Discovery §3: client_secret_basic when the document does not say.
    token_endpoint_auth_methods_supported: stringList(doc.token_endpoint_auth_methods_supported) ?? [
      'client_secret_basic',
    ],
  };
}

/** The JSON body of a 200 answer, or why there is none. */
function jsonOf(outcome: OutboundOutcome, what: string): unknown {
  if (outcome.kind === 'failure') throw new IdentityProviderError(`${what} could not be fetched: ${outcome.message}`);
  if (outcome.kind === 'redirect')
    throw new IdentityProviderError(`${what} answered a redirect (${outcome.status}), which is not followed`);
  let body: unknown;
  try {
    body = JSON.parse(outcome.body.toString('utf8'));
  } catch {
    throw new IdentityProviderError(`${what} answered ${outcome.status} without JSON`);
  }
  if (outcome.status !== 200) {
    // Only an OAuth error code (RFC 6749 §5.2: invalid_grant…), never free text of the answer.
    const error = (body as Record<string, unknown> | null)?.error;
    const detail = typeof error === 'string' && /^[a-z_]{1,64}$/.test(error) ? ` (${error})` : '';
    throw new IdentityProviderError(`${what} answered ${outcome.status}${detail}`);
  }
  return body;
}

/** RFC 6749 §2.3.1: the client id and secret are form-encoded before they are joined for Basic. */
const basicCredentials = (clientId: string, secret: string) =>
  Buffer.from(`${encodeURIComponent(clientId)}:${encodeURIComponent(secret)}`).toString('base64');

interface Kept<T> {
  value: T;
  until: number;
}

export function createIdentityProviders({
  privateNetworks,
  now = Date.now,
}: {
  /** The deployment's OUTBOUND_PRIVATE_NETWORKS, which a configuration's `allow_private_network` may reach. */
  privateNetworks: PrivateNetworks;
  now?: () => number;
}) {
  const discoveries = new Map<string, Kept<ProviderMetadata>>();
  const keySets = new Map<string, Kept<JWTVerifyGetKey> & { fetchedAt: number }>();

  function keep<T>(map: Map<string, T>, key: string, value: T) {
    map.delete(key);
    if (map.size >= MAX_KEPT) map.delete(map.keys().next().value!);
    map.set(key, value);
  }

  const get = (url: string, allowPrivateNetwork: boolean) =>
    sendOutbound({
      method: 'GET',
      url,
      headers: { accept: 'application/json' },
      timeoutMs: PROVIDER_TIMEOUT_MS,
      maxResponseBytes: DOCUMENT_MAX_BYTES,
      oversize: 'fail',
      access: { privateNetworks, allowPrivateNetwork },
    });

  /** The provider's metadata, kept 15 minutes; `fresh` fetches it again (saving a configuration). */
  async function metadata({ issuer, allowPrivateNetwork }: ProviderAddress, fresh = false): Promise<ProviderMetadata> {
    const cacheKey = `${allowPrivateNetwork}|${issuer}`;
    const kept = discoveries.get(cacheKey);
    if (!fresh && kept && kept.until > now()) return kept.value;
    const url = `${issuer.replace(/\/$/, '')}/.well-known/openid-configuration`;
    const read = readDiscoveryDocument(jsonOf(await get(url, allowPrivateNetwork), 'The discovery document'), issuer);
    if (typeof read === 'string') throw new IdentityProviderError(`The provider is unusable: ${read}`);
    keep(discoveries, cacheKey, { value: read, until: now() + DISCOVERY_KEPT_MS });
    return read;
  }

  async function fetchKeySet(jwksUri: string, allowPrivateNetwork: boolean): Promise<JWTVerifyGetKey> {
    const body = jsonOf(await get(jwksUri, allowPrivateNetwork), 'The JWKS');
    if (!Array.isArray((body as JSONWebKeySet | null)?.keys))
      throw new IdentityProviderError('The JWKS has no "keys" array');
    const keySet = createLocalJWKSet(body as JSONWebKeySet);
    const at = now();
    keep(keySets, `${allowPrivateNetwork}|${jwksUri}`, { value: keySet, until: at + JWKS_KEPT_MS, fetchedAt: at });
    return keySet;
  }

  /** The kept key set, fetched when missing or older than an hour. */
  async function keySetOf(jwksUri: string, allowPrivateNetwork: boolean) {
    const kept = keySets.get(`${allowPrivateNetwork}|${jwksUri}`);
    if (kept && kept.until > now()) return { keySet: kept.value, fetchedAt: kept.fetchedAt };
    return { keySet: await fetchKeySet(jwksUri, allowPrivateNetwork), fetchedAt: now() };
  }

  /** The authorization code for the provider's ID token (OpenID Connect Core 1.0 §3.1.3). */
  async function exchangeCode(
    provider: ProviderMetadata,
    exchange: CodeExchange,
    allowPrivateNetwork: boolean,
  ): Promise<string> {
    const form = new URLSearchParams({
      grant_type: 'authorization_code',
      code: exchange.code,
      redirect_uri: exchange.redirectUri,
      code_verifier: exchange.codeVerifier,
    });
    const headers: Record<string, string> = {
      accept: 'application/json',
      'content-type': 'application/x-www-form-urlencoded',
    };
    // Basic unless the provider supports only client_secret_post.
    const methods = provider.token_endpoint_auth_methods_supported;
    if (!methods.includes('client_secret_basic') && methods.includes('client_secret_post')) {
      form.set('client_id', exchange.clientId);
      form.set('client_secret', exchange.clientSecret);
    } else {
      headers.authorization = `Basic ${basicCredentials(exchange.clientId, exchange.clientSecret)}`;
    }
    const outcome = await sendOutbound({
      method: 'POST',
      url: provider.token_endpoint,
      headers,
      body: form.toString(),
      timeoutMs: PROVIDER_TIMEOUT_MS,
      maxResponseBytes: DOCUMENT_MAX_BYTES,
      oversize: 'fail',
      access: { privateNetworks, allowPrivateNetwork },
    });
    const answer = jsonOf(outcome, 'The token endpoint') as Record<string, unknown> | null;
    if (typeof answer?.id_token !== 'string') throw new IdentityProviderError('The token endpoint gave no ID token');
    return answer.id_token;
  }

  /**
   * The ID token's claims once its signature (by a key of the provider's JWKS, with an algorithm
   * the provider announces), `iss`, `aud` (and `azp` when there are several audiences), `exp` and
   * `iat` are checked. Throws IdentityProviderError for a provider that cannot be reached, and
   * jose's errors for a token that does not verify.
   */
  async function verifyIdToken(
    provider: ProviderMetadata,
    idToken: string,
    clientId: string,
    allowPrivateNetwork: boolean,
  ): Promise<JWTPayload> {
    const algorithms = ID_TOKEN_ALGORITHMS.filter((alg) =>
      provider.id_token_signing_alg_values_supported.includes(alg),
    );
    const options = {
      issuer: provider.issuer,
      audience: clientId,
      algorithms,
      clockTolerance: CLOCK_TOLERANCE_SECONDS,
      requiredClaims: ['sub', 'exp', 'iat'],
    };
    const { keySet, fetchedAt } = await keySetOf(provider.jwks_uri, allowPrivateNetwork);
    let payload: JWTPayload;
    try {
      ({ payload } = await jwtVerify(idToken, keySet, options));
    } catch (error) {
      // A key the kept set lacks: the provider may have rotated. Fetched again at most once a minute.
      if (!(error instanceof joseErrors.JWKSNoMatchingKey) || now() - fetchedAt < JWKS_REFETCH_MIN_MS) throw error;
      ({ payload } = await jwtVerify(idToken, await fetchKeySet(provider.jwks_uri, allowPrivateNetwork), options));
    }
    // OpenID Connect Core 1.0 §3.1.3.7: with several audiences, the authorized party must be us.
    if (Array.isArray(payload.aud) && payload.aud.length > 1 && payload.azp !== clientId)
      throw new joseErrors.JWTClaimValidationFailed(
        'the ID token has several audiences and its azp is not this client',
        payload,
        'azp',
      );
    return payload;
  }

  return { metadata, exchangeCode, verifyIdToken };
}

export type IdentityProviders = ReturnType<typeof createIdentityProviders>;
