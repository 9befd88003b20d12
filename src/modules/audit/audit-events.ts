import type { Principal } from '../../authz/authz.js';

/**
 * Every audit event as one typed union: the action name fixes the target type and the shape of
 * what is recorded before and after, so a new write cannot invent an untyped entry.
 */

export type Actor =
  | { type: 'user'; id: string; label: string }
  | { type: 'api_key'; id: string; label: string }
  /** An MCP client acting through its OAuth grant (revoking it with RFC 7009): the grant's id, the client's name. */
  | { type: 'oauth_grant'; id: string; label: string }
  | { type: 'system'; id: null; label: string };

/** The kinds of actor, at run time: the API declares them as a closed set. */
export const ACTOR_TYPES = ['user', 'api_key', 'oauth_grant', 'system'] as const satisfies readonly Actor['type'][];

export function actorOf(principal: Principal): Actor {
  if (principal.type === 'user') return { type: 'user', id: principal.userId, label: principal.email };
  if (principal.type === 'oauth_grant')
    return { type: 'oauth_grant', id: principal.grantId, label: principal.clientLabel };
  return { type: 'api_key', id: principal.keyId, label: principal.keyPrefix };
}

interface OrgSnapshot {
  name: string;
  slug: string;
  operator_rate_limit_per_minute: number;
  approval_ttl_seconds: number;
  record_params: boolean;
}
interface UserSnapshot {
  email: string;
  role: string;
}
interface ApiKeySnapshot {
  name: string;
  key_prefix: string;
  scopes: string[];
  svc_ids: string[];
  /** The user the key acts for; absent on entries from before keys could. */
  user_id?: string | null;
  expires_at: string;
}

interface ManifestSnapshot {
  status: string;
  svc_id?: string;
  manifest_hash?: string;
  approved_capabilities?: string[];
  superseded_by?: string;
}

/** A tool as audited: its config as the API shows it, header values and secret "[redacted]". */
interface ToolSnapshot {
  action_type: string;
  connector: string;
  config: Record<string, unknown>;
}

/** An upstream MCP tool's definition that moved away from its pin, came back to it, appeared or vanished. */
interface ToolDefinitionChange {
  tool_id: string;
  action_type: string;
  name: string;
  status: 'pinned' | 'changed' | 'new' | 'removed';
  pinned_hash: string | null;
  current_hash: string | null;
  diff: string | null;
}

/** A tool's OAuth connection as audited: whose, to which server, as whom; never a token. */
export interface ToolConnectionSnapshot {
  tool_id: string;
  action_type: string;
  scope: 'org' | 'user';
  user_id: string | null;
  status: string;
  issuer: string | null;
  subject: string | null;
  scopes: string[];
}

interface ApprovalSnapshot {
  status: string;
  svc_id: string;
  capability: string;
  action_hash: string;
  notes?: string | null;
}

/** A webhook as audited: never its secret, only whether an update replaced it. */
interface WebhookSnapshot {
  url: string;
  events: string[];
  active: boolean;
  allow_private_network: boolean;
}

interface CapabilityTokenSnapshot {
  svc_id: string;
  capabilities: string[];
  expires_at: string;
  max_uses: number | null;
}

/** A policy as audited: its public fields (as the API shows them) without the timestamps. */
export interface PolicySnapshot {
  policy_id: string;
  name: string;
  description: string;
  enabled: boolean;
  mode: string;
  priority: number;
  effect: string;
  target: { svc_ids: string[] | null; capabilities: string[] | null };
  condition: string | null;
  rate_limit: { limit: number; window_seconds: number; per: string } | null;
  message: string | null;
  /** A label policy's labels; null for other effects (absent from snapshots taken before labels). */
  labels?: string[] | null;
  /** Null without a history window (absent from snapshots taken before history windows). */
  history_window_seconds?: number | null;
  /** A redact policy's detectors; null for other effects (absent from snapshots taken before them). */
  detectors?: string[] | null;
  version: number;
  created_by: string;
  updated_by: string;
}

/** An agent as audited: its identity and state, not its usage. */
interface AgentSnapshot {
  name: string;
  team: string | null;
  owner_email: string | null;
  labels: Record<string, string>;
  status: string;
}

/** A marketplace template as audited: what identifies it and its price. */
interface TemplateSnapshot {
  name: string;
  category: string;
  status: string;
  price: string;
  currency: string;
  content_hash: string;
}

/** A marketplace purchase as audited. */
interface TransactionSnapshot {
  status: string;
  template_id: string;
  content_hash: string;
  amount: string;
  currency: string;
  payment_method: string;
  agent_id: string;
  manifest_id: string | null;
}

/** An MCP client as an org first saw it, when one of its operators allowed it (docs/decisions/0047-mcp-oauth.md). */
interface OAuthClientSnapshot {
  client_name: string | null;
  /** `registered` (Dynamic Client Registration) or `metadata_document` (its client_id is the document's URL). */
  kind: string;
  redirect_uris: string[];
}

/** An OAuth grant as audited: which client may call which agent's tools, and who allowed it. */
export interface OAuthGrantSnapshot {
  svc_id: string;
  client_id: string;
  client_name: string | null;
  redirect_uri: string;
  scope: string;
  approved_by: string;
}

/** An org's single sign-on configuration as audited: never its client secret. */
interface SsoSnapshot {
  issuer: string;
  client_id: string;
  allowed_domains: string[];
  default_role: string;
  role_claim: string | null;
  role_map: Record<string, string> | null;
  scopes: string[];
  enforce: boolean;
  allow_private_network: boolean;
}

type Event<Action extends string, TargetType extends string, Before, After> = {
  action: Action;
  targetType: TargetType;
  targetId: string;
  before?: Before;
  after?: After;
  reason?: string;
};

export type AuditEvent =
  | Event<'org.created', 'organization', never, OrgSnapshot>
  | Event<'org.updated', 'organization', Partial<OrgSnapshot>, Partial<OrgSnapshot>>
  | Event<'user.created', 'user', never, UserSnapshot>
  | Event<'user.role_changed', 'user', UserSnapshot, UserSnapshot>
  | Event<'user.removed', 'user', UserSnapshot, never>
  | Event<'user.provisioned', 'user', never, UserSnapshot & { issuer: string; subject: string }>
  | Event<'session.sso_login', 'user', never, UserSnapshot>
  | Event<
      'sso.configured',
      'sso_configuration',
      SsoSnapshot,
      // password_sessions_ended: when this change turned `enforce` on, the sessions it ended.
      SsoSnapshot & { client_secret_set: boolean; password_sessions_ended?: number }
    >
  | Event<'sso.removed', 'sso_configuration', SsoSnapshot, never>
  | Event<'api_key.created', 'api_key', never, ApiKeySnapshot>
  | Event<'api_key.deleted', 'api_key', ApiKeySnapshot, never>
  | Event<'capability_token.issued', 'capability_token', never, CapabilityTokenSnapshot>
  | Event<'capability_token.revoked', 'capability_token', CapabilityTokenSnapshot, never>
  | Event<'tool.created', 'tool', never, ToolSnapshot>
  | Event<'tool.updated', 'tool', ToolSnapshot, ToolSnapshot & { secrets_set: string[] }>
  | Event<'tool.deleted', 'tool', ToolSnapshot, never>
  | Event<'tool.definitions_pinned', 'tool', never, { definitions: { name: string; pinned_hash: string }[] }>
  | Event<'tool.definition_changed', 'tool', never, ToolDefinitionChange>
  | Event<
      'tool.definitions_accepted',
      'tool',
      never,
      { accepted: Omit<ToolDefinitionChange, 'tool_id' | 'action_type' | 'diff'>[] }
    >
  // Connected (or connected again): the tokens the upstream granted are held from now on.
  | Event<'tool.connection_created', 'tool_connection', ToolConnectionSnapshot, ToolConnectionSnapshot>
  // Revoked by a person, or with its tool or its user; `reason` says which.
  | Event<'tool.connection_revoked', 'tool_connection', ToolConnectionSnapshot, never>
  // The upstream refused its grant (invalid_grant): it needs authorizing again.
  | Event<'tool.connection_expired', 'tool_connection', ToolConnectionSnapshot, never>
  | Event<'approval.approved' | 'approval.denied', 'approval', ApprovalSnapshot, ApprovalSnapshot>
  | Event<'webhook.created', 'webhook', never, WebhookSnapshot & { secret_generated: boolean }>
  | Event<'webhook.updated', 'webhook', WebhookSnapshot, WebhookSnapshot & { secret_rotated: boolean }>
  | Event<'webhook.deleted', 'webhook', WebhookSnapshot, never>
  | Event<'policy.created', 'policy', never, PolicySnapshot>
  | Event<'policy.updated', 'policy', PolicySnapshot, PolicySnapshot>
  | Event<'policy.deleted', 'policy', PolicySnapshot, never>
  | Event<'agent.created', 'agent', never, AgentSnapshot & { from_manifest: string | null }>
  | Event<
      'agent.deactivated',
      'agent',
      AgentSnapshot,
      AgentSnapshot & { approvals_denied: number; capability_tokens_revoked: number; oauth_grants_revoked: number }
    >
  | Event<'agent.reactivated', 'agent', AgentSnapshot, AgentSnapshot>
  | Event<'template.created', 'manifest_template', never, TemplateSnapshot>
  | Event<'template.published' | 'template.archived', 'manifest_template', TemplateSnapshot, TemplateSnapshot>
  | Event<'marketplace.purchased', 'marketplace_transaction', never, TransactionSnapshot>
  | Event<'marketplace.payment_confirmed', 'marketplace_transaction', TransactionSnapshot, TransactionSnapshot>
  | Event<'oauth.client_registered', 'oauth_client', never, OAuthClientSnapshot>
  | Event<'oauth.grant_created', 'oauth_grant', never, OAuthGrantSnapshot>
  | Event<'oauth.grant_revoked', 'oauth_grant', OAuthGrantSnapshot, never>
  | Event<'manifest.registered', 'manifest', never, ManifestSnapshot>
  | Event<
      | 'manifest.approved'
      | 'manifest.rejected'
      | 'manifest.suspended'
      | 'manifest.reactivated'
      | 'manifest.revoked'
      | 'manifest.superseded',
      'manifest',
      ManifestSnapshot,
      ManifestSnapshot
    >;

export type AuditAction = AuditEvent['action'];

/**
 * The target type of every action, at run time: the API declares both as closed sets (OpenAPI
 * enums), and the mapped type makes the compiler refuse this table if an action of the union is
 * missing or names another target type.
 */
type TargetOf<A extends AuditAction, E = AuditEvent> = E extends { action: infer Actions; targetType: infer Target }
  ? A extends Actions
    ? Target
    : never
  : never;
const TARGET_OF_ACTION: { [A in AuditAction]: TargetOf<A> } = {
  'org.created': 'organization',
  'org.updated': 'organization',
  'user.created': 'user',
  'user.role_changed': 'user',
  'user.removed': 'user',
  'user.provisioned': 'user',
  'session.sso_login': 'user',
  'sso.configured': 'sso_configuration',
  'sso.removed': 'sso_configuration',
  'api_key.created': 'api_key',
  'api_key.deleted': 'api_key',
  'capability_token.issued': 'capability_token',
  'capability_token.revoked': 'capability_token',
  'tool.created': 'tool',
  'tool.updated': 'tool',
  'tool.deleted': 'tool',
  'tool.definitions_pinned': 'tool',
  'tool.definition_changed': 'tool',
  'tool.definitions_accepted': 'tool',
  'tool.connection_created': 'tool_connection',
  'tool.connection_revoked': 'tool_connection',
  'tool.connection_expired': 'tool_connection',
  'approval.approved': 'approval',
  'approval.denied': 'approval',
  'webhook.created': 'webhook',
  'webhook.updated': 'webhook',
  'webhook.deleted': 'webhook',
  'policy.created': 'policy',
  'policy.updated': 'policy',
  'policy.deleted': 'policy',
  'agent.created': 'agent',
  'agent.deactivated': 'agent',
  'agent.reactivated': 'agent',
  'template.created': 'manifest_template',
  'template.published': 'manifest_template',
  'template.archived': 'manifest_template',
  'marketplace.purchased': 'marketplace_transaction',
  'marketplace.payment_confirmed': 'marketplace_transaction',
  'oauth.client_registered': 'oauth_client',
  'oauth.grant_created': 'oauth_grant',
  'oauth.grant_revoked': 'oauth_grant',
  'manifest.registered': 'manifest',
  'manifest.approved': 'manifest',
  'manifest.rejected': 'manifest',
  'manifest.suspended': 'manifest',
  'manifest.reactivated': 'manifest',
  'manifest.revoked': 'manifest',
  'manifest.superseded': 'manifest',
};

export const AUDIT_ACTIONS = Object.keys(TARGET_OF_ACTION) as AuditAction[];
export const AUDIT_TARGET_TYPES = [...new Set(Object.values(TARGET_OF_ACTION))];
