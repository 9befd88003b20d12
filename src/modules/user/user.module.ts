import type { ApiModule } from '../../api/api-module.js';
import { userOperations } from './user.graphql.js';

export const userModule: ApiModule = {
  name: 'user',
  operations: userOperations,
};
