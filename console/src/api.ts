/**
 * The console's only way to the service: POST /graphql with the typed operations codegen makes
 * from console/graphql/*.graphql, and the session they run under.
 *
 * The session (access token, refresh token, expiry, user) lives in memory and in sessionStorage,
 * never in localStorage: it survives a reload of the tab but not the tab itself, and other tabs
 * and later visits do not inherit it. A token about to expire, or one the service refuses with
 * INVALID_TOKEN, is exchanged once with `refresh_session`; refresh tokens are single-use (a reused
 * one revokes the whole session), so concurrent requests share one refresh in flight.
 */
import {
  LogoutDocument,
  RefreshSessionDocument,
  SessionLoginDocument,
  type SessionLoginMutation,
  SsoExchangeDocument,
  type SsoExchangeMutation,
  type TypedDocumentString,
} from '../generated/graphql';

export type SignedInUser = SessionLoginMutation['session_login']['user'];

export interface Session {
  token: string;
  refresh_token: string;
  /** ISO timestamp of the access token's expiry. */
  expires: string;
  user: SignedInUser;
}

const STORAGE_KEY = 'agent-gateway.console.session';
/** Refresh this long before the access token expires, so no request goes out with a dying token. */
const REFRESH_MARGIN_MS = 60_000;

export interface FieldProblem {
  field: string;
  message: string;
  /** Where in a policy condition (CEL) the problem is. */
  position?: { offset: number; line: number; column: number };
}

export class ApiError extends Error {
  constructor(
    message: string,
    /** The API's error code (`FORBIDDEN`, `VALIDATION_ERROR`, …) when it gave one. */
    readonly code?: string,
    /**
     * `extensions.details`: for VALIDATION_ERROR, `errors` [{field, message, position?}]; for a
     * CONFLICT about one field (a taken slug or email), `field`.
     */
    readonly details?: { errors?: FieldProblem[]; field?: string },
  ) {
    super(message);
  }
}

function loadSession(): Session | null {
  try {
    const stored = sessionStorage.getItem(STORAGE_KEY);
    return stored ? (JSON.parse(stored) as Session) : null;
  } catch {
    return null;
  }
}

let session: Session | null = loadSession();
/** The service's reason when it refused to renew the session (not set when the user signed out). */
let endedBecause: string | undefined;
const listeners = new Set<(session: Session | null) => void>();

function setSession(next: Session | null, why?: string) {
  session = next;
  endedBecause = why;
  if (next) sessionStorage.setItem(STORAGE_KEY, JSON.stringify(next));
  else sessionStorage.removeItem(STORAGE_KEY);
  for (const listener of listeners) listener(next);
}

export const currentSession = () => session;

/** Why the last session ended, when the service ended it (revoked, expired, single sign-on now required). */
export const whySessionEnded = () => endedBecause;

/** Calls `listener` on every sign-in, refresh and sign-out; returns the unsubscribe. */
export function onSessionChange(listener: (session: Session | null) => void): () => void {
  listeners.add(listener);
  return () => listeners.delete(listener);
}

interface GraphQlBody {
  data?: unknown;
  errors?: { message: string; extensions?: { code?: string; details?: ApiError['details'] } }[];
}

async function post(query: string, variables: unknown, token?: string): Promise<GraphQlBody> {
  const headers: Record<string, string> = { 'content-type': 'application/json', accept: 'application/json' };
  if (token) headers.authorization = `Bearer ${token}`;
  let response: Response;
  try {
    response = await fetch('/graphql', { method: 'POST', headers, body: JSON.stringify({ query, variables }) });
  } catch {
    throw new ApiError('The service cannot be reached; check the connection and try again.', 'NETWORK');
  }
  try {
    return (await response.json()) as GraphQlBody;
  } catch {
    throw new ApiError(`The service answered HTTP ${response.status} without a GraphQL result.`);
  }
}

const errorCode = (body: GraphQlBody) => body.errors?.[0]?.extensions?.code;

let refreshing: Promise<Session> | null = null;

/**
 * One refresh for every caller at once. A refresh token the service refuses (INVALID_TOKEN) ends
 * the session; a refresh that could not be done now (the database away, too many attempts) keeps
 * it, so that a passing outage does not sign the operator out: the next request tries again.
 */
function refresh(expired: Session): Promise<Session> {
  refreshing ??= (async () => {
    const body = await post(RefreshSessionDocument.toString(), { refresh_token: expired.refresh_token });
    const renewed = (body.data as { refresh_session?: Omit<Session, 'user'> } | undefined)?.refresh_session;
    if (!renewed) {
      const error = body.errors?.[0];
      if (error?.extensions?.code !== 'INVALID_TOKEN')
        throw new ApiError(error?.message ?? 'The session could not be renewed; try again.', error?.extensions?.code);
      setSession(null, error.message);
      throw new ApiError(error.message, 'INVALID_TOKEN');
    }
    const next = { ...renewed, user: expired.user };
    setSession(next);
    return next;
  })().finally(() => {
    refreshing = null;
  });
  return refreshing;
}

/** Runs one typed operation under the current session (if any) and returns its data, or throws ApiError. */
export async function request<Result, Variables>(
  document: TypedDocumentString<Result, Variables>,
  variables: Variables,
): Promise<Result> {
  let active = session;
  if (active && Date.parse(active.expires) - Date.now() < REFRESH_MARGIN_MS) active = await refresh(active);
  let body = await post(document.toString(), variables, active?.token);
  if (active && errorCode(body) === 'INVALID_TOKEN') {
    // Revoked or expired early (a refresh in another request, a clock skew): one more try.
    active = await refresh(active);
    body = await post(document.toString(), variables, active.token);
  }
  const error = body.errors?.[0];
  if (error) throw new ApiError(error.message, error.extensions?.code, error.extensions?.details);
  return body.data as Result;
}

/** Keeps the session a sign-in answered, or throws why there is none. */
function keepSignedIn(body: GraphQlBody, signedIn: Session | undefined, failure: string): Session {
  if (!signedIn) {
    const error = body.errors?.[0];
    throw new ApiError(error?.message ?? failure, error?.extensions?.code);
  }
  setSession(signedIn);
  return signedIn;
}

export async function signIn(email: string, password: string): Promise<Session> {
  const body = await post(SessionLoginDocument.toString(), { email, password });
  return keepSignedIn(body, (body.data as SessionLoginMutation | undefined)?.session_login, 'Sign-in failed.');
}

/**
 * Single sign-on's last step: the one-time code the service handed this page (in its fragment,
 * after the organization's identity provider) for a session, as a password sign-in gives.
 */
export async function signInWithSsoCode(code: string): Promise<Session> {
  const body = await post(SsoExchangeDocument.toString(), { code });
  return keepSignedIn(body, (body.data as SsoExchangeMutation | undefined)?.sso_exchange, 'Single sign-on failed.');
}

/** Revokes the session on the service (every token of this login), then forgets it here. */
export async function signOut(): Promise<void> {
  // An expired access token could not log out, and the refresh token would stay usable: renew first.
  const token = await currentToken().catch(() => undefined);
  setSession(null);
  if (token) await post(LogoutDocument.toString(), {}, token).catch(() => undefined);
}

/** The signed-in user changed their own role: what the console offers follows at once, not at the next sign-in. */
export function setSignedInRole(role: SignedInUser['role']): void {
  if (session) setSession({ ...session, user: { ...session.user, role } });
}

/** The bearer token for the few REST calls GraphQL has no field for (streamed exports), refreshed if due. */
export async function currentToken(): Promise<string | undefined> {
  let active = session;
  if (active && Date.parse(active.expires) - Date.now() < REFRESH_MARGIN_MS) active = await refresh(active);
  return active?.token;
}

/** Roles that may decide approvals and change manifests and agents (docs/reference/api-conventions.md#permissions); the API enforces it too. */
export const canDecide = (user: SignedInUser) => user.role === 'admin' || user.role === 'operator';
