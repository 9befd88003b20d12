import * as oauth from 'oauth4webapi';
import {
  AddressRefusedError,
  hostRefusal,
  isRefusedHost,
  type NetworkAccess,
  refusalMessage,
} from '../../lib/address-policy.js';
import { responseOf, sendOutbound, type OutboundOutcome } from '../../lib/outbound-http.js';

/**
 * How the upstream OAuth client (upstream-oauth.ts) talks to authorization servers and protected
 * resources (docs/decisions/0067-upstream-oauth-client.md): every request oauth4webapi makes goes
 * through `sendOutbound` (the address policy on the literal and on each resolved address, no
 * redirect followed, a deadline, a size cap), and every way a step can fail becomes a failure
 * whose message we wrote. Nothing a server answered, and no token, code, verifier or secret, is
 * ever quoted: only a status, and an OAuth error code when it is one (`[a-z_]{1,64}`).
 */

/** Each request to an authorization server or a resource's metadata gets this long. */
export const OAUTH_TIMEOUT_MS = 5000;
/** Metadata, registrations and token answers are small; a larger answer is refused. */
export const OAUTH_MAX_RESPONSE_BYTES = 256 * 1024;

export type OAuthFailureCode =
  /** The address policy refused a URL; nothing was sent. */
  | 'address_refused'
  /** A URL is not http(s), or http where https is required; nothing was sent. */
  | 'insecure_url'
  /** The server could not be reached in time, or its answer was cut off. Transient. */
  | 'unreachable'
  /** The server answered a redirect, which is never followed. */
  | 'redirect_refused'
  /** 5xx, 429, or `temporarily_unavailable`. Transient. */
  | 'server_error'
  /** The code or refresh token was refused: the connection needs authorizing again. */
  | 'invalid_grant'
  /** Another OAuth error (`invalid_client`, `invalid_scope`, `invalid_target`, …) or a 4xx. */
  | 'oauth_error'
  /** The answer breaks the protocol (not JSON, a field missing, another issuer or resource). */
  | 'invalid_response'
  /** No protected resource or authorization server metadata was found. */
  | 'no_metadata'
  /** The authorization server offers no way for the gateway to register. */
  | 'no_registration'
  /** The authorization server does not say it supports PKCE with S256. */
  | 'pkce_unsupported'
  /** The callback's `state` is not the one the authorization was started with. */
  | 'state_mismatch'
  /** The callback's `iss` is not the authorization server's, or missing where it must be (RFC 9207). */
  | 'issuer_mismatch'
  /** The authorization server sent the browser back with an error (`access_denied`, …). */
  | 'authorization_error';

export interface OAuthFailure {
  error: OAuthFailureCode;
  /** Safe to show to the tenant and to log: it quotes no secret and nothing a server wrote. */
  message: string;
  /** Trying again later may succeed (a network failure, a 5xx); the grant itself stands. */
  transient: boolean;
  /** The server's OAuth error code, when it gave a well-formed one. */
  oauth_error?: string;
}

export type OAuthResult<T> = { ok: true; value: T } | ({ ok: false } & OAuthFailure);

const TRANSIENT = new Set<OAuthFailureCode>(['unreachable', 'server_error']);

export function failed(error: OAuthFailureCode, message: string, oauthError?: string): { ok: false } & OAuthFailure {
  return {
    ok: false,
    error,
    message,
    transient: TRANSIENT.has(error),
    ...(oauthError ? { oauth_error: oauthError } : {}),
  };
}

/** A request that never reached the server's answer: the address policy, the network, or a redirect. */
class OutboundRefusal extends Error {
  constructor(readonly outcome: Exclude<OutboundOutcome, { kind: 'response' }>) {
    super('the outbound request did not get an answer');
  }
}

/**
 * Whether plain http may be used for a URL: only for an address the deployment opened and the
 * configuration asked for (a loopback or private literal, or `localhost`), as for on-premises
 * servers and tests. Everywhere else OAuth 2.1 and the MCP specification require https.
 */
function insecureAllowed(url: URL, access: NetworkAccess): boolean {
  return url.protocol === 'http:' && isRefusedHost(url.hostname) && hostRefusal(url.hostname, access) === undefined;
}

/** The body oauth4webapi hands to fetch, as the text `sendOutbound` sends. */
const bodyText = (body: unknown): string | undefined =>
  body === undefined || body === null ? undefined : typeof body === 'string' ? body : String(body);

/** oauth4webapi's fetch: each request through the address policy, its answer as a Response. */
function outboundFetch(access: NetworkAccess) {
  return async (url: string, init: oauth.CustomFetchOptions<string, unknown>): Promise<Response> => {
    const outcome = await sendOutbound({
      method: init.method,
      url,
      headers: { ...init.headers, 'user-agent': 'agent-gateway' },
      body: bodyText(init.body),
      timeoutMs: OAUTH_TIMEOUT_MS,
      maxResponseBytes: OAUTH_MAX_RESPONSE_BYTES,
      oversize: 'fail',
      access,
      signal: init.signal,
    });
    if (outcome.kind !== 'response') throw new OutboundRefusal(outcome);
    return responseOf(outcome.status, outcome.headers, outcome.body);
  };
}

/**
 * Refuses a URL before anything is sent: first by the address policy on what is known without DNS
 * (a literal, `localhost`: the tenant reads the policy's own words), then oauth4webapi's rule on
 * the scheme, with http only where `insecureAllowed` says. Names are judged again on each address
 * they resolve to, when connecting.
 */
export function checkUrl(url: URL, access: NetworkAccess): void {
  const refusal = hostRefusal(url.hostname, access);
  if (refusal) throw new AddressRefusedError(refusalMessage(`${url.hostname} is`, refusal));
  oauth.checkProtocol(url, !insecureAllowed(url, access));
}

/**
 * The options every oauth4webapi call gets, once the endpoint passed `checkUrl`: our fetch, http
 * allowed where `insecureAllowed` says, and the request's extra parameters (`resource`, `scope`). An endpoint missing from the metadata is left to
 * oauth4webapi to report.
 */
export function oauthOptions(endpoint: unknown, access: NetworkAccess, additionalParameters?: Record<string, string>) {
  const url = typeof endpoint === 'string' ? URL.parse(endpoint) : null;
  if (url) checkUrl(url, access);
  return {
    [oauth.customFetch]: outboundFetch(access),
    [oauth.allowInsecureRequests]: url ? insecureAllowed(url, access) : false,
    ...(additionalParameters ? { additionalParameters } : {}),
  };
}

/** A GET of a metadata document (RFC 8414, RFC 9728, OpenID discovery) under the same rules. */
export function getMetadata(url: URL, access: NetworkAccess): Promise<Response> {
  checkUrl(url, access);
  return outboundFetch(access)(url.href, {
    method: 'GET',
    headers: { accept: 'application/json' },
    body: undefined,
    redirect: 'manual',
  });
}

/** Runs one step, every failure of it (ours, oauth4webapi's, the network's) as a failure result. */
export async function step<T>(what: string, run: () => Promise<T>): Promise<OAuthResult<T>> {
  try {
    return { ok: true, value: await run() };
  } catch (error) {
    return failureOf(error, what);
  }
}

/** An OAuth error code as a server sent it, only when it is one: never free text. */
export function oauthErrorCode(value: unknown): string | undefined {
  return typeof value === 'string' && /^[a-z_]{1,64}$/.test(value) ? value : undefined;
}

/** The status of the Response oauth4webapi found unconforming, when that is what it holds. */
const statusOf = (cause: unknown): number | undefined => (cause instanceof Response ? cause.status : undefined);

/**
 * What went wrong, in our words. `what` names the server or document ("The token endpoint").
 * Library messages are not used: they are safe today, but their `cause` carries the answer, the
 * callback's parameters (with the code) or the body (with tokens), and nothing of that may leave.
 */
export function failureOf(error: unknown, what: string): { ok: false } & OAuthFailure {
  if (error instanceof OutboundRefusal) return refusalFailure(error.outcome, what);
  if (error instanceof AddressRefusedError) return failed('address_refused', `${what}: ${error.message}`);
  if (error instanceof oauth.ResponseBodyError) return errorBodyFailure(error.status, error.error, what);
  if (error instanceof oauth.WWWAuthenticateChallengeError) {
    const code = oauthErrorCode(error.cause[0]?.parameters.error);
    return errorBodyFailure(error.status, code ?? '', what);
  }
  if (error instanceof oauth.AuthorizationResponseError) {
    const code = oauthErrorCode(error.error);
    return failed(
      'authorization_error',
      `The authorization server refused the authorization${code ? ` (${code})` : ''}`,
      code,
    );
  }
  if (error instanceof oauth.OperationProcessingError) return processingFailure(error, what);
  return failed('invalid_response', `${what} answered something the gateway cannot use`);
}

function refusalFailure(outcome: OutboundRefusal['outcome'], what: string) {
  if (outcome.kind === 'redirect')
    return failed('redirect_refused', `${what} answered a redirect (${outcome.status}), which is not followed`);
  if (outcome.code === 'ADDRESS_REFUSED') return failed('address_refused', `${what}: ${outcome.message}`);
  if (outcome.code === 'INVALID_URL') return failed('insecure_url', `${what} is not at an http(s) URL`);
  if (outcome.code === 'RESPONSE_TOO_LARGE')
    return failed('invalid_response', `${what} answered more than ${OAUTH_MAX_RESPONSE_BYTES} bytes`);
  return failed('unreachable', `${what} could not be reached: ${outcome.message}`);
}

function errorBodyFailure(status: number, code: string, what: string) {
  const known = oauthErrorCode(code);
  const detail = `${what} answered ${status}${known ? ` (${known})` : ''}`;
  if (known === 'invalid_grant') return failed('invalid_grant', `${detail}: the grant is no longer valid`, known);
  if (known === 'temporarily_unavailable' || status >= 500 || status === 429)
    return failed('server_error', detail, known);
  return failed('oauth_error', detail, known);
}

function processingFailure(error: oauth.OperationProcessingError, what: string) {
  switch (error.code) {
    case oauth.HTTP_REQUEST_FORBIDDEN:
      return failed('insecure_url', `${what} must be an https URL`);
    case oauth.REQUEST_PROTOCOL_FORBIDDEN:
      return failed('insecure_url', `${what} is not at an http(s) URL`);
    case oauth.MISSING_SERVER_METADATA:
    case oauth.INVALID_SERVER_METADATA: {
      const attribute = (error.cause as { attribute?: unknown } | undefined)?.attribute;
      const name = typeof attribute === 'string' && /^[a-z_.]{1,64}$/.test(attribute) ? attribute : 'endpoint';
      return failed('invalid_response', `The authorization server's metadata has no usable ${name}`);
    }
    case oauth.RESPONSE_IS_NOT_CONFORM: {
      const status = statusOf(error.cause);
      if (status !== undefined && (status >= 500 || status === 429))
        return failed('server_error', `${what} answered ${status}`);
      return failed('invalid_response', `${what} answered ${status ?? 'something unexpected'}`);
    }
    default:
      return failed('invalid_response', `${what} answered something that does not follow the protocol`);
  }
}
