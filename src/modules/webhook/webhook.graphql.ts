import type { Webhook, WebhookDelivery } from '../../generated/prisma/client.js';
import { builder } from '../../api/builder.js';
import { closedValues, graphqlOnly } from '../../api/closed-values.js';
import { principalOf } from '../../api/context.js';
import { listType } from '../../api/list.js';
import { mutation, query } from '../../api/operations.js';
import { DEFAULT_DELIVERY_PAGE, deliveryStatuses, MAX_DELIVERY_PAGE, webhookEvents } from './webhook.service.js';

const DeliveryStatusEnum = builder.enumType('WebhookDeliveryStatus', { values: deliveryStatuses });
const eventList = webhookEvents.map((e) => `\`${e}\``).join(', ');

const WebhookDeliveryRef = builder.objectRef<WebhookDelivery>('WebhookDelivery').implement({
  description: 'One event sent (or being sent) to one webhook.',
  fields: (t) => ({
    delivery_id: t.exposeID('id', { description: 'Also sent as the X-Webhook-Delivery header.' }),
    webhook_id: t.exposeID('webhookId'),
    event: t.exposeString('event', closedValues(webhookEvents)),
    event_id: t.exposeString('eventId', { description: 'The same for every webhook that received this event.' }),
    status: t.field({ type: DeliveryStatusEnum, resolve: (d) => d.status }),
    attempts: t.exposeInt('attempts'),
    next_attempt_at: t.expose('nextAttemptAt', {
      type: 'Timestamp',
      nullable: true,
      description: 'Null once delivered or failed.',
    }),
    last_attempt_at: t.expose('lastAttemptAt', { type: 'Timestamp', nullable: true }),
    last_status_code: t.exposeInt('lastStatusCode', {
      nullable: true,
      description: "The receiver's HTTP status of the last attempt.",
    }),
    last_error: t.exposeString('lastError', {
      nullable: true,
      description: 'Why the last attempt failed, e.g. `HTTP_ERROR: …`, `TIMEOUT: …`.',
    }),
    created_at: t.expose('createdAt', { type: 'Timestamp' }),
    delivered_at: t.expose('deliveredAt', { type: 'Timestamp', nullable: true }),
    payload: t.field({
      type: 'JSON',
      description: 'The body sent: {event_id, event, org_id, created_at, data}.',
      resolve: (d) => d.payload,
    }),
  }),
});

const DeliveryList = listType('WebhookDeliveryList', WebhookDeliveryRef);

const deliveryArgs = builder.args((t) => ({
  status: t.field({ type: DeliveryStatusEnum }),
  limit: t.int({ description: `Default ${DEFAULT_DELIVERY_PAGE}, at most ${MAX_DELIVERY_PAGE}.` }),
  offset: t.int({ description: 'Default 0.' }),
}));

export const WebhookRef = builder.prismaObject('Webhook', {
  description: 'A subscription of the organization to events. The secret is never returned after creation.',
  fields: (t) => ({
    webhook_id: t.exposeID('id'),
    url: t.exposeString('url'),
    events: t.exposeStringList('events', closedValues(webhookEvents)),
    active: t.exposeBoolean('active'),
    allow_private_network: t.exposeBoolean('allowPrivateNetwork'),
    created_at: t.expose('createdAt', { type: 'Timestamp' }),
    updated_at: t.expose('updatedAt', { type: 'Timestamp' }),
    deliveries: t.field({
      type: DeliveryList,
      description: 'Deliveries to this webhook, newest first (one query for every webhook of a list).',
      extensions: graphqlOnly,
      args: deliveryArgs,
      resolve: (webhook, args, ctx) => ctx.loaders.webhookDeliveries.load({ webhookId: webhook.id, ...args }),
    }),
  }),
});

const CreatedWebhook = builder.objectRef<Webhook>('CreatedWebhook').implement({
  description: 'A new webhook; `secret` is shown in this response only.',
  fields: (t) => ({
    webhook_id: t.exposeID('id'),
    url: t.exposeString('url'),
    events: t.exposeStringList('events', closedValues(webhookEvents)),
    active: t.exposeBoolean('active'),
    allow_private_network: t.exposeBoolean('allowPrivateNetwork'),
    created_at: t.expose('createdAt', { type: 'Timestamp' }),
    updated_at: t.expose('updatedAt', { type: 'Timestamp' }),
    secret: t.exposeString('secret', {
      description: 'Signs every delivery (HMAC-SHA256). Store it now: it is never shown again.',
    }),
  }),
});

const WebhookList = listType('WebhookList', WebhookRef);
const webhooksPath = '/orgs/:org_id/webhooks';
const tag = 'Webhooks';
const manage = (orgId: unknown) => ({ org: { orgId: String(orgId), action: 'webhook:manage' as const } });

const signatureDoc = `Every delivery is a POST of the JSON payload \`{event_id, event, org_id, created_at, data}\` with the headers
\`Content-Type: application/json\`, \`X-Webhook-Id\` (webhook id), \`X-Webhook-Event\`, \`X-Webhook-Delivery\`
(delivery id, the same on every retry), \`X-Webhook-Timestamp\` (unix seconds of this attempt) and
\`X-Webhook-Signature: sha256=<hex>\`, the hex HMAC-SHA256 with the webhook's \`secret\` as key over
\`<X-Webhook-Timestamp>.<raw request body>\`.

To verify, a receiver recomputes the HMAC over the timestamp header, a \`.\` and the body bytes exactly as
received (before any JSON parsing), compares it with the header in constant time, and rejects timestamps
more than a few minutes old (replays). Deduplicate on \`event_id\` (or \`X-Webhook-Delivery\`): delivery is
at least once.

A 2xx answer within 10 s (\`WEBHOOK_TIMEOUT_MS\`) counts as delivered; anything else, redirects included
(never followed), is retried with exponential backoff (\`WEBHOOK_RETRY_BASE_MS\`, doubling) until
\`WEBHOOK_MAX_ATTEMPTS\`, then the delivery is \`failed\`. Loopback and private addresses are refused,
when saving and when connecting, unless \`allow_private_network\` is true and the deployment lists them
in \`OUTBOUND_PRIVATE_NETWORKS\`; link-local and metadata addresses always.
Without \`secret\` (16 to 256 characters) one is generated.`;

const webhooksQuery = query('webhooks', {
  field: (t) =>
    t.field({
      type: WebhookList,
      description: 'Webhooks of the organization, newest first.',
      args: { org_id: t.arg.id({ required: true }) },
      authScopes: (_, args) => manage(args.org_id),
      resolve: (_, args, ctx) => ctx.services.webhooks.list(String(args.org_id)),
    }),
  rest: { method: 'GET', path: webhooksPath, tag, summary: 'List webhooks', auth: ['bearer'] },
});

const webhookQuery = query('webhook', {
  field: (t) =>
    t.field({
      type: WebhookRef,
      args: { org_id: t.arg.id({ required: true }), webhook_id: t.arg.id({ required: true }) },
      authScopes: (_, args) => manage(args.org_id),
      resolve: (_, args, ctx) => ctx.services.webhooks.get(String(args.org_id), String(args.webhook_id)),
    }),
  rest: {
    method: 'GET',
    path: `${webhooksPath}/:webhook_id`,
    tag,
    summary: 'Read a webhook',
    auth: ['bearer'],
  },
});

const webhookDeliveriesQuery = query('webhook_deliveries', {
  field: (t) =>
    t.field({
      type: DeliveryList,
      description: 'Deliveries to one webhook, newest first.',
      args: { org_id: t.arg.id({ required: true }), webhook_id: t.arg.id({ required: true }), ...deliveryArgs },
      authScopes: (_, args) => manage(args.org_id),
      resolve: (_, args, ctx) => ctx.services.webhooks.deliveries(String(args.org_id), String(args.webhook_id), args),
    }),
  rest: {
    method: 'GET',
    path: `${webhooksPath}/:webhook_id/deliveries`,
    tag,
    summary: 'List the deliveries of a webhook, with their attempts and last error',
    auth: ['bearer'],
  },
});

const createWebhookMutation = mutation('create_webhook', {
  field: (t) =>
    t.field({
      type: CreatedWebhook,
      description: `Subscribes a URL to events (${eventList}). ${signatureDoc}`,
      args: {
        org_id: t.arg.id({ required: true }),
        url: t.arg.string({ required: true, description: 'http(s), without credentials.' }),
        events: t.arg.stringList({
          required: true,
          description: `Non-empty, no duplicates: ${eventList}.`,
          ...closedValues(webhookEvents),
        }),
        secret: t.arg.string({ description: '16 to 256 characters; generated when absent.' }),
        allow_private_network: t.arg.boolean({ description: 'Default false.' }),
        active: t.arg.boolean({
          description:
            'Default true. An inactive webhook gets no new deliveries; its pending ones wait until it is active again.',
        }),
      },
      authScopes: (_, args) => manage(args.org_id),
      resolve: (_, args, ctx) => ctx.services.webhooks.create(String(args.org_id), args, principalOf(ctx)),
    }),
  rest: {
    method: 'POST',
    path: webhooksPath,
    status: 201,
    tag,
    summary: 'Create a webhook (the response is the only one with its secret)',
    description: signatureDoc,
    auth: ['bearer'],
  },
});

const updateWebhookMutation = mutation('update_webhook', {
  field: (t) =>
    t.field({
      type: WebhookRef,
      description: 'Changes the fields given. A new `secret` signs every attempt from now on, retries included.',
      args: {
        org_id: t.arg.id({ required: true }),
        webhook_id: t.arg.id({ required: true }),
        url: t.arg.string(),
        events: t.arg.stringList(),
        secret: t.arg.string(),
        allow_private_network: t.arg.boolean(),
        active: t.arg.boolean(),
      },
      authScopes: (_, args) => manage(args.org_id),
      resolve: (_, args, ctx) =>
        ctx.services.webhooks.update(String(args.org_id), String(args.webhook_id), args, principalOf(ctx)),
    }),
  rest: {
    method: 'PATCH',
    path: `${webhooksPath}/:webhook_id`,
    tag,
    summary: 'Change a webhook',
    auth: ['bearer'],
  },
});

const deleteWebhookMutation = mutation('delete_webhook', {
  field: (t) =>
    t.boolean({
      description: 'Deletes the webhook and its deliveries; pending ones are not sent.',
      args: { org_id: t.arg.id({ required: true }), webhook_id: t.arg.id({ required: true }) },
      authScopes: (_, args) => manage(args.org_id),
      resolve: async (_, args, ctx) => {
        await ctx.services.webhooks.remove(String(args.org_id), String(args.webhook_id), principalOf(ctx));
        return true;
      },
    }),
  rest: {
    method: 'DELETE',
    path: `${webhooksPath}/:webhook_id`,
    status: 204,
    tag,
    summary: 'Delete a webhook',
    auth: ['bearer'],
  },
});

/** The operations of this file, in the order the OpenAPI document lists their routes. */
export const webhookOperations = [
  webhooksQuery,
  webhookQuery,
  webhookDeliveriesQuery,
  createWebhookMutation,
  updateWebhookMutation,
  deleteWebhookMutation,
];
