import { randomBytes } from 'node:crypto';
import type { SqlConnection } from '../../db/sql.js';
import type { Deps } from '../../deps.js';
import { FieldErrors, notFound, notFoundIfGone } from '../../errors.js';
import type { Webhook, WebhookDelivery } from '../../generated/prisma/client.js';
import { limitOffset, type ListPage } from '../../lib/list-page.js';
import { outboundUrlError } from '../../lib/outbound-http.js';
import { SecretUnavailableError, type SecretBox } from '../../lib/secret-box.js';
import { actorOf } from '../audit/audit-events.js';
import { recordAudit } from '../audit/audit.service.js';
import type { Principal } from '../../authz/authz.js';
import { randomId, timeOrderedId } from '../../lib/ids.js';
import {
  deleteWebhook,
  deliveryPages,
  findWebhook,
  insertEventDeliveries,
  insertWebhook,
  lockWebhookSecrets,
  updateWebhook,
  updateWebhookSecret,
  webhooksOfOrg,
} from './webhook.store.js';

/**
 * Org webhooks: subscriptions to events, and the outbox of their deliveries. Events are enqueued
 * with `enqueueWebhookEvent` inside the transaction that produced them, so a delivery exists
 * exactly when the change committed; webhook.dispatcher.ts sends them.
 */

export const webhookEvents = [
  'approval.requested',
  'approval.decided',
  'tool.definition_changed',
  'tool.connection_expired',
] as const;
export type WebhookEvent = (typeof webhookEvents)[number];
export const deliveryStatuses = ['pending', 'delivered', 'failed'] as const;
export type DeliveryStatus = (typeof deliveryStatuses)[number];

export interface WebhookInput {
  url?: string | null;
  events?: readonly string[] | null;
  secret?: string | null;
  allow_private_network?: boolean | null;
  active?: boolean | null;
}

export interface DeliveryFilter {
  status?: DeliveryStatus | null;
  limit?: number | null;
  offset?: number | null;
}

const MIN_SECRET_LENGTH = 16;
const MAX_SECRET_LENGTH = 256;
export const DEFAULT_DELIVERY_PAGE = 50;
export const MAX_DELIVERY_PAGE = 200;

const newWebhookId = () => randomId('whk');
/** Sortable by time, unique without coordination (like audit ids). */
const newEventId = (now = Date.now()) => timeOrderedId('evt', now);
const generateSecret = () => `whsec_${randomBytes(32).toString('base64url')}`;

/**
 * The app's webhook dispatcher as the services that enqueue events hold it (handed to them when
 * the app builds them): woken after committing a transaction that enqueued events, so they go out
 * now rather than at the next poll. Correctness never depends on it. Per app: one app's writes
 * wake its own dispatcher, not those of other apps in the process.
 */
export interface WebhookWake {
  wake(): void;
}

/**
 * Queues `event` for every active webhook of the org subscribed to it: one pending delivery each,
 * in ONE statement on the caller's connection, so it commits or rolls back with the caller's
 * transaction (`db.sql.transaction(tx => …)`, or a Prisma transaction through
 * `sqlConnectionOf(tx)`). Every delivery of the event carries the same `event_id` and payload
 * `{event_id, event, org_id, created_at, data}`. Wake the app's dispatcher (`WebhookWake`) after
 * the commit for prompt delivery; without it the next poll sends them.
 */
export async function enqueueWebhookEvent(
  conn: SqlConnection,
  orgId: string,
  event: WebhookEvent,
  data: Record<string, unknown>,
): Promise<void> {
  if (!webhookEvents.includes(event)) throw new Error(`Unknown webhook event "${String(event)}"`);
  await insertEventDeliveries(conn, orgId, event, newEventId(), data);
}

/** A webhook as audited: no secret. */
const snapshot = (webhook: Webhook) => ({
  url: webhook.url,
  events: webhook.events,
  active: webhook.active,
  allow_private_network: webhook.allowPrivateNetwork,
});

export function createWebhookService({ db, secrets, env }: Deps) {
  /** The stored columns of a valid webhook, from a create (no `existing`) or an update. */
  function columns(input: WebhookInput, existing?: Webhook) {
    const errors = new FieldErrors();
    const allowPrivate = input.allow_private_network ?? existing?.allowPrivateNetwork ?? false;
    const urlText = input.url ?? existing?.url;
    const urlError = outboundUrlError(urlText, {
      privateNetworks: env.outboundPrivateNetworks,
      allowPrivateNetwork: allowPrivate,
    });
    // A stored URL refused because allow_private_network is being turned off: that field is the cause.
    if (urlError) errors.add(urlError.refused && input.url == null ? 'allow_private_network' : 'url', urlError.message);

    const events = input.events ?? existing?.events;
    if (!events || events.length === 0) {
      errors.add('events', `must list at least one of ${webhookEvents.join(', ')}`);
    } else {
      events.forEach((event, i) => {
        if (!webhookEvents.includes(event as WebhookEvent))
          errors.add(`events[${i}]`, `must be one of ${webhookEvents.join(', ')}`);
        else if (events.indexOf(event) !== i) errors.add(`events[${i}]`, `"${event}" is listed twice`);
      });
    }

    if (input.secret != null && (input.secret.length < MIN_SECRET_LENGTH || input.secret.length > MAX_SECRET_LENGTH)) {
      errors.add('secret', `must be ${MIN_SECRET_LENGTH} to ${MAX_SECRET_LENGTH} characters`);
    }
    errors.throwIfAny();
    return {
      url: urlText!,
      events: [...events!],
      allowPrivateNetwork: allowPrivate,
      active: input.active ?? existing?.active ?? true,
    };
  }

  /** The new webhook with its secret in plaintext: the only time the secret is returned. */
  async function create(orgId: string, input: WebhookInput, actor: Principal): Promise<Webhook> {
    const data = columns(input);
    const secret = input.secret ?? generateSecret();
    const webhook = await db.prisma.$transaction(async (tx) => {
      const created = await insertWebhook(tx, { id: newWebhookId(), orgId, secret: secrets.seal(secret), ...data });
      await recordAudit(tx, orgId, actorOf(actor), {
        action: 'webhook.created',
        targetType: 'webhook',
        targetId: created.id,
        after: { ...snapshot(created), secret_generated: input.secret == null },
      });
      return created;
    });
    return { ...webhook, secret };
  }

  async function get(orgId: string, webhookId: string): Promise<Webhook> {
    const webhook = await findWebhook(db.prisma, orgId, webhookId);
    if (!webhook) throw notFound('Webhook');
    return webhook;
  }

  async function list(orgId: string): Promise<ListPage<Webhook>> {
    const items = await webhooksOfOrg(db.prisma, orgId);
    return { items, total: items.length };
  }

  /** Whether the webhook's stored secret is `secret`; one that no configured key opens is not. */
  function holdsSecret(webhook: Webhook, secret: string): boolean {
    try {
      return secrets.open(webhook.secret) === secret;
    } catch (error) {
      if (error instanceof SecretUnavailableError) return false;
      throw error;
    }
  }

  async function update(orgId: string, webhookId: string, input: WebhookInput, actor: Principal): Promise<Webhook> {
    const existing = await get(orgId, webhookId);
    const data = columns(input, existing);
    const secretRotated = input.secret != null && !holdsSecret(existing, input.secret);
    return notFoundIfGone(
      'Webhook',
      db.prisma.$transaction(async (tx) => {
        const webhook = await updateWebhook(tx, orgId, existing.id, {
          ...data,
          ...(input.secret != null ? { secret: secrets.seal(input.secret) } : {}),
        });
        await recordAudit(tx, orgId, actorOf(actor), {
          action: 'webhook.updated',
          targetType: 'webhook',
          targetId: webhook.id,
          before: snapshot(existing),
          after: { ...snapshot(webhook), secret_rotated: secretRotated },
        });
        return webhook;
      }),
    );
  }

  /**
   * Deletes the webhook with its deliveries: pending ones are never sent. One statement deletes and
   * returns the row, so of concurrent deletes one wins and the rest are 404.
   */
  async function remove(orgId: string, webhookId: string, actor: Principal): Promise<void> {
    await notFoundIfGone(
      'Webhook',
      db.prisma.$transaction(async (tx) => {
        const deleted = await deleteWebhook(tx, orgId, webhookId);
        await recordAudit(tx, orgId, actorOf(actor), {
          action: 'webhook.deleted',
          targetType: 'webhook',
          targetId: deleted.id,
          before: snapshot(deleted),
        });
      }),
    );
  }

  function page(filter: DeliveryFilter) {
    const errors = new FieldErrors();
    const { limit, offset } = limitOffset(filter, { limit: DEFAULT_DELIVERY_PAGE, max: MAX_DELIVERY_PAGE }, errors);
    if (filter.status != null && !deliveryStatuses.includes(filter.status)) {
      errors.add('status', `must be one of ${deliveryStatuses.join(', ')}`);
    }
    errors.throwIfAny();
    return { limit, offset, status: filter.status ?? null };
  }

  /**
   * One page of deliveries, newest first, for each of several webhooks, in one statement (the
   * GraphQL `webhook { deliveries }` loader and the REST listing share it).
   */
  async function deliveriesOf(
    webhookIds: readonly string[],
    filter: DeliveryFilter,
  ): Promise<Map<string, ListPage<WebhookDelivery>>> {
    return deliveryPages(db.prisma, webhookIds, page(filter));
  }

  async function deliveries(
    orgId: string,
    webhookId: string,
    filter: DeliveryFilter,
  ): Promise<ListPage<WebhookDelivery>> {
    const webhook = await get(orgId, webhookId);
    return (await deliveriesOf([webhook.id], filter)).get(webhook.id)!;
  }

  return { create, get, list, update, remove, deliveries, deliveriesOf };
}

export type WebhookService = ReturnType<typeof createWebhookService>;

/**
 * Seals every webhook secret not yet sealed with the current key (`agent-gateway reencrypt`, in
 * the caller's transaction); returns how many it rewrote.
 */
export async function reencryptWebhookSecrets(conn: SqlConnection, secrets: SecretBox): Promise<number> {
  const rows = await lockWebhookSecrets(conn);
  const stale = rows.filter((row) => !secrets.isCurrent(row.secret));
  for (const row of stale) await updateWebhookSecret(conn, row.id, secrets.reseal(row.secret));
  return stale.length;
}
