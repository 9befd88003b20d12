import type { FieldErrors } from '../../errors.js';
import type { NetworkAccess } from '../../lib/address-policy.js';
import { outboundUrlError } from '../../lib/outbound-http.js';

/**
 * How an http or mcp tool authenticates to its upstream (`config.auth`,
 * docs/decisions/0068-upstream-connections.md): the static headers (the default), an OAuth
 * connection the gateway holds per org or per user, or a client-credentials grant for machine
 * APIs. What is stored here is shown by the API and recorded by the audit log; the client secret
 * is write-only, sealed beside the tool's other secrets.
 */
export const authTypes = ['headers', 'oauth', 'client_credentials'] as const;
export type AuthType = (typeof authTypes)[number];
export const connectionScopes = ['org', 'user'] as const;
export type ConnectionScope = (typeof connectionScopes)[number];

export type ToolAuth =
  | { type: 'headers' }
  | {
      type: 'oauth';
      connection: ConnectionScope;
      scopes: string[] | null;
      /** A client registered at the authorization server beforehand; else the gateway registers itself. */
      client_id: string | null;
    }
  | {
      type: 'client_credentials';
      token_url: string;
      client_id: string;
      scopes: string[] | null;
      audience: string | null;
    };

export const HEADERS_AUTH: ToolAuth = { type: 'headers' };
const REDACTED = '[redacted]';
const MAX_SCOPES = 50;
const MAX_SCOPE_LENGTH = 200;
/** RFC 6749 §3.3: scope-token = 1*( %x21 / %x23-5B / %x5D-7E ). */
const scopeTokenPattern = /^[\x21\x23-\x5b\x5d-\x7e]+$/;
const MAX_CLIENT_ID_LENGTH = 255;
const MIN_CLIENT_SECRET_LENGTH = 1;
const MAX_CLIENT_SECRET_LENGTH = 1024;
const MAX_AUDIENCE_LENGTH = 2048;

const fieldsOf: Record<AuthType, readonly string[]> = {
  headers: ['type'],
  oauth: ['type', 'connection', 'scopes', 'client_id', 'client_secret'],
  client_credentials: ['type', 'token_url', 'client_id', 'client_secret', 'scopes', 'audience'],
};

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** What parsing `config.auth` gives: the stored part and the client secret this write sets or keeps. */
export interface ParsedAuth {
  auth: ToolAuth;
  /** The client secret to store: given, kept ("[redacted]"), or none. */
  clientSecret: string | null;
  /** True when this write sets the client secret rather than keeping it. */
  secretSet: boolean;
}

interface AuthContext {
  /** The stored client secret, opened only when a write keeps it. */
  keptSecret: () => string | null;
  /** The tool's network access: a token URL obeys it as the tool's own URL does. */
  access: NetworkAccess;
}

function parseScopes(value: unknown, errors: FieldErrors): string[] | null {
  if (value == null) return null;
  if (
    !Array.isArray(value) ||
    value.length > MAX_SCOPES ||
    value.some((s) => typeof s !== 'string' || s.length > MAX_SCOPE_LENGTH || !scopeTokenPattern.test(s))
  ) {
    errors.add(
      'config.auth.scopes',
      `must be a list of at most ${MAX_SCOPES} OAuth scopes (printable ASCII without spaces, quotes or backslashes, at most ${MAX_SCOPE_LENGTH} characters each)`,
    );
    return null;
  }
  return [...new Set(value as string[])];
}

function parseClientId(value: unknown, required: boolean, errors: FieldErrors): string | null {
  if (value == null && !required) return null;
  if (
    typeof value !== 'string' ||
    value.length < 1 ||
    value.length > MAX_CLIENT_ID_LENGTH ||
    /[\x00-\x1f\x7f]/.test(value)
  ) {
    errors.add(
      'config.auth.client_id',
      `${required ? 'is required: ' : ''}must be a string of 1 to ${MAX_CLIENT_ID_LENGTH} characters without control characters`,
    );
    return null;
  }
  return value;
}

/** The client secret: given in full, kept with "[redacted]" (as GET shows it), or absent. */
function parseClientSecret(
  value: unknown,
  { required, clientId }: { required: boolean; clientId: string | null },
  errors: FieldErrors,
  context: AuthContext,
): Pick<ParsedAuth, 'clientSecret' | 'secretSet'> {
  if (value == null) {
    if (required) errors.add('config.auth.client_secret', 'is required');
    return { clientSecret: null, secretSet: false };
  }
  if (clientId === null) {
    errors.add('config.auth.client_secret', 'needs a client_id: a secret is that client’s');
    return { clientSecret: null, secretSet: false };
  }
  if (value === REDACTED) {
    const kept = context.keptSecret();
    if (kept === null)
      errors.add('config.auth.client_secret', `"${REDACTED}" keeps the stored secret, but the tool has none`);
    return { clientSecret: kept, secretSet: false };
  }
  if (typeof value !== 'string' || value.length < MIN_CLIENT_SECRET_LENGTH || value.length > MAX_CLIENT_SECRET_LENGTH) {
    errors.add('config.auth.client_secret', `must be a string of at most ${MAX_CLIENT_SECRET_LENGTH} characters`);
    return { clientSecret: null, secretSet: false };
  }
  return { clientSecret: value, secretSet: true };
}

function parseOAuth(auth: Record<string, unknown>, errors: FieldErrors, context: AuthContext): ParsedAuth {
  const connection = auth.connection;
  if (!connectionScopes.includes(connection as ConnectionScope)) {
    errors.add(
      'config.auth.connection',
      'must be "org" (one account for the whole organization) or "user" (each user connects their own)',
    );
  }
  const clientId = parseClientId(auth.client_id, false, errors);
  return {
    auth: {
      type: 'oauth',
      connection: connection as ConnectionScope,
      scopes: parseScopes(auth.scopes, errors),
      client_id: clientId,
    },
    ...parseClientSecret(auth.client_secret, { required: false, clientId }, errors, context),
  };
}

function parseClientCredentials(auth: Record<string, unknown>, errors: FieldErrors, context: AuthContext): ParsedAuth {
  const urlError =
    auth.token_url == null ? { message: 'is required' } : outboundUrlError(auth.token_url, context.access);
  if (urlError) errors.add('config.auth.token_url', urlError.message);
  const audience = auth.audience ?? null;
  if (
    audience !== null &&
    (typeof audience !== 'string' || audience.length < 1 || audience.length > MAX_AUDIENCE_LENGTH)
  ) {
    errors.add('config.auth.audience', `must be a string of 1 to ${MAX_AUDIENCE_LENGTH} characters`);
  }
  const clientId = parseClientId(auth.client_id, true, errors);
  return {
    auth: {
      type: 'client_credentials',
      token_url: String(auth.token_url),
      client_id: clientId ?? '',
      scopes: parseScopes(auth.scopes, errors),
      audience: typeof audience === 'string' ? audience : null,
    },
    ...parseClientSecret(auth.client_secret, { required: true, clientId }, errors, context),
  };
}

/**
 * Reads a submitted `config.auth` (absent: the static headers). Unknown fields are refused, as
 * everywhere in a tool's config; so is an `Authorization` header beside a grant, which would send
 * a second credential the gateway does not manage.
 */
export function parseToolAuth(
  raw: unknown,
  headerNames: readonly string[],
  errors: FieldErrors,
  context: AuthContext,
): ParsedAuth {
  const none: ParsedAuth = { auth: HEADERS_AUTH, clientSecret: null, secretSet: false };
  if (raw == null) return none;
  if (!isObject(raw) || !authTypes.includes(raw.type as AuthType)) {
    errors.add('config.auth', `must be an object whose "type" is one of ${authTypes.join(', ')}`);
    return none;
  }
  const type = raw.type as AuthType;
  for (const key of Object.keys(raw)) {
    if (!fieldsOf[type].includes(key)) errors.add(`config.auth.${key}`, `unknown field for auth of type "${type}"`);
  }
  if (type === 'headers') return none;
  const authorization = headerNames.find((name) => name.toLowerCase() === 'authorization');
  if (authorization) {
    errors.add(
      `config.headers.${authorization}`,
      `must not be set when config.auth is "${type}": the gateway sends the Authorization header from the grant`,
    );
  }
  return type === 'oauth' ? parseOAuth(raw, errors, context) : parseClientCredentials(raw, errors, context);
}

/** `config.auth` as the API shows it: the client secret "[redacted]" when there is one. */
export function publicAuth(stored: unknown, hasClientSecret: boolean): Record<string, unknown> {
  const auth = isObject(stored) ? stored : HEADERS_AUTH;
  return auth.type === 'headers' ? { type: 'headers' } : { ...auth, client_secret: hasClientSecret ? REDACTED : null };
}
