import { type ApiModule, MAINTENANCE_EVERY_MS } from '../../api/api-module.js';
import { oauthOperations } from './oauth.graphql.js';

export const oauthModule: ApiModule = {
  name: 'oauth',
  operations: oauthOperations,
  jobs: [
    {
      // Registrations unused for 30 days, and codes and refresh tokens long expired.
      failure: 'maintenance failed',
      everyMs: () => MAINTENANCE_EVERY_MS,
      run: (services) => services.oauth.prune(),
    },
  ],
};
