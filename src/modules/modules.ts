import type { ApiModule } from '../api/api-module.js';
import { userModule } from './user/user.module.js';
import { orgModule } from './org/org.module.js';
import { authModule } from './auth/auth.module.js';
import { apiKeyModule } from './api-key/api-key.module.js';
import { manifestModule } from './manifest/manifest.module.js';
import { toolModule } from './tool/tool.module.js';
import { gatewayModule } from './gateway/gateway.module.js';
import { capabilityTokenModule } from './capability-token/capability-token.module.js';
import { recordModule } from './record/record.module.js';
import { approvalModule } from './approval/approval.module.js';
import { webhookModule } from './webhook/webhook.module.js';
import { policyModule } from './policy/policy.module.js';
import { agentModule } from './agent/agent.module.js';
import { marketplaceModule } from './marketplace/marketplace.module.js';
import { auditModule } from './audit/audit.module.js';
import { oauthModule } from './oauth/oauth.module.js';
import { ssoModule } from './sso/sso.module.js';

/**
 * The modules the API is made of, in the order the OpenAPI document lists their routes. Each says
 * what it contributes in its `*.module.ts`; the edge registers them from here.
 */
export const modules: readonly ApiModule[] = [
  userModule,
  orgModule,
  authModule,
  apiKeyModule,
  manifestModule,
  toolModule,
  approvalModule,
  recordModule,
  gatewayModule,
  capabilityTokenModule,
  webhookModule,
  policyModule,
  agentModule,
  marketplaceModule,
  auditModule,
  oauthModule,
  ssoModule,
];
