import type { ApiModule } from '../../api/api-module.js';
import { authOperations } from './auth.graphql.js';

export const authModule: ApiModule = {
  name: 'auth',
  operations: authOperations,
};
