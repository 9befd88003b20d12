import { type ApiModule, MAINTENANCE_EVERY_MS } from '../../api/api-module.js';
import { authOperations } from './auth.graphql.js';

export const authModule: ApiModule = {
  name: 'auth',
  operations: authOperations,
  jobs: [
    {
      // Refresh tokens, families and revoked access tokens past their expiry.
      failure: 'maintenance failed',
      everyMs: () => MAINTENANCE_EVERY_MS,
      run: (services) => Promise.all([services.sessions.pruneRevokedTokens(), services.sessions.prune()]),
    },
  ],
};
