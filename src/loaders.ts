import DataLoader from 'dataloader';
import type { WebhookDelivery } from './generated/prisma/client.js';
import type { Services } from './services.js';
import { historyKey } from './modules/manifest/manifest.service.js';
import type { DeliveryFilter } from './modules/webhook/webhook.service.js';
import type { ListPage } from './lib/list-page.js';

type DeliveriesKey = DeliveryFilter & { webhookId: string };
/** An agent of an org. */
type AgentKey = { orgId: string; svcId: string };
const filterKey = ({ status, limit, offset }: DeliveryFilter) =>
  JSON.stringify([status ?? null, limit ?? null, offset ?? null]);

/** An id within one org: loaders never return another org's row, whatever id they are given. */
export interface OrgScopedId {
  orgId: string;
  id: string;
}

const scopedKey = ({ orgId, id }: OrgScopedId) => `${orgId}\u0000${id}`;
const byAgent = { cacheKeyFn: ({ orgId, svcId }: AgentKey) => historyKey(orgId, svcId) };

/** One query per org for the ids asked for in one tick; results in the order of the keys. */
function byIdLoader<Row extends { id: string }>(load: (orgId: string, ids: string[]) => Promise<Row[]>) {
  return new DataLoader<OrgScopedId, Row | null, string>(
    async (keys) => {
      const orgs = new Map<string, string[]>();
      for (const { orgId, id } of keys) orgs.set(orgId, [...(orgs.get(orgId) ?? []), id]);
      const found = new Map<string, Row>();
      for (const [orgId, ids] of orgs) {
        for (const row of await load(orgId, [...new Set(ids)])) found.set(scopedKey({ orgId, id: row.id }), row);
      }
      return keys.map((key) => found.get(scopedKey(key)) ?? null);
    },
    { cacheKeyFn: scopedKey },
  );
}

/** Manifest versions per agent, none for an agent that has none. */
function versionsLoader<Version>(load: (agents: readonly AgentKey[]) => Promise<Map<string, Version[]>>) {
  return new DataLoader(async (agents: readonly AgentKey[]) => {
    const byKey = await load(agents);
    return agents.map(({ orgId, svcId }) => byKey.get(historyKey(orgId, svcId)) ?? []);
  }, byAgent);
}

/**
 * Request-scoped DataLoaders: a list of N items asking for the same relation costs one query.
 * Created per request, so nothing is cached across callers or after a write. Each loader is made
 * on first use: most requests use none or one, and the context is copied by spreading, which
 * would call a getter of the context itself (the loaders' getters are the prototype's, not copied).
 */
export class Loaders {
  readonly #services: Services;
  readonly #made = new Map<string, unknown>();

  constructor(services: Services) {
    this.#services = services;
  }

  #once<T>(name: string, make: (services: Services) => T): T {
    let loader = this.#made.get(name) as T | undefined;
    if (loader === undefined) {
      loader = make(this.#services);
      this.#made.set(name, loader);
    }
    return loader;
  }

  /** Agents' current manifest (active or suspended, else the newest). */
  get currentManifest() {
    return this.#once(
      'currentManifest',
      (services) =>
        new DataLoader(async (agents: readonly AgentKey[]) => {
          const byKey = await services.manifests.currentOf(agents);
          return agents.map(({ orgId, svcId }) => byKey.get(historyKey(orgId, svcId)) ?? null);
        }, byAgent),
    );
  }

  /** Agents' budget use this hour and day, against their current manifest's limits. */
  get agentUsage() {
    return this.#once(
      'agentUsage',
      (services) =>
        new DataLoader(async (agents: readonly AgentKey[]) => {
          const manifests = await this.currentManifest.loadMany(agents);
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
    );
  }

  /** The policies that target each agent. */
  get agentPolicies() {
    return this.#once(
      'agentPolicies',
      (services) => new DataLoader((agents: readonly AgentKey[]) => services.policies.forAgents(agents), byAgent),
    );
  }

  get manifestHistory() {
    return this.#once('manifestHistory', (services) =>
      versionsLoader((agents) => services.manifests.historyOf(agents)),
    );
  }

  /** A page of deliveries per webhook: one query per distinct filter, whatever the number of webhooks. */
  get webhookDeliveries() {
    return this.#once(
      'webhookDeliveries',
      (services) =>
        new DataLoader(
          async (keys: readonly DeliveriesKey[]) => {
            const groups = new Map<string, DeliveriesKey[]>();
            for (const key of keys) {
              const group = groups.get(filterKey(key)) ?? [];
              group.push(key);
              groups.set(filterKey(key), group);
            }
            const pages = new Map<string, Map<string, ListPage<WebhookDelivery>> | Error>();
            await Promise.all(
              [...groups].map(async ([filter, group]) => {
                try {
                  pages.set(
                    filter,
                    await services.webhooks.deliveriesOf([...new Set(group.map((k) => k.webhookId))], group[0]),
                  );
                } catch (error) {
                  pages.set(filter, error as Error);
                }
              }),
            );
            return keys.map((key) => {
              const byWebhook = pages.get(filterKey(key))!;
              return byWebhook instanceof Error ? byWebhook : byWebhook.get(key.webhookId)!;
            });
          },
          { cacheKeyFn: (key) => `${key.webhookId}\u0000${filterKey(key)}` },
        ),
    );
  }

  /** Audit actors that are users. */
  get userById() {
    return this.#once('userById', (services) => byIdLoader((orgId, ids) => services.users.byIds(orgId, ids)));
  }

  /** Approvals that records name. */
  get approvalById() {
    return this.#once('approvalById', (services) => byIdLoader((orgId, ids) => services.approvals.byIds(orgId, ids)));
  }

  /** Every approved version of an agent's manifest, oldest approval first (records' `manifest`). */
  get approvedManifests() {
    return this.#once('approvedManifests', (services) =>
      versionsLoader((agents) => services.manifests.approvedOf(agents)),
    );
  }
}

type RequestLoaders = Loaders;
declare module './api/services.js' {
  /** The API layer's name for a request's loaders (src/api/services.ts). */
  interface Loaders extends RequestLoaders {}
}
