import type { ApiModule } from '../../api/api-module.js';
import { ssoOperations } from './sso.graphql.js';

export const ssoModule: ApiModule = {
  name: 'sso',
  operations: ssoOperations,
};
