import { createHmac } from 'node:crypto';
import type { Logger } from 'pino';
import type { Database } from '../../db/database.js';
import type { Env } from '../../env.js';
import { postJson, type OutboundOutcome } from '../../lib/outbound-http.js';
import { SecretUnavailableError, type SecretBox } from '../../lib/secret-box.js';
import {
  ATTR_ERROR_TYPE,
  ATTR_HTTP_REQUEST_METHOD,
  ATTR_HTTP_RESPONSE_STATUS_CODE,
} from '@opentelemetry/semantic-conventions';
import { SpanKind, SpanStatusCode, type Span, type Telemetry } from '../../observability/telemetry.js';
import { claimDueDeliveries, recordAttempt, releaseClaim, type ClaimedDelivery as Claimed } from './webhook.store.js';

/**
 * Sends the webhook outbox (webhook_deliveries). Each process runs one dispatcher; every
 * `WEBHOOK_POLL_MS` (or at once when woken) it claims due deliveries in one statement: `FOR UPDATE
 * SKIP LOCKED` keeps concurrent claimers off each other's rows, and the claim moves
 * `next_attempt_at` past a lease (timeout + margin) and counts the attempt, so no other process
 * sends the same attempt while this one is busy with it, and a process that dies mid-send only
 * delays the retry until the lease ends. Results are written back guarded by the attempt number.
 */

/** Deliveries one process sends at the same time. */
export const MAX_IN_FLIGHT = 16;
/**
 * Of which at most this many to one webhook, so one slow or dead receiver with a backlog cannot
 * hold every slot and delay the other webhooks (of other orgs too).
 */
export const MAX_IN_FLIGHT_PER_WEBHOOK = 4;
/** Due deliveries a claim looks at (oldest first) to share the free slots fairly among webhooks. */
const CLAIM_WINDOW = 256;
/** How much of a receiver's answer is read; the rest is ignored (only the status counts). */
export const MAX_RESPONSE_BYTES = 64 * 1024;
/** Retries never wait longer than this, however many attempts are configured. */
export const MAX_RETRY_DELAY_MS = 60 * 60 * 1000;
/** Beyond the attempt's timeout, how long a claim is held before another process may retry it. */
const LEASE_MARGIN_MS = 30_000;

/** `sha256=` + hex HMAC-SHA256 of `<timestamp>.<body>` with the webhook's secret. */
export function webhookSignature(secret: string, timestamp: string, body: string): string {
  return `sha256=${createHmac('sha256', secret).update(`${timestamp}.${body}`).digest('hex')}`;
}

/** Wait before the attempt after attempt number `attempts` (1-based): base, 2×base, 4×base, … */
export function retryDelayMs(attempts: number, baseMs: number): number {
  return Math.min(baseMs * 2 ** Math.max(0, attempts - 1), MAX_RETRY_DELAY_MS);
}

/** An attempt that never left: the webhook's secret does not open with the configured keys. */
type SecretUnavailable = { kind: 'failure'; code: 'SECRET_UNAVAILABLE'; message: string };

export interface WebhookDispatcher {
  start(): WebhookDispatcher;
  /** Looks for due deliveries now instead of at the next poll. */
  wake(): void;
  /** Stops polling, aborts attempts in flight (their lease lets them be retried) and waits for both. */
  stop(): Promise<void>;
}

/** What an attempt's outcome means for the delivery. */
function judge(outcome: OutboundOutcome | SecretUnavailable): {
  delivered: boolean;
  statusCode: number | null;
  error: string | null;
} {
  switch (outcome.kind) {
    case 'response':
      return outcome.status >= 200 && outcome.status < 300
        ? { delivered: true, statusCode: outcome.status, error: null }
        : {
            delivered: false,
            statusCode: outcome.status,
            error: `HTTP_ERROR: the receiver answered HTTP ${outcome.status}`,
          };
    case 'redirect':
      return {
        delivered: false,
        statusCode: outcome.status,
        error: `REDIRECT_REFUSED: the receiver answered HTTP ${outcome.status}; redirects are not followed`,
      };
    case 'failure':
      return { delivered: false, statusCode: null, error: `${outcome.code}: ${outcome.message}` };
  }
}

export function createWebhookDispatcher({
  env,
  db,
  logger,
  secrets,
  telemetry,
}: {
  env: Env;
  db: Database;
  logger: Logger;
  secrets: SecretBox;
  telemetry: Telemetry;
}): WebhookDispatcher {
  const log = logger.child({ component: 'webhooks' });
  const leaseMs = env.webhookTimeoutMs + LEASE_MARGIN_MS;
  const inFlight = new Map<Promise<void>, AbortController>();
  let timer: NodeJS.Timeout | undefined;
  let ticking: Promise<void> | undefined;
  let again = false;
  let stopped = true;

  /** Attempts in flight per webhook in this process. */
  const perWebhook = new Map<string, number>();

  /**
   * Claims up to `max` due deliveries, oldest first, keeping each webhook at most at
   * MAX_IN_FLIGHT_PER_WEBHOOK attempts in flight in this process.
   */
  const claim = (max: number) =>
    claimDueDeliveries(db.sql, {
      max,
      leaseMs,
      busy: perWebhook,
      window: CLAIM_WINDOW,
      perWebhook: MAX_IN_FLIGHT_PER_WEBHOOK,
    });

  /** Gives back claims that were never sent (stopped meanwhile): the attempt did not happen. */
  const release = (claimed: Claimed[]) => Promise.all(claimed.map((d) => releaseClaim(db.sql, d)));

  /** The webhook's secret in plaintext, or why it cannot be had (a failed attempt, retried as any). */
  function openSecret(delivery: Claimed): string | SecretUnavailable {
    try {
      return secrets.open(delivery.secret);
    } catch (error) {
      if (!(error instanceof SecretUnavailableError)) throw error;
      return {
        kind: 'failure',
        code: 'SECRET_UNAVAILABLE',
        message: `the webhook secret cannot be opened: ${error.message}`,
      };
    }
  }

  function send(delivery: Claimed, secret: string, signal: AbortSignal): Promise<OutboundOutcome> {
    const body = JSON.stringify(delivery.payload);
    const timestamp = String(Math.floor(Date.now() / 1000));
    return postJson({
      url: delivery.url,
      headers: {
        'User-Agent': 'agent-gateway-webhooks',
        'X-Webhook-Id': delivery.webhook_id,
        'X-Webhook-Event': delivery.event,
        'X-Webhook-Delivery': delivery.id,
        'X-Webhook-Timestamp': timestamp,
        'X-Webhook-Signature': webhookSignature(secret, timestamp, body),
        // The attempt's span: the event's cause is not kept with the outbox row.
        ...telemetry.traceHeaders(),
      },
      body,
      timeoutMs: env.webhookTimeoutMs,
      maxResponseBytes: MAX_RESPONSE_BYTES,
      oversize: 'truncate',
      access: { privateNetworks: env.outboundPrivateNetworks, allowPrivateNetwork: delivery.allow_private_network },
      signal,
    });
  }

  /** One attempt in its span (`webhook {event}`, whose trace context the receiver gets), counted by outcome. */
  function attempt(delivery: Claimed, signal: AbortSignal): Promise<void> {
    return telemetry.withSpan(
      `webhook ${delivery.event}`,
      {
        kind: SpanKind.CLIENT,
        // Its own trace: the dispatcher may have been woken from a request that caused another event.
        root: true,
        attributes: {
          [ATTR_HTTP_REQUEST_METHOD]: 'POST',
          'agw.webhook.event': delivery.event,
          'agw.webhook.id': delivery.webhook_id,
          'agw.webhook.delivery_id': delivery.id,
          'agw.webhook.attempt': delivery.attempts,
        },
      },
      async (span) => {
        const status = await attemptUntraced(delivery, signal, span);
        if (status === undefined) return;
        telemetry.webhookAttempt(status === 'pending' ? 'retrying' : status);
        if (status !== 'delivered') span.setStatus({ code: SpanStatusCode.ERROR });
      },
    );
  }

  /** The delivery's status after the attempt; undefined when shutdown aborted it. */
  async function attemptUntraced(
    delivery: Claimed,
    signal: AbortSignal,
    span: Span,
  ): Promise<'delivered' | 'failed' | 'pending' | undefined> {
    const secret = openSecret(delivery);
    const outcome = typeof secret === 'string' ? await send(delivery, secret, signal) : secret;
    // Aborted by shutdown: the receiver may or may not have it; the lease lets another try.
    if (outcome.kind === 'failure' && outcome.code === 'ABORTED') return undefined;
    const { delivered, statusCode, error } = judge(outcome);
    const status = delivered ? 'delivered' : delivery.attempts >= env.webhookMaxAttempts ? 'failed' : 'pending';
    if (statusCode !== null) span.setAttribute(ATTR_HTTP_RESPONSE_STATUS_CODE, statusCode);
    if (error) span.setAttribute(ATTR_ERROR_TYPE, error.slice(0, error.indexOf(':')));
    await recordAttempt(db.sql, delivery, {
      status,
      statusCode,
      error,
      retryDelayMs: retryDelayMs(delivery.attempts, env.webhookRetryBaseMs),
    });
    const fields = {
      delivery_id: delivery.id,
      webhook_id: delivery.webhook_id,
      attempt: delivery.attempts,
      status_code: statusCode,
    };
    if (status === 'failed') log.warn({ ...fields, error }, 'webhook delivery failed for good');
    else if (status === 'pending') log.info({ ...fields, error }, 'webhook delivery attempt failed; will retry');
    else log.debug(fields, 'webhook delivered');
    return status;
  }

  function launch(delivery: Claimed) {
    const controller = new AbortController();
    perWebhook.set(delivery.webhook_id, (perWebhook.get(delivery.webhook_id) ?? 0) + 1);
    const task: Promise<void> = attempt(delivery, controller.signal)
      .catch((error) => log.warn({ err: error, delivery_id: delivery.id }, 'recording a webhook attempt failed'))
      .finally(() => {
        inFlight.delete(task);
        const left = perWebhook.get(delivery.webhook_id)! - 1;
        if (left > 0) perWebhook.set(delivery.webhook_id, left);
        else perWebhook.delete(delivery.webhook_id);
        dispatcher.wake();
      });
    inFlight.set(task, controller);
  }

  async function tick(): Promise<void> {
    do {
      again = false;
      const free = MAX_IN_FLIGHT - inFlight.size;
      if (free <= 0) return;
      const claimed = await claim(free);
      if (stopped) {
        await release(claimed);
        return;
      }
      for (const delivery of claimed) launch(delivery);
      // A full batch: more may be due right away.
      if (claimed.length === free) again = true;
    } while (again && !stopped);
  }

  function schedule(delayMs: number) {
    clearTimeout(timer);
    if (stopped) return;
    timer = setTimeout(run, delayMs);
    timer.unref();
  }

  function run() {
    if (stopped) return;
    if (ticking) {
      again = true;
      return;
    }
    clearTimeout(timer);
    ticking = tick()
      .catch((error) => log.warn({ err: error }, 'webhook dispatch failed; retrying at the next poll'))
      .finally(() => {
        ticking = undefined;
        // Woken after the loop's last look: go again now rather than at the next poll.
        schedule(again ? 0 : env.webhookPollMs);
      });
  }

  const dispatcher: WebhookDispatcher = {
    start() {
      if (!stopped) return dispatcher;
      stopped = false;
      schedule(0);
      return dispatcher;
    },
    wake() {
      if (stopped) return;
      if (ticking) again = true;
      else schedule(0);
    },
    async stop() {
      stopped = true;
      clearTimeout(timer);
      for (const controller of inFlight.values()) controller.abort();
      await Promise.allSettled([ticking, ...inFlight.keys()]);
    },
  };
  return dispatcher;
}
