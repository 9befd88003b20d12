import type { ApiModule } from '../../api/api-module.js';
import type { LoadersMadeBy } from '../../api/request-loaders.js';
import { agentLoaders } from './agent.loaders.js';
import { agentOperations } from './agent.graphql.js';

export const agentModule: ApiModule = {
  name: 'agent',
  operations: agentOperations,
  loaders: agentLoaders,
};

type AgentLoaders = LoadersMadeBy<typeof agentLoaders>;
declare module '../../api/services.js' {
  interface Loaders extends AgentLoaders {}
}
