import type { ApiModule } from '../../api/api-module.js';
import { gatewayOperations } from './gateway.graphql.js';

export const gatewayModule: ApiModule = {
  name: 'gateway',
  operations: gatewayOperations,
};
