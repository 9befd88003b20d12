import type { ApiModule } from '../../api/api-module.js';
import { orgOperations } from './org.graphql.js';

export const orgModule: ApiModule = {
  name: 'org',
  operations: orgOperations,
};
