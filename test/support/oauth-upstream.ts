import { randomBytes } from 'node:crypto';
import { createMcpHandler, McpServer } from '@modelcontextprotocol/server';
import { createRemoteJWKSet, exportJWK, generateKeyPair, jwtVerify, type JWTPayload } from 'jose';
import { type Configuration, errors } from 'oidc-provider';
import { plainTextErrors, type ServedProvider, serveProvider } from './oidc-provider.js';
import { type Hit, type RecordingServer, startRecordingServer } from './recording-server.js';
import { serveWithWebHandler } from './web-handler.js';
import type { RequestOptions, TestResponse } from './app.js';

/**
 * An upstream that wants OAuth, as the gateway's upstream OAuth client meets it
 * (docs/decisions/0067-upstream-oauth-client.md): panva's `oidc-provider` as the authorization
 * server, and an MCP server of the official SDK that takes only the provider's tokens for itself.
 * Both on loopback ports; the provider's development login and consent forms are driven over
 * HTTP (`signInAtProvider` in oidc-provider.ts).
 */

/** The one scope the upstream's tools need. */
export const TOOLS_SCOPE = 'tools:call';

export interface TestAuthorizationServer extends ServedProvider {
  /** A client registered by hand for the client credentials grant (a machine API). */
  machine: { client_id: string; client_secret: string };
  /** A client registered by hand for the code flow (a tool's `client_id`/`client_secret`). */
  given: { client_id: string; client_secret: string };
}

export interface AuthorizationServerOptions {
  /** The resources (upstream URLs) it issues tokens for; any other `resource` is `invalid_target`. */
  resources: () => string[];
  /** The gateway's redirect URI, registered for the hand-made code-flow client. */
  redirectUri: string;
  /** Accept Client ID Metadata Documents, fetched with this (the provider's own fetch refuses loopback). */
  fetchClientDocument?: (url: string | URL | Request) => Promise<Response>;
  /** Another loopback address to listen on (a second server for the mix-up tests). */
  host?: string;
  /** Seconds an access token lives, asked at each issue (default 600): short-lived tokens for refresh tests. */
  accessTokenTtl?: () => number;
}

/**
 * The authorization server: dynamic registration, PKCE required, resource indicators (a JWT access
 * token bound to the resource), rotating refresh tokens issued to every client that may refresh,
 * revocation, client credentials, `iss` in the authorization response (oidc-provider always
 * advertises `authorization_response_iss_parameter_supported`), and, when asked, Client ID Metadata
 * Documents.
 */
export async function startAuthorizationServer(options: AuthorizationServerOptions): Promise<TestAuthorizationServer> {
  const { privateKey } = await generateKeyPair('ES256', { extractable: true });
  const signingKey = { ...(await exportJWK(privateKey)), kid: 'at', alg: 'ES256', use: 'sig' };
  const machine = { client_id: 'machine', client_secret: randomBytes(24).toString('base64url') };
  const given = { client_id: 'given', client_secret: randomBytes(24).toString('base64url') };
  const served = await serveProvider(
    () => ({
      clients: [
        { ...machine, grant_types: ['client_credentials'], redirect_uris: [], response_types: [] },
        { ...given, grant_types: ['authorization_code', 'refresh_token'], redirect_uris: [options.redirectUri] },
      ],
      jwks: { keys: [signingKey] },
      // Its one key is ES256; clients default to RS256 ID tokens, which it could not sign.
      clientDefaults: { id_token_signed_response_alg: 'ES256' },
      findAccount: (_ctx, id) => ({ accountId: id, claims: () => ({ sub: id }) }),
      cookies: { keys: [randomBytes(16).toString('hex')] },
      features: features(options),
      pkce: { required: () => true },
      rotateRefreshToken: true,
      issueRefreshToken: (_ctx, client) => client.grantTypeAllowed('refresh_token'),
      ...(options.fetchClientDocument ? { fetch: options.fetchClientDocument } : {}),
      renderError: plainTextErrors,
      ttl: {
        AccessToken: () => options.accessTokenTtl?.() ?? 600,
        AuthorizationCode: 60,
        ClientCredentials: 600,
        Grant: 3600,
        Interaction: 600,
        Session: 3600,
        RefreshToken: 3600,
      },
    }),
    options.host,
  );
  return { ...served, machine, given };
}

function features(options: AuthorizationServerOptions): Configuration['features'] {
  return {
    devInteractions: { enabled: true },
    registration: { enabled: true },
    // A client revokes only its own tokens.
    revocation: { enabled: true, allowedPolicy: (_ctx, client, token) => token.clientId === client.clientId },
    clientCredentials: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: () => undefined as unknown as string,
      // The code's resource is the one the browser's request named; the token request repeats it.
      useGrantedResource: () => true,
      getResourceServerInfo: (_ctx, indicator) => {
        if (!options.resources().includes(indicator)) throw new errors.InvalidTarget();
        return { scope: TOOLS_SCOPE, audience: indicator, accessTokenFormat: 'jwt', jwt: { sign: { alg: 'ES256' } } };
      },
    },
    clientIdMetadataDocument: { enabled: options.fetchClientDocument !== undefined, ack: 'draft-02' },
  };
}

export interface ProtectedMcpServer {
  /** The MCP endpoint: `<base>/mcp`, the resource its tokens must name. */
  url: string;
  /** A plain JSON endpoint for the http connector (`POST`), a resource of its own: `<base>/http`. */
  httpUrl: string;
  base: string;
  /** Where the 401's challenge says its metadata is (not a well-known URI, so a test can tell which was read). */
  metadataUrl: string;
  hits: Hit[];
  close(): Promise<void>;
}

export interface ProtectedMcpOptions {
  /** The authorization server its metadata names. */
  issuer: string;
  /** Where it serves its RFC 9728 metadata besides the challenge's URL: path-inserted, the origin's, or nowhere else. */
  wellKnown?: 'path' | 'origin' | 'none';
  /** While it answers a URL, every MCP request is redirected there (307) instead of served. */
  redirectTo?: () => string | undefined;
}

/**
 * The upstream MCP server: a tool `whoami` behind a bearer token it verifies itself (signature by
 * the provider's key set, `iss`, `aud` = its own URL, the scope). Without one (or with one it
 * refuses) it answers 401 with `WWW-Authenticate: Bearer resource_metadata="…"` (RFC 9728 §5.1).
 */
export async function startProtectedMcpServer(options: ProtectedMcpOptions): Promise<ProtectedMcpServer> {
  const discovery = (await (await fetch(`${options.issuer}/.well-known/openid-configuration`)).json()) as {
    jwks_uri: string;
  };
  const keys = createRemoteJWKSet(new URL(discovery.jwks_uri));
  const hits: Hit[] = [];
  let server: RecordingServer | undefined;
  const at = () => server!.base;
  const metadata = (resource: string) => ({
    resource,
    authorization_servers: [options.issuer],
    scopes_supported: [TOOLS_SCOPE],
    bearer_methods_supported: ['header'],
  });
  const wellKnown = options.wellKnown ?? 'path';
  const mcp = createMcpHandler(() => whoamiServer());
  server = await startRecordingServer(hits, async (hit, res, req) => {
    const path = hit.path.split('?')[0];
    const json = (status: number, body: unknown) =>
      res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
    if (path === '/resource-metadata') return json(200, metadata(`${at()}/mcp`));
    if (path === '/.well-known/oauth-protected-resource/mcp' && wellKnown === 'path')
      return json(200, metadata(`${at()}/mcp`));
    if (path === '/.well-known/oauth-protected-resource' && wellKnown === 'origin') return json(200, metadata(at()));
    if (path === '/.well-known/oauth-protected-resource/http') return json(200, metadata(`${at()}/http`));
    if (path === '/http') {
      // The http connector's upstream: a JSON API behind the same provider, saying whose token came.
      const caller = await verified(hit.headers.authorization, keys, options.issuer, `${at()}/http`);
      if (!caller)
        return challenge(
          res,
          at(),
          hit.headers.authorization !== undefined,
          '/.well-known/oauth-protected-resource/http',
        );
      return json(200, { sub: caller.sub, action: (JSON.parse(hit.body || '{}') as { action?: unknown }).action });
    }
    if (path !== '/mcp') return json(404, { error: 'not_found' });
    const movedTo = options.redirectTo?.();
    if (movedTo) return res.writeHead(307, { location: movedTo }).end();
    const claims = await verified(hit.headers.authorization, keys, options.issuer, `${at()}/mcp`);
    if (!claims) return challenge(res, at(), hit.headers.authorization !== undefined);
    serveWithWebHandler(mcp.fetch, hit, req, res).catch(() => res.end());
  });
  return {
    url: `${at()}/mcp`,
    httpUrl: `${at()}/http`,
    base: at(),
    metadataUrl: `${at()}/resource-metadata`,
    hits,
    close: () => server.close(),
  };
}

/** The claims of a token for this resource, or undefined when it is missing or refused. */
async function verified(
  authorization: string | undefined,
  keys: ReturnType<typeof createRemoteJWKSet>,
  issuer: string,
  audience: string,
): Promise<JWTPayload | undefined> {
  const token = /^Bearer (\S+)$/.exec(authorization ?? '')?.[1];
  if (!token) return undefined;
  try {
    const { payload } = await jwtVerify(token, keys, { issuer, audience, typ: 'at+jwt' });
    return String(payload.scope ?? '')
      .split(' ')
      .includes(TOOLS_SCOPE)
      ? payload
      : undefined;
  } catch {
    return undefined;
  }
}

function challenge(
  res: import('node:http').ServerResponse,
  base: string,
  tokenSent: boolean,
  metadataPath = '/resource-metadata',
) {
  const error = tokenSent ? ', error="invalid_token"' : '';
  res
    .writeHead(401, {
      'www-authenticate': `Bearer resource_metadata="${base}${metadataPath}", scope="${TOOLS_SCOPE}"${error}`,
      'content-type': 'application/json',
    })
    .end(JSON.stringify({ error: 'unauthorized' }));
}

/** The upstream's one tool: it says who the token was issued to, so a test sees the token was used. */
function whoamiServer(): McpServer {
  const server = new McpServer({ name: 'oauth-upstream', version: '1.0.0' });
  server.registerTool('whoami', {}, async (ctx) => {
    const authorization = ctx.http?.req?.headers.get('authorization') ?? '';
    const [, payload] = authorization.replace(/^Bearer /, '').split('.');
    const claims = JSON.parse(Buffer.from(payload ?? '', 'base64url').toString('utf8') || '{}') as JWTPayload;
    return {
      content: [{ type: 'text', text: `hello ${claims.sub}` }],
      structuredContent: { sub: claims.sub, client_id: claims.client_id, aud: claims.aud },
    };
  });
  return server;
}

/**
 * Creates, as the org's admin, an mcp tool for `actionType` on the protected upstream whose calls
 * go with an OAuth connection (`connection`: whose account) and upstream tool `whoami`.
 */
export async function createConnectedMcpTool(
  send: (method: string, path: string, options?: RequestOptions) => Promise<TestResponse>,
  org: { orgId: string; adminToken: string },
  { actionType, url, connection }: { actionType: string; url: string; connection: 'org' | 'user' },
): Promise<string> {
  const auth = { type: 'oauth', connection };
  const config = { url, allow_private_network: true, tool: 'whoami', auth };
  const created = await send('POST', `/api/v1/orgs/${org.orgId}/tools`, {
    token: org.adminToken,
    body: { action_type: actionType, connector: 'mcp', config },
  });
  if (created.status !== 201) throw new Error(`tool create failed: ${created.status} ${created.text}`);
  return created.body.tool_id;
}
