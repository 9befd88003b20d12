import type { ApiModule } from '../../api/api-module.js';
import { agentOperations } from './agent.graphql.js';

export const agentModule: ApiModule = {
  name: 'agent',
  operations: agentOperations,
};
