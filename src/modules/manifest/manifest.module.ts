import type { ApiModule } from '../../api/api-module.js';
import { manifestOperations } from './manifest.graphql.js';

export const manifestModule: ApiModule = {
  name: 'manifest',
  operations: manifestOperations,
};
