import type { SqlConnection, SqlDriver } from '../../db/sql.js';
import type { Prisma, Webhook, WebhookDelivery } from '../../generated/prisma/client.js';
import type { ListPage } from '../../lib/list-page.js';

/** The webhook module's statements: webhooks, and the outbox of their deliveries (`webhook_deliveries`). */

/** The Prisma client, or a transaction on it. */
type Client = Prisma.TransactionClient;

/**
 * One pending delivery of the event for every active webhook of the org subscribed to it, in ONE
 * statement on the caller's connection (so in the caller's transaction), each with the payload
 * `{event_id, event, org_id, created_at, data}`.
 */
export async function insertEventDeliveries(
  conn: SqlConnection,
  orgId: string,
  event: string,
  eventId: string,
  data: Record<string, unknown>,
): Promise<void> {
  // created_at is the database's clock, like the row's and the dispatcher's, rounded as stored.
  await conn.query(
    `WITH e AS (SELECT now()::timestamptz(3) AS at)
     INSERT INTO webhook_deliveries (id, webhook_id, org_id, event, event_id, payload, created_at, next_attempt_at)
     SELECT 'whd_' || replace(gen_random_uuid()::text, '-', ''), w.id, w.org_id, $2::text, $3::text,
            jsonb_build_object(
              'event_id', $3::text,
              'event', $2::text,
              'org_id', $1::uuid::text,
              'created_at', to_char(e.at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
              'data', $4::jsonb),
            e.at, e.at
     FROM webhooks w, e
     WHERE w.org_id = $1::uuid AND w.active AND $2::text = ANY (w.events)`,
    [orgId, event, eventId, JSON.stringify(data ?? {})],
  );
}

export type WebhookColumns = Pick<Webhook, 'url' | 'events' | 'allowPrivateNetwork' | 'active'>;

export function insertWebhook(
  tx: Client,
  webhook: WebhookColumns & { id: string; orgId: string; secret: string },
): Promise<Webhook> {
  return tx.webhook.create({ data: webhook });
}

export function findWebhook(prisma: Client, orgId: string, webhookId: string): Promise<Webhook | null> {
  return prisma.webhook.findFirst({ where: { id: webhookId, orgId } });
}

/** The org's webhooks, newest first. */
export function webhooksOfOrg(prisma: Client, orgId: string): Promise<Webhook[]> {
  return prisma.webhook.findMany({
    where: { orgId },
    orderBy: [{ createdAt: 'desc' }, { id: 'desc' }],
  });
}

/** Throws Prisma's P2025 when the org has no such webhook. */
export function updateWebhook(
  tx: Client,
  orgId: string,
  webhookId: string,
  columns: WebhookColumns & { secret?: string },
): Promise<Webhook> {
  return tx.webhook.update({ where: { id: webhookId, orgId }, data: columns });
}

/** Deletes the webhook (its deliveries go with it) and returns it; throws Prisma's P2025 when there is none. */
export function deleteWebhook(tx: Client, orgId: string, webhookId: string): Promise<Webhook> {
  return tx.webhook.delete({ where: { id: webhookId, orgId } });
}

/** Raw rows of the deliveries page query, as the driver returns them. */
interface DeliveryRow {
  page_webhook_id: string;
  total: number;
  id: string | null;
  seq: bigint | number | string;
  webhook_id: string;
  org_id: string;
  event: string;
  event_id: string;
  payload: unknown;
  status: WebhookDelivery['status'];
  attempts: number;
  next_attempt_at: Date | null;
  last_attempt_at: Date | null;
  last_status_code: number | null;
  last_error: string | null;
  created_at: Date;
  delivered_at: Date | null;
}

const toDelivery = (row: DeliveryRow): WebhookDelivery => ({
  id: row.id!,
  seq: BigInt(row.seq),
  webhookId: row.webhook_id,
  orgId: row.org_id,
  event: row.event,
  eventId: row.event_id,
  payload: row.payload as Prisma.JsonValue,
  status: row.status,
  attempts: row.attempts,
  nextAttemptAt: row.next_attempt_at,
  lastAttemptAt: row.last_attempt_at,
  lastStatusCode: row.last_status_code,
  lastError: row.last_error,
  createdAt: row.created_at,
  deliveredAt: row.delivered_at,
});

/** One page of deliveries, newest first, for each of several webhooks, in one statement. */
export async function deliveryPages(
  prisma: Client,
  webhookIds: readonly string[],
  page: { limit: number; offset: number; status: string | null },
): Promise<Map<string, ListPage<WebhookDelivery>>> {
  const { limit, offset, status } = page;
  const rows = await prisma.$queryRaw<DeliveryRow[]>`
    SELECT w.webhook_id AS page_webhook_id, c.total, d.*
    FROM unnest(${[...webhookIds]}::text[]) AS w(webhook_id)
    CROSS JOIN LATERAL (
      SELECT count(*)::int AS total FROM webhook_deliveries x
      WHERE x.webhook_id = w.webhook_id AND (${status}::text IS NULL OR x.status::text = ${status}::text)
    ) c
    LEFT JOIN LATERAL (
      SELECT y.id, y.seq, y.webhook_id, y.org_id::text AS org_id, y.event, y.event_id, y.payload, y.status::text AS status,
             y.attempts, y.next_attempt_at, y.last_attempt_at, y.last_status_code, y.last_error, y.created_at, y.delivered_at
      FROM webhook_deliveries y
      WHERE y.webhook_id = w.webhook_id AND (${status}::text IS NULL OR y.status::text = ${status}::text)
      ORDER BY y.seq DESC
      LIMIT ${limit} OFFSET ${offset}
    ) d ON true
    ORDER BY w.webhook_id, d.seq DESC`;
  const pages = new Map<string, ListPage<WebhookDelivery>>();
  for (const id of webhookIds) pages.set(id, { items: [], total: 0 });
  for (const row of rows) {
    const entry = pages.get(row.page_webhook_id)!;
    entry.total = Number(row.total);
    if (row.id !== null) entry.items.push(toDelivery(row));
  }
  return pages;
}

/** Every webhook's stored secret, locked until the caller's transaction ends. */
export function lockWebhookSecrets(conn: SqlConnection): Promise<{ id: string; secret: string }[]> {
  return conn.query<{ id: string; secret: string }>('SELECT id, secret FROM webhooks ORDER BY id FOR UPDATE');
}

export async function updateWebhookSecret(conn: SqlConnection, webhookId: string, secret: string): Promise<void> {
  await conn.query('UPDATE webhooks SET secret = $2 WHERE id = $1', [webhookId, secret]);
}

/** A delivery claimed for an attempt, with what sending it needs of its webhook. */
export interface ClaimedDelivery {
  id: string;
  webhook_id: string;
  event: string;
  payload: unknown;
  attempts: number;
  url: string;
  /** As stored: sealed when KEY_ENCRYPTION_KEY was set. */
  secret: string;
  allow_private_network: boolean;
}

export interface ClaimLimits {
  /** Deliveries to claim at most. */
  max: number;
  /** How long a claim keeps other claimers off the delivery. */
  leaseMs: number;
  /** Attempts this process has in flight, per webhook. */
  busy: ReadonlyMap<string, number>;
  /** Due deliveries looked at, oldest first, to share `max` among webhooks. */
  window: number;
  /** Attempts in flight one webhook may have at most. */
  perWebhook: number;
}

/**
 * Claims up to `max` due deliveries, oldest first, keeping each webhook at most at `perWebhook`
 * attempts in flight in this process (`busy`). Candidates are chosen without locks; `due` locks
 * them, skipping rows another claimer holds, and re-checks that each is still pending and due (a
 * row claimed and committed meanwhile no longer is). The claim moves `next_attempt_at` past the
 * lease and counts the attempt.
 */
export function claimDueDeliveries(sql: SqlDriver, limits: ClaimLimits): Promise<ClaimedDelivery[]> {
  return sql.query<ClaimedDelivery>(
    `WITH busy AS (
       SELECT * FROM unnest($3::text[], $6::int[]) AS b(webhook_id, in_flight)
     ), candidates AS (
       SELECT d.id, d.webhook_id, d.next_attempt_at, d.seq
       FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id
       WHERE d.status = 'pending' AND d.next_attempt_at <= now() AND w.active
         AND d.webhook_id NOT IN (SELECT webhook_id FROM busy WHERE in_flight >= $5)
       ORDER BY d.next_attempt_at, d.seq
       LIMIT $4
     ), fair AS (
       SELECT ranked.id FROM (
         SELECT id, webhook_id, next_attempt_at, seq,
                row_number() OVER (PARTITION BY webhook_id ORDER BY next_attempt_at, seq) AS rank
         FROM candidates
       ) ranked
       LEFT JOIN busy ON busy.webhook_id = ranked.webhook_id
       WHERE ranked.rank <= $5 - coalesce(busy.in_flight, 0)
       ORDER BY ranked.next_attempt_at, ranked.seq
       LIMIT $1
     ), due AS (
       SELECT d.id FROM webhook_deliveries d
       WHERE d.id IN (SELECT id FROM fair) AND d.status = 'pending' AND d.next_attempt_at <= now()
       FOR UPDATE SKIP LOCKED
     )
     UPDATE webhook_deliveries d
     SET attempts = d.attempts + 1, last_attempt_at = now(), next_attempt_at = now() + $2::int * interval '1 millisecond'
     FROM due, webhooks w
     WHERE d.id = due.id AND w.id = d.webhook_id
     RETURNING d.id, d.webhook_id, d.event, d.payload, d.attempts, w.url, w.secret, w.allow_private_network`,
    [limits.max, limits.leaseMs, [...limits.busy.keys()], limits.window, limits.perWebhook, [...limits.busy.values()]],
  );
}

/** Gives back a claim that was never sent: the attempt did not happen, and the delivery is due now. */
export async function releaseClaim(sql: SqlDriver, claimed: ClaimedDelivery): Promise<void> {
  await sql.query(
    `UPDATE webhook_deliveries SET attempts = attempts - 1, next_attempt_at = now()
     WHERE id = $1 AND status = 'pending' AND attempts = $2`,
    [claimed.id, claimed.attempts],
  );
}

export interface AttemptResult {
  status: 'delivered' | 'failed' | 'pending';
  statusCode: number | null;
  error: string | null;
  /** When `pending`: how long until the next attempt. */
  retryDelayMs: number;
}

/** Writes an attempt's result, unless the delivery was claimed again since (its attempt number moved on). */
export async function recordAttempt(sql: SqlDriver, delivery: ClaimedDelivery, result: AttemptResult): Promise<void> {
  await sql.query(
    `UPDATE webhook_deliveries
     SET status = $3::text::"WebhookDeliveryStatus", last_status_code = $4, last_error = $5,
         delivered_at = CASE WHEN $3::text = 'delivered' THEN now() END,
         next_attempt_at = CASE WHEN $3::text = 'pending' THEN now() + $6::int * interval '1 millisecond' END
     WHERE id = $1 AND attempts = $2 AND status = 'pending'`,
    [delivery.id, delivery.attempts, result.status, result.statusCode, result.error, result.retryDelayMs],
  );
}
