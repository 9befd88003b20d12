import type { ApiModule } from '../../api/api-module.js';
import { capabilityTokenOperations } from './capability-token.graphql.js';

export const capabilityTokenModule: ApiModule = {
  name: 'capability-token',
  operations: capabilityTokenOperations,
};
