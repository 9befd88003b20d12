import type { ApiModule } from '../../api/api-module.js';
import type { LoadersMadeBy } from '../../api/request-loaders.js';
import { manifestLoaders } from './manifest.loaders.js';
import { manifestOperations } from './manifest.graphql.js';

export { type AgentKey, byAgent } from './manifest.loaders.js';

export const manifestModule: ApiModule = {
  name: 'manifest',
  operations: manifestOperations,
  loaders: manifestLoaders,
};

export type ManifestLoaders = LoadersMadeBy<typeof manifestLoaders>;
declare module '../../api/services.js' {
  interface Loaders extends ManifestLoaders {}
}
