import DataLoader from 'dataloader';
import type { Services } from '../services.js';
import { historyKey } from '../modules/manifest/manifest.service.js';

/**
 * Request-scoped DataLoaders: a list of N items asking for the same relation costs one query.
 * Created per request, so nothing is cached across callers or after a write.
 */
export function createLoaders(services: Services) {
  return {
    manifestHistory: new DataLoader(
      async (agents: readonly { orgId: string; svcId: string }[]) => {
        const byKey = await services.manifests.historyOf(agents);
        return agents.map(({ orgId, svcId }) => byKey.get(historyKey(orgId, svcId)) ?? []);
      },
      { cacheKeyFn: ({ orgId, svcId }) => historyKey(orgId, svcId) },
    ),
  };
}

export type Loaders = ReturnType<typeof createLoaders>;
