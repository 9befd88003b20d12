import type { ApiModule } from '../../api/api-module.js';
import { policyOperations } from './policy.graphql.js';

export const policyModule: ApiModule = {
  name: 'policy',
  operations: policyOperations,
};
