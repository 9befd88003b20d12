import type { Deps } from './deps.js';
import { createAgentService } from './modules/agent/agent.service.js';
import { createApiKeyService } from './modules/api-key/api-key.service.js';
import { createSessionService } from './modules/auth/session.service.js';
import { createManifestService } from './modules/manifest/manifest.service.js';
import { createMcpService } from './modules/mcp/mcp.service.js';
import { createPurchaseService } from './modules/marketplace/purchase.service.js';
import { createTemplateService } from './modules/marketplace/template.service.js';
import { createApprovalService } from './modules/approval/approval.service.js';
import { createAuditService } from './modules/audit/audit.service.js';
import { createCapabilityTokenService } from './modules/capability-token/capability-token.service.js';
import { createExecutionJournal } from './modules/gateway/execution-journal.js';
import { createGatewayService } from './modules/gateway/gateway.service.js';
import { createPolicyService } from './modules/policy/policy.service.js';
import { createRecordService } from './modules/record/record.service.js';
import { createToolService } from './modules/tool/tool.service.js';
import { createOperatorRateLimit, operatorQuota } from './modules/org/operator-rate-limit.js';
import { createOrgService } from './modules/org/org.service.js';
import { createUserService } from './modules/user/user.service.js';
import { createSsoService } from './modules/sso/sso.service.js';
import { createWebhookService } from './modules/webhook/webhook.service.js';
import { createOAuthService } from './modules/oauth/oauth.service.js';
import type { WebhookWake } from './modules/webhook/webhook.service.js';

/** `webhooks`: the app's webhook dispatcher, which the services that enqueue events wake. */
export function createServices(deps: Deps, { webhooks }: { webhooks: WebhookWake }) {
  // Users and tools need each other: removing a user revokes their tool connections, and a
  // connection's callback checks the user who started it. Neither calls the other while being built.
  const users = createUserService(deps, {
    connections: { removeAllOfUser: (...args) => tools.removeConnectionsOfUser(...args) },
  });
  // Sessions and single sign-on need each other: an org that enforces SSO refuses password logins,
  // and an SSO sign-in starts a session. Neither calls the other while being built.
  const sessions = createSessionService(deps, {
    users,
    passwordLoginRefusal: (user) => sso.passwordLoginRefusal(user),
  });
  const sso = createSsoService(deps, { users, sessions });
  const apiKeys = createApiKeyService(deps, { users });
  const records = createRecordService(deps);
  const tools = createToolService(deps, { webhooks, users });
  const manifests = createManifestService(deps);
  const tokens = createCapabilityTokenService(deps, { manifests });
  const approvals = createApprovalService(deps, { webhooks });
  const orgs = createOrgService(deps, { users });
  const policies = createPolicyService(deps);
  // Agents and OAuth need each other: deactivating an agent revokes its grants, and the consent
  // page shows the agent. Neither calls the other while being built.
  const agents = createAgentService(deps, {
    approvals,
    tokens,
    grants: { revokeAllOfAgent: (...args) => oauth.revokeAllGrantsOfAgent(...args) },
  });
  const oauth = createOAuthService(deps, { findAgent: (orgId, svcId) => agents.summary(orgId, svcId) });
  const templates = createTemplateService(deps);
  const journal = createExecutionJournal(deps, records);
  const countOperatorRequests = createOperatorRateLimit(deps);
  const purchases = createPurchaseService(deps, { manifests, templates });
  const gateway = createGatewayService(deps, {
    agents,
    manifests,
    orgs,
    tools,
    tokens,
    approvals,
    records,
    journal,
    policies,
  });
  return {
    /**
     * The Prisma client that Pothos's prisma plugin loads a selection's relations with
     * (src/api/builder.ts); resolvers reach data through the services.
     */
    graphqlPrisma: deps.db.prisma,
    orgs,
    users,
    audit: createAuditService(deps),
    manifests,
    agents,
    tools,
    records,
    tokens,
    approvals,
    webhooks: createWebhookService(deps),
    policies,
    templates,
    purchases,
    journal,
    gateway,
    oauth,
    mcp: createMcpService({ agents, manifests, tools, policies, purchases, gateway }, deps.env),
    sessions,
    sso,
    apiKeys,
    /** The org's operator rate limit; the edge counts requests with it (src/http/authenticate.ts, guard.ts). */
    countOperatorRequests,
    /** Judges a count the bearer check took (the quota, or 429 past the limit). */
    operatorQuota,
  };
}

export type Services = ReturnType<typeof createServices>;

type BuiltServices = Services;
declare module './api/services.js' {
  /** The API layer's name for what this file builds (src/api/services.ts). */
  interface Services extends BuiltServices {}
}
