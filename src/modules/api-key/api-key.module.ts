import type { ApiModule } from '../../api/api-module.js';
import { apiKeyOperations } from './api-key.graphql.js';

export const apiKeyModule: ApiModule = {
  name: 'api-key',
  operations: apiKeyOperations,
};
