import type { ApiModule } from '../../api/api-module.js';
import { oauthOperations } from './oauth.graphql.js';

export const oauthModule: ApiModule = {
  name: 'oauth',
  operations: oauthOperations,
};
