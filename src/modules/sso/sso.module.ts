import { type ApiModule, MAINTENANCE_EVERY_MS } from '../../api/api-module.js';
import { ssoOperations } from './sso.graphql.js';

export const ssoModule: ApiModule = {
  name: 'sso',
  operations: ssoOperations,
  jobs: [
    {
      // Sign-in hand-offs past their expiry.
      failure: 'maintenance failed',
      everyMs: () => MAINTENANCE_EVERY_MS,
      run: (services) => services.sso.prune(),
    },
  ],
};
