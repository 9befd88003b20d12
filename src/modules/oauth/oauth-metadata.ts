/**
 * The documents an MCP client reads to find out how to get a token for `/mcp/{svc_id}`
 * (docs/decisions/0047-mcp-oauth.md): RFC 9728 protected-resource metadata, one per agent, and
 * RFC 8414 authorization-server metadata, one for the gateway (the issuer is PUBLIC_URL). Pure
 * functions of the public URL: nothing here reads the database, so a document names no agent's
 * name and says nothing about whether the agent exists, to anybody who asks.
 */

/** The one scope an MCP client asks for: calling the agent's tools through `/mcp/{svc_id}`. */
export const MCP_SCOPE = 'mcp:tools';

export const AUTHORIZATION_SERVER_METADATA_PATH = '/.well-known/oauth-authorization-server';
export const PROTECTED_RESOURCE_METADATA_PREFIX = '/.well-known/oauth-protected-resource';

export const OAUTH_PATHS = {
  authorize: '/oauth/authorize',
  token: '/oauth/token',
  register: '/oauth/register',
  revoke: '/oauth/revoke',
} as const;

/** `<PUBLIC_URL>/mcp/<svc_id>`: the resource (RFC 8707) and the audience of its access tokens. */
export const mcpResourceUrl = (publicUrl: string, svcId: string) => `${publicUrl}/mcp/${svcId}`;

/** Where the agent's protected-resource metadata is: the well-known prefix before the resource's path (RFC 9728 §3.1). */
export const protectedResourceMetadataUrl = (publicUrl: string, svcId: string) =>
  `${publicUrl}${PROTECTED_RESOURCE_METADATA_PREFIX}/mcp/${svcId}`;

export interface ProtectedResourceMetadata {
  resource: string;
  authorization_servers: string[];
  scopes_supported: string[];
  bearer_methods_supported: string[];
  resource_name: string;
}

export function protectedResourceMetadata(publicUrl: string, svcId: string): ProtectedResourceMetadata {
  return {
    resource: mcpResourceUrl(publicUrl, svcId),
    authorization_servers: [publicUrl],
    scopes_supported: [MCP_SCOPE],
    bearer_methods_supported: ['header'],
    resource_name: `Agent Gateway: the tools of agent ${svcId}`,
  };
}

export function authorizationServerMetadata(publicUrl: string) {
  return {
    issuer: publicUrl,
    authorization_endpoint: `${publicUrl}${OAUTH_PATHS.authorize}`,
    token_endpoint: `${publicUrl}${OAUTH_PATHS.token}`,
    registration_endpoint: `${publicUrl}${OAUTH_PATHS.register}`,
    revocation_endpoint: `${publicUrl}${OAUTH_PATHS.revoke}`,
    // The public keys of the access tokens (RFC 9068 §4), beside the capability and record keys.
    jwks_uri: `${publicUrl}/.well-known/jwks.json`,
    response_types_supported: ['code'],
    grant_types_supported: ['authorization_code', 'refresh_token'],
    code_challenge_methods_supported: ['S256'],
    token_endpoint_auth_methods_supported: ['none'],
    revocation_endpoint_auth_methods_supported: ['none'],
    client_id_metadata_document_supported: true,
    authorization_response_iss_parameter_supported: true,
    scopes_supported: [MCP_SCOPE],
  };
}
