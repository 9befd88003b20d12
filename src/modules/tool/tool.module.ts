import type { ApiModule } from '../../api/api-module.js';
import { toolOperations } from './tool.graphql.js';

export const toolModule: ApiModule = {
  name: 'tool',
  operations: toolOperations,
};
