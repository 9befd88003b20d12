import DataLoader from 'dataloader';
import type { LoaderFactories } from '../../api/request-loaders.js';
import type { Services } from '../../api/services.js';
import { type AgentKey, byAgent, type ManifestLoaders } from '../manifest/manifest.module.js';

export const agentLoaders = {
  /** Agents' budget use this hour and day, against their current manifest's limits. */
  agentUsage: (services: Services, loaders: Pick<ManifestLoaders, 'currentManifest'>) =>
    new DataLoader(async (agents: readonly AgentKey[]) => {
      const manifests = await loaders.currentManifest.loadMany(agents);
      return services.gateway.usageOf(
        agents.map((agent, i) => {
          const manifest = manifests[i];
          return {
            ...agent,
            limits: manifest && !(manifest instanceof Error) ? services.manifests.limitsOf(manifest) : null,
          };
        }),
      );
    }, byAgent),
  /** The policies that target each agent. */
  agentPolicies: (services) =>
    new DataLoader((agents: readonly AgentKey[]) => services.policies.forAgents(agents), byAgent),
} satisfies LoaderFactories;
