import type { ApiModule } from '../../api/api-module.js';
import type { LoadersMadeBy } from '../../api/request-loaders.js';
import { webhookLoaders } from './webhook.loaders.js';
import { webhookOperations } from './webhook.graphql.js';

export const webhookModule: ApiModule = {
  name: 'webhook',
  operations: webhookOperations,
  loaders: webhookLoaders,
};

type WebhookLoaders = LoadersMadeBy<typeof webhookLoaders>;
declare module '../../api/services.js' {
  interface Loaders extends WebhookLoaders {}
}
