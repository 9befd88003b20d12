import DataLoader from 'dataloader';
import type { WebhookDelivery } from '../../generated/prisma/client.js';
import type { LoaderFactories } from '../../api/request-loaders.js';
import type { ListPage } from '../../lib/list-page.js';
import type { DeliveryFilter } from './webhook.service.js';

type DeliveriesKey = DeliveryFilter & { webhookId: string };
const filterKey = ({ status, limit, offset }: DeliveryFilter) =>
  JSON.stringify([status ?? null, limit ?? null, offset ?? null]);

export const webhookLoaders = {
  /** A page of deliveries per webhook: one query per distinct filter, whatever the number of webhooks. */
  webhookDeliveries: (services) =>
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
} satisfies LoaderFactories;
