import type { AppError } from '../errors.js';
/**
 * Who is calling and what they may do: the one principal type, the typed list of actions, and
 * the permission table (docs/reference/api-conventions.md#permissions). Resolvers name
 * an action; nothing else in the code compares roles or scopes.
 */

export const userRoles = ['admin', 'operator', 'viewer'] as const;
export type UserRole = (typeof userRoles)[number];

export const apiKeyScopes = [
  'gateway:execute',
  'gateway:evaluate',
  'manifests:read',
  'manifests:write',
  'logs:read',
  'logs:export',
  'approvals:read',
  'approvals:write',
] as const;
export type ApiKeyScope = (typeof apiKeyScopes)[number];

export interface UserPrincipal {
  type: 'user';
  userId: string;
  orgId: string;
  email: string;
  role: UserRole;
  /** `jti` of the bearer token, for refresh and logout. */
  tokenId: string;
  tokenExpiresAt: Date;
  /** The session family of the bearer token (`sid`): logout and refresh-token reuse revoke it whole. */
  sessionFamilyId: string;
  /**
   * The org's data version the bearer check read with the role, when this request's check did:
   * the answer cache serves only answers kept for it (src/http/answer-cache.ts).
   */
  orgDataVersion?: string;
}

export interface ApiKeyPrincipal {
  type: 'api_key';
  keyId: string;
  orgId: string;
  keyPrefix: string;
  scopes: readonly ApiKeyScope[];
  /** Agent ids the key is limited to; empty means every agent of the org. */
  svcIds: readonly string[];
  /** The user the key acts for: its calls use that user's upstream connections. */
  userId: string | null;
}

/**
 * An MCP client calling one agent's tools with an OAuth access token (docs/decisions/0047-mcp-oauth.md):
 * the grant an operator made for that client and agent. Accepted only at `/mcp/{svc_id}` of the
 * token's audience, never on REST or GraphQL.
 */
export interface OAuthGrantPrincipal {
  type: 'oauth_grant';
  grantId: string;
  orgId: string;
  /** The one agent the grant is for: the access token's audience. */
  svcId: string;
  clientId: string;
  /** The client's name as the operator saw it at consent, else its client id. */
  clientLabel: string;
  scopes: readonly string[];
  /** The user who allowed the grant: tools whose OAuth connections are per user use theirs. */
  userId: string | null;
}

export type Principal = UserPrincipal | ApiKeyPrincipal | OAuthGrantPrincipal;

/** The principals an agent calls the gateway with at its MCP endpoint. */
export type AgentPrincipal = ApiKeyPrincipal | OAuthGrantPrincipal;

/** How a principal is named where something records who did it: a user's email, an API key's or a grant's id. */
export function principalName(principal: Principal): string {
  if (principal.type === 'user') return principal.email;
  return principal.type === 'api_key' ? principal.keyId : principal.grantId;
}

/** The user behind a principal, when it is one. */
export const userIdOf = (principal: Principal): string | null => (principal.type === 'user' ? principal.userId : null);

/** The outcome of reading a request's credentials: a principal, nothing, or a rejected credential. */
export type AuthState = { principal: Principal } | { principal: null; error?: AppError };

interface Permission {
  roles: readonly UserRole[];
  /** Any one of these scopes suffices. Empty: never allowed with an API key. */
  keyScopes: readonly ApiKeyScope[];
}

const anyRole = userRoles;
const managers = ['admin', 'operator'] as const;
const adminOnly = ['admin'] as const;

export const permissions = {
  'org:read': { roles: anyRole, keyScopes: [] },
  'org:update': { roles: adminOnly, keyScopes: [] },
  'user:read': { roles: adminOnly, keyScopes: [] },
  'user:create': { roles: adminOnly, keyScopes: [] },
  /** Changing a user's role; the org's last admin keeps theirs (docs/decisions/0060-user-roles-and-removal.md). */
  'user:update': { roles: adminOnly, keyScopes: [] },
  'user:delete': { roles: adminOnly, keyScopes: [] },
  /** Single sign-on configuration (docs/decisions/0061-operator-single-sign-on.md). */
  'sso:read': { roles: adminOnly, keyScopes: [] },
  'sso:configure': { roles: adminOnly, keyScopes: [] },
  'api_key:read': { roles: adminOnly, keyScopes: [] },
  'api_key:write': { roles: adminOnly, keyScopes: [] },
  'manifest:read': { roles: anyRole, keyScopes: ['manifests:read'] },
  'manifest:write': { roles: managers, keyScopes: ['manifests:write'] },
  'manifest:transition': { roles: managers, keyScopes: [] },
  'gateway:execute': { roles: [], keyScopes: ['gateway:execute'] },
  'gateway:evaluate': { roles: managers, keyScopes: ['gateway:evaluate', 'gateway:execute'] },
  'approval:read': { roles: anyRole, keyScopes: ['approvals:read'] },
  /** The agent polling an approval it asked for. */
  'approval:poll': { roles: [], keyScopes: ['gateway:execute', 'gateway:evaluate', 'approvals:read'] },
  'approval:decide': { roles: managers, keyScopes: ['approvals:write'] },
  'log:read': { roles: anyRole, keyScopes: ['logs:read'] },
  'log:export': { roles: managers, keyScopes: ['logs:export'] },
  'tool:manage': { roles: managers, keyScopes: [] },
  /**
   * A tool's OAuth connections (docs/decisions/0068-upstream-connections.md): any signed-in user
   * reads, makes and revokes their own; the org's connection, and other users', are
   * `tool_connection:manage`'s. Never with an API key: a connection is a person's consent.
   */
  'tool_connection:read': { roles: anyRole, keyScopes: [] },
  'tool_connection:connect': { roles: anyRole, keyScopes: [] },
  'tool_connection:revoke': { roles: anyRole, keyScopes: [] },
  'tool_connection:manage': { roles: managers, keyScopes: [] },
  'capability_token:manage': { roles: managers, keyScopes: [] },
  'webhook:manage': { roles: managers, keyScopes: [] },
  'agent:read': { roles: anyRole, keyScopes: ['manifests:read'] },
  'agent:register': { roles: managers, keyScopes: ['manifests:write'] },
  'agent:deactivate': { roles: managers, keyScopes: [] },
  'agent:reactivate': { roles: adminOnly, keyScopes: [] },
  /** Marketplace templates: an org's own (and browsing every org's published ones). */
  'template:read': { roles: anyRole, keyScopes: [] },
  'template:write': { roles: managers, keyScopes: [] },
  /** Buying, listing purchases and sales, confirming an invoice of one's own sale. */
  'marketplace:trade': { roles: adminOnly, keyScopes: [] },
  /** Policies are operator configuration: no API key scope reads or writes them (docs/decisions/0019-policy-management.md). */
  'policy:read': { roles: anyRole, keyScopes: [] },
  'policy:write': { roles: managers, keyScopes: [] },
  /** OAuth grants of MCP clients (docs/decisions/0047-mcp-oauth.md): any role sees them; allowing and revoking is managing the agent. */
  'oauth_grant:read': { roles: anyRole, keyScopes: [] },
  'oauth_grant:create': { roles: managers, keyScopes: [] },
  'oauth_grant:revoke': { roles: managers, keyScopes: [] },
} as const satisfies Record<string, Permission>;

export type Action = keyof typeof permissions;

/**
 * The agent ids an API key is limited to (`svc_ids`); undefined when the caller may see every
 * agent of the org. A limited key neither sees nor registers other agents or their manifests.
 */
export const agentScope = (principal: Principal | undefined): readonly string[] | undefined => {
  if (principal?.type === 'oauth_grant') return [principal.svcId];
  return principal?.type === 'api_key' && principal.svcIds.length ? principal.svcIds : undefined;
};
export const outOfScope = (principal: Principal | undefined, svcId: string) => {
  const scope = agentScope(principal);
  return scope !== undefined && !scope.includes(svcId);
};

/**
 * `not_found` when the resource belongs to another org: its existence is never revealed.
 * `forbidden` when the caller is in the org but lacks the role or scope.
 */
export type Authorization = 'allow' | 'forbidden' | 'not_found';

export function authorize(principal: Principal, orgId: string, action: Action): Authorization {
  if (principal.orgId !== orgId) return 'not_found';
  return may(principal, action) ? 'allow' : 'forbidden';
}

/**
 * What an OAuth grant's one scope, `mcp:tools`, allows: calling its agent's tools. Nothing else,
 * whatever the table says of API keys.
 */
const grantActions: ReadonlySet<Action> = new Set(['gateway:execute']);

/** The role or scope check alone, for actions whose org comes from the caller itself. */
export function may(principal: Principal, action: Action): boolean {
  const permission: Permission = permissions[action];
  if (principal.type === 'user') return permission.roles.includes(principal.role);
  if (principal.type === 'oauth_grant') return grantActions.has(action);
  return permission.keyScopes.some((scope) => principal.scopes.includes(scope));
}
