import type { ApiModule } from '../../api/api-module.js';
import { approvalOperations } from './approval.graphql.js';

export const approvalModule: ApiModule = {
  name: 'approval',
  operations: approvalOperations,
};
