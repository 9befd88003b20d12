/**
 * The rules of OAuth clients (docs/decisions/0047-mcp-oauth.md), pure: what a Dynamic Client
 * Registration (RFC 7591) may ask for, which redirect URIs are acceptable, and when a presented
 * redirect URI is the registered one. MCP clients are public clients (a desktop app, a CLI, a
 * browser page): no secret, PKCE instead.
 */

/** What a registration stores and answers. */
export interface ClientRegistration {
  redirect_uris: string[];
  client_name?: string;
  client_uri?: string;
  logo_uri?: string;
  scope?: string;
  software_id?: string;
  software_version?: string;
}

/**
 * A client the authorization server knows: registered here, or described by its metadata
 * document. Beside the registration, so that the service and its consent (consent.ts) both name
 * it without importing each other.
 */
export interface KnownClient {
  client_id: string;
  kind: 'registered' | 'metadata_document';
  registration: ClientRegistration;
}

/** An RFC 7591 §3.2.2 error: its code and a description for the developer. */
export interface RegistrationError {
  error: 'invalid_redirect_uri' | 'invalid_client_metadata';
  error_description: string;
}

export const MAX_REDIRECT_URIS = 10;
export const MAX_URI_LENGTH = 2000;
export const MAX_NAME_LENGTH = 200;

const OPTIONAL_STRINGS = ['client_name', 'client_uri', 'logo_uri', 'scope', 'software_id', 'software_version'] as const;
const LOOPBACK_HOSTS = new Set(['127.0.0.1', '[::1]', 'localhost']);

/** The loopback interface as a URL's hostname names it (RFC 8252 §7.3, and `localhost`). */
export const isLoopbackHost = (hostname: string) => LOOPBACK_HOSTS.has(hostname);
const CONTROL_CHARACTERS = /[\u0000-\u001f\u007f]/;

/**
 * Whether `uri` may be a redirect URI: an absolute https URL, or an http URL on the loopback
 * interface (RFC 8252 §7.3: native apps listen there on a port of their choosing), never with a
 * fragment (RFC 6749 §3.1.2). `localhost` counts as loopback: the widely used MCP clients
 * (mcp-remote, the SDK's examples) register `http://localhost:<port>/…`.
 */
export function redirectUriProblem(uri: unknown): string | undefined {
  if (typeof uri !== 'string' || uri.length === 0) return 'a redirect URI must be a non-empty string';
  if (uri.length > MAX_URI_LENGTH) return `a redirect URI may have at most ${MAX_URI_LENGTH} characters`;
  // The URL parser would take a NUL and keep it; the database cannot store one in text.
  if (CONTROL_CHARACTERS.test(uri)) return 'a redirect URI may not contain control characters';
  let url: URL;
  try {
    url = new URL(uri);
  } catch {
    return `${JSON.stringify(uri)} is not an absolute URL`;
  }
  if (url.hash || uri.includes('#')) return `${uri} has a fragment, which a redirect URI may not have`;
  if (url.username || url.password) return `${uri} carries user information, which a redirect URI may not have`;
  if (url.protocol === 'https:') return undefined;
  if (url.protocol === 'http:' && LOOPBACK_HOSTS.has(url.hostname)) return undefined;
  if (url.protocol === 'http:')
    return `${uri} is plain http on a host other than the loopback interface (127.0.0.1, [::1], localhost): use https`;
  return `${uri} has the scheme ${url.protocol.slice(0, -1)}: a redirect URI is https, or http on the loopback interface`;
}

/**
 * Whether a redirect URI presented at the authorization or token endpoint is a registered one:
 * the same string, except that on the loopback interface the port may differ (RFC 8252 §7.3).
 */
export function redirectUriMatches(registered: readonly string[], presented: string): boolean {
  if (registered.includes(presented)) return true;
  let url: URL;
  try {
    url = new URL(presented);
  } catch {
    return false;
  }
  if (url.protocol !== 'http:' || !LOOPBACK_HOSTS.has(url.hostname)) return false;
  const withoutPort = (u: URL) => `${u.protocol}//${u.hostname}${u.pathname}${u.search}`;
  return registered.some((candidate) => {
    try {
      const r = new URL(candidate);
      return r.protocol === 'http:' && r.hostname === url.hostname && withoutPort(r) === withoutPort(url);
    } catch {
      return false;
    }
  });
}

const invalid = (error_description: string): RegistrationError => ({
  error: 'invalid_client_metadata',
  error_description,
});

/**
 * A registration request's metadata as this server accepts it, or the error that refuses it.
 * Unknown fields are ignored (RFC 7591 §2). Public clients only: `token_endpoint_auth_method`
 * must be absent or `none`; grant and response types must be within the code flow's.
 */
export function acceptRegistration(body: unknown): ClientRegistration | RegistrationError {
  if (typeof body !== 'object' || body === null || Array.isArray(body))
    return invalid('The body must be a JSON object of client metadata');
  const metadata = body as Record<string, unknown>;
  const uris = metadata.redirect_uris;
  if (!Array.isArray(uris) || uris.length === 0) {
    return {
      error: 'invalid_redirect_uri',
      error_description: 'redirect_uris is required: a non-empty array of redirect URIs',
    };
  }
  if (uris.length > MAX_REDIRECT_URIS) {
    return { error: 'invalid_redirect_uri', error_description: `At most ${MAX_REDIRECT_URIS} redirect URIs` };
  }
  for (const uri of uris) {
    const problem = redirectUriProblem(uri);
    if (problem) return { error: 'invalid_redirect_uri', error_description: problem };
  }
  const method = metadata.token_endpoint_auth_method;
  if (method !== undefined && method !== 'none') {
    return invalid(
      `token_endpoint_auth_method ${JSON.stringify(method)} is not supported: clients are public ("none") and prove themselves with PKCE`,
    );
  }
  const grants = metadata.grant_types;
  if (
    grants !== undefined &&
    (!Array.isArray(grants) || grants.some((g) => g !== 'authorization_code' && g !== 'refresh_token'))
  ) {
    return invalid('grant_types may hold only "authorization_code" and "refresh_token"');
  }
  const responses = metadata.response_types;
  if (responses !== undefined && (!Array.isArray(responses) || responses.some((r) => r !== 'code'))) {
    return invalid('response_types may hold only "code"');
  }
  const accepted: ClientRegistration = { redirect_uris: [...new Set(uris as string[])] };
  for (const field of OPTIONAL_STRINGS) {
    const value = metadata[field];
    if (value === undefined || value === null) continue;
    if (typeof value !== 'string') return invalid(`${field} must be a string`);
    const limit = field === 'client_name' ? MAX_NAME_LENGTH : MAX_URI_LENGTH;
    if (value.length > limit) return invalid(`${field} may have at most ${limit} characters`);
    if (CONTROL_CHARACTERS.test(value)) return invalid(`${field} may not contain control characters`);
    accepted[field] = value;
  }
  for (const field of ['client_uri', 'logo_uri'] as const) {
    const value = accepted[field];
    if (value !== undefined && !/^https:\/\//i.test(value)) return invalid(`${field} must be an https URL`);
  }
  return accepted;
}

export const isRegistrationError = (value: ClientRegistration | RegistrationError): value is RegistrationError =>
  'error' in value;
