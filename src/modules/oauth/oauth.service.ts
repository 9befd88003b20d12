import { randomBytes } from 'node:crypto';
import type { Deps } from '../../deps.js';
import { countAttempt } from '../../lib/attempt-throttle.js';
import { fixedWindow } from '../../lib/rate-counter.js';
import { createMetadataDocumentResolver, isMetadataDocumentUrl } from './client-metadata-document.js';
import {
  acceptRegistration,
  isRegistrationError,
  type ClientRegistration,
  type KnownClient,
  type RegistrationError,
} from './oauth-client.js';
import { createConsent, type ConsentAgent } from './consent.js';
import { createGrants } from './grants.js';
import { authorizationServerMetadata, protectedResourceMetadata } from './oauth-metadata.js';
import { deleteExpiredClients, deleteExpiredSecrets, findClient, insertClient, touchClient } from './oauth.store.js';
import { createTokenEndpoint } from './token-endpoint.js';

/**
 * The gateway as the OAuth 2.1 authorization server of its MCP endpoints
 * (docs/decisions/0047-mcp-oauth.md): the metadata documents, client registration, the
 * authorization endpoint and its consent (consent.ts), the token and revocation endpoints
 * (token-endpoint.ts), and grants with the check of access tokens at `/mcp/{svc_id}` (grants.ts).
 */

/** A registered client's id: `agc_` and 22 base64url characters (16 random bytes). */
const registeredClientIdPattern = /^agc_[A-Za-z0-9_-]{22}$/;

/** A registration unused this long expires. */
export const CLIENT_UNUSED_DAYS = 30;

/** What a successful registration answers (RFC 7591 §3.2.1). */
export interface RegisteredClient extends ClientRegistration {
  client_id: string;
  client_id_issued_at: number;
  token_endpoint_auth_method: 'none';
  grant_types: ['authorization_code', 'refresh_token'];
  response_types: ['code'];
}

const registered = (clientId: string, registration: ClientRegistration, issuedAt: Date): RegisteredClient => ({
  client_id: clientId,
  client_id_issued_at: Math.floor(issuedAt.getTime() / 1000),
  ...registration,
  token_endpoint_auth_method: 'none',
  grant_types: ['authorization_code', 'refresh_token'],
  response_types: ['code'],
});

interface Collaborators {
  /** The agent of the org by that id (the consent page shows it), or null. */
  findAgent(orgId: string, svcId: string): Promise<ConsentAgent | null>;
}

export function createOAuthService(
  deps: Pick<Deps, 'env' | 'db' | 'logger' | 'keys' | 'cache'>,
  { findAgent }: Collaborators,
) {
  const { env, db, logger } = deps;
  const metadataDocuments = createMetadataDocumentResolver({
    allowLoopbackHttp: env.oauthClientMetadataLoopback,
    privateNetworks: env.outboundPrivateNetworks,
  });

  /**
   * The client a `client_id` names: a registration that has not expired, or, when the id is an
   * https URL, the client its metadata document describes; otherwise why it is unknown. With the
   * address of the request that needs it, a document that must be fetched is counted against it.
   */
  async function resolveClient(
    clientId: string,
    clientAddress?: string,
  ): Promise<{ client: KnownClient } | { unknown: string }> {
    if (isMetadataDocumentUrl(clientId, env.oauthClientMetadataLoopback)) {
      // Every fetch is counted for the address that caused it: the documents are fetched on behalf
      // of anonymous callers, each one a request to a host they name (OAUTH_CLIENT_DOCUMENTS_PER_ADDRESS).
      const throttle = clientAddress
        ? () =>
            countAttempt(
              db.sql,
              [
                {
                  bucket: `oauth-client-documents:address:${clientAddress}`,
                  limit: env.oauthClientDocumentsPerAddress,
                },
              ],
              fixedWindow(3600),
              { message: 'Too many client metadata documents fetched for this address; try again later', period: '1h' },
            )
        : undefined;
      const outcome = await metadataDocuments.resolve(clientId, throttle);
      if ('refused' in outcome) return { unknown: outcome.refused };
      return { client: { client_id: clientId, kind: 'metadata_document', registration: outcome.client } };
    }
    // Anything else was never issued here: refused without a query (a NUL would fail one).
    const row = registeredClientIdPattern.test(clientId)
      ? await findClient(db.sql, clientId, CLIENT_UNUSED_DAYS)
      : undefined;
    if (!row)
      return { unknown: 'the client_id is not registered here, or its registration expired (unused for 30 days)' };
    return { client: { client_id: row.client_id, kind: 'registered', registration: row.metadata } };
  }
  const markClientUsed = (clientId: string) => touchClient(db.sql, clientId);
  const grants = createGrants(deps);
  const consent = createConsent(deps, { resolveClient, touchClient: markClientUsed, findAgent });
  const tokens = createTokenEndpoint(deps, { grants, touchClient: markClientUsed });

  return {
    authorizationServerMetadata: () => authorizationServerMetadata(env.publicUrl),
    protectedResourceMetadata: (svcId: string) => protectedResourceMetadata(env.publicUrl, svcId),

    /**
     * Dynamic Client Registration: the metadata is checked first (a refused one costs no count),
     * then the address's registrations are counted (OAUTH_REGISTRATIONS_PER_ADDRESS an hour; past
     * it, 429 POLICY_VIOLATION), then the client is stored.
     */
    async registerClient(body: unknown, clientAddress: string): Promise<RegisteredClient | RegistrationError> {
      const registration = acceptRegistration(body);
      if (isRegistrationError(registration)) return registration;
      await countAttempt(
        db.sql,
        [{ bucket: `oauth-registrations:address:${clientAddress}`, limit: env.oauthRegistrationsPerAddress }],
        fixedWindow(3600),
        { message: 'Too many client registrations from this address; try again later', period: '1h' },
      );
      const clientId = `agc_${randomBytes(16).toString('base64url')}`;
      const row = await insertClient(db.sql, clientId, registration, clientAddress);
      logger.info(
        { client_id: clientId, client_name: registration.client_name, client_address: clientAddress },
        'oauth client registered',
      );
      return registered(row.client_id, row.metadata, row.created_at);
    },

    resolveClient,

    /** `GET /oauth/authorize`: to the consent page (`consentPath`), back to the client with an error, or a page saying why. */
    authorize: consent.authorize,
    /** The consent page: what it shows the signed-in operator, and their answer. */
    describeAuthorization: consent.describe,
    decideAuthorization: consent.decide,

    /** `POST /oauth/token` and `POST /oauth/revoke` (RFC 7009). */
    token: tokens.token,
    revokeToken: tokens.revoke,

    /** The principal of an access token at `/mcp/{svc_id}`, or why it is refused. */
    authenticateAccessToken: grants.authenticate,
    /** An agent's standing grants; revoking one (404 when there is none); all of them (the agent's deactivation). */
    listGrants: grants.list,
    revokeGrant: grants.revoke,
    revokeAllGrantsOfAgent: grants.revokeAllOfAgent,

    /** Maintenance: deletes registrations unused for 30 days, and codes and refresh tokens long expired. */
    async prune(): Promise<void> {
      await deleteExpiredClients(db.sql, CLIENT_UNUSED_DAYS);
      await deleteExpiredSecrets(db.sql);
    },
  };
}

export type OAuthService = ReturnType<typeof createOAuthService>;
