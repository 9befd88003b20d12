import type { Deps } from './deps.js';
import { createApiKeyService } from './modules/api-key/api-key.service.js';
import { createAuthenticator } from './modules/auth/authenticate.js';
import { createSessionService } from './modules/auth/session.service.js';
import { createManifestService } from './modules/manifest/manifest.service.js';
import { createOperatorRateLimit } from './modules/org/operator-rate-limit.js';
import { createOrgService } from './modules/org/org.service.js';
import { createUserService } from './modules/user/user.service.js';

export function createServices(deps: Deps) {
  const sessions = createSessionService(deps);
  const apiKeys = createApiKeyService(deps);
  return {
    ...deps,
    orgs: createOrgService(deps),
    users: createUserService(deps),
    manifests: createManifestService(deps),
    sessions,
    apiKeys,
    authenticate: createAuthenticator({ sessions, apiKeys, countOperatorRequest: createOperatorRateLimit(deps) }),
  };
}

export type Services = ReturnType<typeof createServices>;
