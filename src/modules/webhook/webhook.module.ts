import type { ApiModule } from '../../api/api-module.js';
import { webhookOperations } from './webhook.graphql.js';

export const webhookModule: ApiModule = {
  name: 'webhook',
  operations: webhookOperations,
};
