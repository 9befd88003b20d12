import type { ApiModule } from '../../api/api-module.js';
import { templateOperations } from './template.graphql.js';
import { purchaseOperations } from './purchase.graphql.js';

export const marketplaceModule: ApiModule = {
  name: 'marketplace',
  operations: [...templateOperations, ...purchaseOperations],
};
