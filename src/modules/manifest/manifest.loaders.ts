import DataLoader from 'dataloader';
import type { LoaderFactories } from '../../api/request-loaders.js';
import { historyKey } from './manifest.service.js';

/** An agent of an org. */
export type AgentKey = { orgId: string; svcId: string };

/** Loaders keyed by agent cache by the key the manifest service's maps use. */
export const byAgent = { cacheKeyFn: ({ orgId, svcId }: AgentKey) => historyKey(orgId, svcId) };

/** Manifest versions per agent, none for an agent that has none. */
function versionsLoader<Version>(load: (agents: readonly AgentKey[]) => Promise<Map<string, Version[]>>) {
  return new DataLoader(async (agents: readonly AgentKey[]) => {
    const byKey = await load(agents);
    return agents.map(({ orgId, svcId }) => byKey.get(historyKey(orgId, svcId)) ?? []);
  }, byAgent);
}

export const manifestLoaders = {
  /** Agents' current manifest (active or suspended, else the newest). */
  currentManifest: (services) =>
    new DataLoader(async (agents: readonly AgentKey[]) => {
      const byKey = await services.manifests.currentOf(agents);
      return agents.map(({ orgId, svcId }) => byKey.get(historyKey(orgId, svcId)) ?? null);
    }, byAgent),
  manifestHistory: (services) => versionsLoader((agents) => services.manifests.historyOf(agents)),
  /** Every approved version of an agent's manifest, oldest approval first (records' `manifest`). */
  approvedManifests: (services) => versionsLoader((agents) => services.manifests.approvedOf(agents)),
} satisfies LoaderFactories;
