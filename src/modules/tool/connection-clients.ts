import type { Deps } from '../../deps.js';
import type { SqlConnection } from '../../db/sql.js';
import { AppError } from '../../errors.js';
import type { Tool } from '../../generated/prisma/client.js';
import type { NetworkAccess } from '../../lib/address-policy.js';
import { SecretUnavailableError } from '../../lib/secret-box.js';
import { type OAuthToolAuth, oauthAuthOf } from './tool-connections.js';
import { findRegisteredClient, type RegisteredClientRow, saveRegisteredClient } from './tool-connections.store.js';
import {
  type AuthorizationServer,
  type OAuthResult,
  type RegisteredClient,
  registerClient,
  UPSTREAM_CLIENT_NAME,
  upstreamClientId,
  upstreamRedirectUri,
} from './upstream-oauth.js';

/**
 * The OAuth client a tool's connections go with at its upstream's authorization server: the
 * tool's given one (`config.auth.client_id`), or one the gateway registers there (its client
 * metadata document, or RFC 7591) and keeps, per tool and server, for the next connections; and
 * the networks the tool's upstream may be reached on.
 */

/** The clients of the tools' connections, and how their upstreams are reached. */
export function createConnectionClients({ env, db, secrets }: Pick<Deps, 'env' | 'db' | 'secrets'>) {
  const redirectUri = upstreamRedirectUri(env.publicUrl);
  // Servers fetch only https client ids: a plain-http deployment registers dynamically instead.
  const clientMetadataUrl = env.publicUrl.startsWith('https:') ? upstreamClientId(env.publicUrl) : undefined;
  const accessOf = (tool: Pick<Tool, 'allowPrivateNetwork'>): NetworkAccess => ({
    privateNetworks: env.outboundPrivateNetworks,
    allowPrivateNetwork: tool.allowPrivateNetwork,
  });

  /** The client of the tool's `config.auth`, secret opened. */
  function givenClient(tool: Tool, auth: OAuthToolAuth): { client_id: string; client_secret?: string } {
    let secret: string | null;
    try {
      secret = tool.authClientSecret === null ? null : secrets.open(tool.authClientSecret);
    } catch (error) {
      if (!(error instanceof SecretUnavailableError)) throw error;
      throw new AppError(
        'SERVICE_UNAVAILABLE',
        "The tool's OAuth client secret cannot be decrypted with this service's KEY_ENCRYPTION_KEY",
      );
    }
    return { client_id: auth.client_id!, ...(secret ? { client_secret: secret } : {}) };
  }

  const registeredOf = (row: RegisteredClientRow): RegisteredClient => ({
    client_id: row.client_id,
    ...(row.client_secret ? { client_secret: secrets.open(row.client_secret) } : {}),
    token_endpoint_auth_method: row.token_endpoint_auth_method,
    registration: row.registration,
  });

  /** A kept registration still serves: the same redirect URI, a secret not about to expire, the document still ours. */
  const stillUsable = (row: RegisteredClientRow) =>
    row.redirect_uri === redirectUri &&
    (row.client_secret_expires_at === null || row.client_secret_expires_at.getTime() > Date.now() + 60_000) &&
    (row.registration !== 'metadata_document' || row.client_id === clientMetadataUrl);

  /**
   * The client a new authorization goes with: the tool's given one as is; else the one the tool
   * registered at this server before; else a new registration (its metadata document, or RFC
   * 7591), kept for the next connections.
   */
  async function clientForNewAuthorization(
    tool: Tool,
    auth: OAuthToolAuth,
    as: AuthorizationServer,
    access: NetworkAccess,
  ): Promise<OAuthResult<RegisteredClient>> {
    const request = { redirectUri, clientName: UPSTREAM_CLIENT_NAME, clientMetadataUrl };
    if (auth.client_id) return registerClient(as, { ...request, given: givenClient(tool, auth) }, access);
    const stored = await findRegisteredClient(db.sql, tool.id, as.issuer);
    if (stored && stillUsable(stored)) return { ok: true, value: registeredOf(stored) };
    const registered = await registerClient(as, request, access);
    if (!registered.ok) return registered;
    const client = registered.value;
    const kept = await saveRegisteredClient(
      db.sql,
      {
        tool_id: tool.id,
        issuer: as.issuer,
        redirect_uri: redirectUri,
        client_id: client.client_id,
        client_secret: client.client_secret ? secrets.seal(client.client_secret) : null,
        client_secret_expires_at: client.client_secret_expires_at
          ? new Date(client.client_secret_expires_at * 1000)
          : null,
        token_endpoint_auth_method: client.token_endpoint_auth_method,
        registration: client.registration as RegisteredClientRow['registration'],
      },
      stored?.client_id ?? null,
    );
    return { ok: true, value: registeredOf(kept) };
  }

  /**
   * The client tokens were issued to, as it stands now: the tool's given one (only while it is
   * still that client), else the registration the tool keeps for that server. Undefined when it is
   * no longer there: the tokens cannot be used with any other.
   */
  async function clientOfTokens(
    conn: SqlConnection,
    tool: Tool,
    held: { authorization_server: unknown; client_id: string | null; registration: string | null },
  ): Promise<RegisteredClient | undefined> {
    const as = held.authorization_server as AuthorizationServer | null;
    if (!as || !held.client_id || !held.registration) return undefined;
    const auth = oauthAuthOf(tool);
    if (held.registration === 'given') {
      if (!auth || auth.client_id !== held.client_id) return undefined;
      const request = { given: givenClient(tool, auth), redirectUri, clientName: UPSTREAM_CLIENT_NAME };
      // A given client is not registered anywhere: this only works out how it authenticates there.
      const given = await registerClient(as, request, accessOf(tool));
      return given.ok ? given.value : undefined;
    }
    const stored = await findRegisteredClient(conn, tool.id, as.issuer);
    return stored && stored.client_id === held.client_id ? registeredOf(stored) : undefined;
  }

  return { redirectUri, accessOf, registeredOf, clientForNewAuthorization, clientOfTokens };
}

export type ConnectionClients = ReturnType<typeof createConnectionClients>;
