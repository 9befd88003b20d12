import { createHmac, timingSafeEqual } from 'node:crypto';
import type http from 'node:http';
import type { TypedDocumentNode } from '@graphql-typed-document-node/core';
import { sqlConnectionOf } from '../../../src/db/prisma-sql.js';
import {
  MAX_IN_FLIGHT,
  MAX_IN_FLIGHT_PER_WEBHOOK,
  MAX_RETRY_DELAY_MS,
  retryDelayMs,
} from '../../../src/modules/webhook/webhook.dispatcher.js';
import { enqueueWebhookEvent, type WebhookEvent } from '../../../src/modules/webhook/webhook.service.js';
import { WebhookDashboardDocument, WebhookWithDeliveriesDocument } from '../../generated/graphql.js';
import { startRecordingServer, type Hit, type RecordingServer } from '../../support/recording-server.js';
import { LOOPBACK_UPSTREAMS, startTestApp, type TestApp } from '../../support/app.js';
import { signUp, type OrgFixture } from '../../support/fixtures.js';
import { runOperation, StatementCounter } from '../../support/statements.js';

/**
 * Org webhooks: CRUD with a secret shown once, the outbox filled inside the caller's transaction,
 * and the dispatcher's signed, retried, observable deliveries to a receiver on 127.0.0.1, with
 * the address policy of http tools (SSRF) applied when saving and when connecting.
 */

const MAX_ATTEMPTS = 4;
const TIMEOUT_MS = 1000;
const statements = new StatementCounter();
let t: TestApp;
const iso = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;

// ---------------------------------------------------------------------------------------------
// A receiver on 127.0.0.1 that records every request. The first path segment picks the behaviour,
// the rest names the test, so each test reads only its own hits.

const hits: Hit[] = [];
const pendingTimers = new Set<NodeJS.Timeout>();
/** Requests of a slow path open right now, and the most ever open at once. */
const open = new Map<string, number>();
const mostOpen = new Map<string, number>();
let receiver: RecordingServer;
let port: number;
const hitsTo = (path: string) => hits.filter((h) => h.path === path);
const local = (path: string, host = '127.0.0.1') => `http://${host}:${port}${path}`;

function respond(hit: Hit, res: http.ServerResponse) {
  res.on('error', () => undefined);
  const kind = hit.path.split('/')[1];
  switch (kind) {
    case 'ok':
      res.writeHead(204);
      return res.end();
    case 'flaky': // 500 twice, then 200
      res.writeHead(hitsTo(hit.path).length <= 2 ? 500 : 200, { 'content-type': 'application/json' });
      return res.end('{"thanks":true}');
    case 'fail':
      res.writeHead(500);
      return res.end('nope');
    case 'redirect':
      res.writeHead(302, { location: local(`/target${hit.path.slice('/redirect'.length)}`) });
      return res.end();
    case 'target':
      res.writeHead(200);
      return res.end();
    case 'big': // 2 MiB: read up to the cap, ignored, still a 200
      res.writeHead(200, { 'content-type': 'text/plain' });
      return res.end(Buffer.alloc(2 * 1024 * 1024, 'x'));
    case 'slow': {
      open.set(hit.path, (open.get(hit.path) ?? 0) + 1);
      mostOpen.set(hit.path, Math.max(mostOpen.get(hit.path) ?? 0, open.get(hit.path)!));
      const timer = setTimeout(() => {
        if (!res.destroyed) res.end();
      }, TIMEOUT_MS * 3);
      pendingTimers.add(timer);
      res.on('close', () => {
        clearTimeout(timer);
        pendingTimers.delete(timer);
        open.set(hit.path, open.get(hit.path)! - 1);
      });
      return;
    }
    default:
      res.writeHead(404);
      return res.end();
  }
}

beforeAll(async () => {
  receiver = await startRecordingServer(hits, (hit, res) => respond(hit, res));
  port = receiver.port;
  t = await startTestApp(
    {
      ...LOOPBACK_UPSTREAMS,
      WEBHOOK_POLL_MS: '20',
      WEBHOOK_RETRY_BASE_MS: '20',
      WEBHOOK_MAX_ATTEMPTS: String(MAX_ATTEMPTS),
      WEBHOOK_TIMEOUT_MS: String(TIMEOUT_MS),
    },
    { onQuery: statements.observe },
  );
});

afterAll(async () => {
  await t.close();
  for (const timer of pendingTimers) clearTimeout(timer);
  await receiver.close();
});

// ---------------------------------------------------------------------------------------------
// Helpers

const webhooksPath = (org: OrgFixture) => `/api/v1/orgs/${org.orgId}/webhooks`;
let counter = 0;
const tag = (label: string) => `${label}-${++counter}`;

async function createWebhook(org: OrgFixture, body: Record<string, unknown>) {
  const created = await t.request('POST', webhooksPath(org), { token: org.adminToken, body });
  if (created.status !== 201) throw new Error(`create webhook failed: ${created.status} ${created.text}`);
  return created.body as { webhook_id: string; secret: string; url: string; events: string[] };
}

/** A webhook to the local receiver at `path` (allowed to reach 127.0.0.1). */
const localWebhook = (
  org: OrgFixture,
  path: string,
  events: WebhookEvent[] = ['approval.requested', 'approval.decided'],
) => createWebhook(org, { url: local(path), events, allow_private_network: true });

/** What the approvals code does: enqueue inside its transaction, wake the dispatcher after the commit. */
async function publish(orgId: string, event: WebhookEvent, data: Record<string, unknown>) {
  await t.database.db.sql.transaction((tx) => enqueueWebhookEvent(tx, orgId, event, data));
  t.app.webhooks.wake();
}

async function eventually<T>(
  read: () => Promise<T>,
  done: (value: T) => boolean,
  what: string,
  deadlineMs = 20_000,
): Promise<T> {
  const until = Date.now() + deadlineMs;
  for (;;) {
    const value = await read();
    if (done(value)) return value;
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}: ${JSON.stringify(value)}`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

const listDeliveries = async (org: OrgFixture, webhookId: string, query = '') => {
  const response = await t.request('GET', `${webhooksPath(org)}/${webhookId}/deliveries${query}`, {
    token: org.adminToken,
  });
  expect(response.status).toBe(200);
  return response.body as { items: any[]; total: number };
};

/** Waits until every delivery of the webhook has left `pending`, and returns them. */
const settled = (org: OrgFixture, webhookId: string, count = 1) =>
  eventually(
    () => listDeliveries(org, webhookId),
    (page) => page.total === count && page.items.every((d) => d.status !== 'pending'),
    `${count} settled deliveries of ${webhookId}`,
  );

function verifySignature(hit: Hit, secret: string): boolean {
  const timestamp = hit.headers['x-webhook-timestamp'] as string;
  const expected = Buffer.from(
    `sha256=${createHmac('sha256', secret).update(`${timestamp}.${hit.body}`).digest('hex')}`,
  );
  const given = Buffer.from(String(hit.headers['x-webhook-signature']));
  return given.length === expected.length && timingSafeEqual(given, expected);
}

const auditRows = (org: OrgFixture, targetId: string) =>
  t.database.db.sql.query<{ action: string; before: unknown; after: any }>(
    'SELECT action, before, after FROM audit_logs WHERE org_id = $1 AND target_id = $2 ORDER BY created_at, id',
    [org.orgId, targetId],
  );

// ---------------------------------------------------------------------------------------------

describe('webhook CRUD', () => {
  let org: OrgFixture;
  beforeAll(async () => {
    org = await signUp(t, 'whcrud');
  });

  test('create without a secret: 201 with a generated secret, shown in that response only', async () => {
    const created = await t.request('POST', webhooksPath(org), {
      token: org.adminToken,
      body: { url: 'https://hooks.example.com/agw', events: ['approval.requested'] },
    });
    expect(created.status).toBe(201);
    expect(created.body).toEqual({
      webhook_id: expect.stringMatching(/^whk_[A-Za-z0-9_-]{16}$/),
      url: 'https://hooks.example.com/agw',
      events: ['approval.requested'],
      active: true,
      allow_private_network: false,
      created_at: expect.stringMatching(iso),
      updated_at: expect.stringMatching(iso),
      secret: expect.stringMatching(/^whsec_[A-Za-z0-9_-]{43}$/),
    });
    const { webhook_id: id, secret } = created.body;

    const read = await t.request('GET', `${webhooksPath(org)}/${id}`, { token: org.adminToken });
    expect(read.status).toBe(200);
    const { secret: _shownOnce, ...withoutSecret } = created.body;
    expect(read.body).toEqual(withoutSecret);
    const list = await t.request('GET', webhooksPath(org), { token: org.adminToken });
    expect(list.body.items).toContainEqual(withoutSecret);
    const patched = await t.request('PATCH', `${webhooksPath(org)}/${id}`, {
      token: org.adminToken,
      body: { active: false },
    });
    expect(patched.status).toBe(200);
    const graphql = await t.graphql(
      `query($org: ID!) { webhooks(org_id: $org) { items { webhook_id url } } }`,
      { org: org.orgId },
      { token: org.adminToken },
    );
    expect(graphql.text).toContain(id);
    for (const response of [read, list, patched, graphql]) {
      expect(response.text).not.toContain(secret);
      expect(response.text).not.toContain('"secret"');
    }
    // The type has no secret field at all outside the create response.
    const asking = await t.graphql(
      `query($org: ID!, $id: ID!) { webhook(org_id: $org, webhook_id: $id) { secret } }`,
      { org: org.orgId, id },
      { token: org.adminToken },
    );
    expect(asking.body.errors?.[0].message).toMatch(/Cannot query field "secret"/);

    const [row] = await t.database.db.sql.query<{ secret: string }>('SELECT secret FROM webhooks WHERE id = $1', [id]);
    expect(row.secret).toBe(secret);
    const audits = await auditRows(org, id);
    expect(audits.map((a) => a.action)).toEqual(['webhook.created', 'webhook.updated']);
    expect(audits[0].after).toEqual({
      url: 'https://hooks.example.com/agw',
      events: ['approval.requested'],
      active: true,
      allow_private_network: false,
      secret_generated: true,
    });
    expect(JSON.stringify(audits)).not.toContain(secret);
  });

  test('create with a secret, every field given: the response echoes them', async () => {
    const secret = 'a-receiver-chosen-secret';
    const created = await t.request('POST', webhooksPath(org), {
      token: org.adminToken,
      body: {
        url: local('/ok/crud'),
        events: ['approval.decided', 'approval.requested'],
        secret,
        allow_private_network: true,
        active: false,
      },
    });
    expect(created.status).toBe(201);
    expect(created.body).toMatchObject({
      url: local('/ok/crud'),
      events: ['approval.decided', 'approval.requested'],
      secret,
      allow_private_network: true,
      active: false,
    });
    const audits = await auditRows(org, created.body.webhook_id);
    expect(audits[0].after.secret_generated).toBe(false);
    expect(JSON.stringify(audits)).not.toContain(secret);
  });

  test('PATCH changes the fields given, rotates the secret without showing it, and audits before/after', async () => {
    const first = 'first-secret-0123456789';
    const second = 'second-secret-0123456789';
    const created = await createWebhook(org, {
      url: 'https://a.example.com/',
      events: ['approval.requested'],
      secret: first,
    });
    const path = `${webhooksPath(org)}/${created.webhook_id}`;

    const renamed = await t.request('PATCH', path, {
      token: org.adminToken,
      body: { url: 'https://b.example.com/hook', events: ['approval.decided'] },
    });
    expect(renamed.status).toBe(200);
    expect(renamed.body).toMatchObject({
      webhook_id: created.webhook_id,
      url: 'https://b.example.com/hook',
      events: ['approval.decided'],
      active: true,
    });
    expect(renamed.body).not.toHaveProperty('secret');

    const rotated = await t.request('PATCH', path, { token: org.adminToken, body: { secret: second } });
    expect(rotated.status).toBe(200);
    expect(rotated.body).toMatchObject({ url: 'https://b.example.com/hook', events: ['approval.decided'] });
    expect(rotated.text).not.toContain(second);
    const [row] = await t.database.db.sql.query<{ secret: string }>('SELECT secret FROM webhooks WHERE id = $1', [
      created.webhook_id,
    ]);
    expect(row.secret).toBe(second);

    const audits = await auditRows(org, created.webhook_id);
    expect(audits.map((a) => [a.action, a.after?.secret_rotated])).toEqual([
      ['webhook.created', undefined],
      ['webhook.updated', false],
      ['webhook.updated', true],
    ]);
    expect(audits[1].before).toMatchObject({ url: 'https://a.example.com/', events: ['approval.requested'] });
    expect(audits[1].after).toMatchObject({ url: 'https://b.example.com/hook', events: ['approval.decided'] });
    expect(JSON.stringify(audits)).not.toContain(first);
    expect(JSON.stringify(audits)).not.toContain(second);
  });

  test('DELETE: 204, the webhook and its deliveries are gone, then 404 everywhere', async () => {
    const created = await localWebhook(org, `/fail/${tag('deleted')}`);
    await publish(org.orgId, 'approval.requested', { approval_id: 'apr_deleted' });
    const path = `${webhooksPath(org)}/${created.webhook_id}`;
    const deleted = await t.request('DELETE', path, { token: org.adminToken });
    expect(deleted.status).toBe(204);
    expect(deleted.text).toBe('');
    const rows = await t.database.db.sql.query('SELECT id FROM webhook_deliveries WHERE webhook_id = $1', [
      created.webhook_id,
    ]);
    expect(rows).toEqual([]);
    for (const [method, suffix, body] of [
      ['GET', '', undefined],
      ['PATCH', '', { active: false }],
      ['DELETE', '', undefined],
      ['GET', '/deliveries', undefined],
    ] as const) {
      const response = await t.request(method, `${path}${suffix}`, { token: org.adminToken, body });
      expect({ method, suffix, status: response.status, code: response.body.error.code }).toEqual({
        method,
        suffix,
        status: 404,
        code: 'NOT_FOUND',
      });
    }
    expect((await auditRows(org, created.webhook_id)).map((a) => a.action)).toEqual([
      'webhook.created',
      'webhook.deleted',
    ]);
  });

  test("another org's webhook is 404 under this org's path", async () => {
    const other = await signUp(t, 'whother');
    const theirs = await createWebhook(other, { url: 'https://hooks.example.com/', events: ['approval.decided'] });
    for (const suffix of ['', '/deliveries']) {
      const response = await t.request('GET', `${webhooksPath(org)}/${theirs.webhook_id}${suffix}`, {
        token: org.adminToken,
      });
      expect(response.status).toBe(404);
    }
  });
});

describe('validation: 422 naming the field, nothing stored', () => {
  let org: OrgFixture;
  beforeAll(async () => {
    org = await signUp(t, 'whvalid');
  });
  const valid = { url: 'https://hooks.example.com/', events: ['approval.requested'] };

  test.each([
    ['an ftp url', { url: 'ftp://hooks.example.com/' }, ['url']],
    ['a url that is not one', { url: 'not a url' }, ['url']],
    ['a url with credentials', { url: 'https://user:pass@hooks.example.com/' }, ['url']],
    ['a url over 2048 characters', { url: `https://hooks.example.com/${'a'.repeat(2048)}` }, ['url']],
    ['no events', { events: [] }, ['events']],
    ['an unknown event', { events: ['approval.requested', 'manifest.approved'] }, ['events[1]']],
    ['a duplicate event', { events: ['approval.decided', 'approval.decided'] }, ['events[1]']],
    ['a 15-character secret', { secret: '0123456789abcde' }, ['secret']],
    ['a 257-character secret', { secret: 's'.repeat(257) }, ['secret']],
    ['a non-boolean allow_private_network', { allow_private_network: 'yes' }, ['allow_private_network']],
    ['a non-boolean active', { active: 1 }, ['active']],
    ['several problems at once', { url: 'gopher://x', events: [], secret: 'short' }, ['url', 'events', 'secret']],
  ])('%s', async (_label, override, fields) => {
    const before = await t.database.db.sql.query('SELECT id FROM webhooks WHERE org_id = $1', [org.orgId]);
    const response = await t.request('POST', webhooksPath(org), {
      token: org.adminToken,
      body: { ...valid, ...override },
    });
    expect(response.status).toBe(422);
    expect(response.body.error.code).toBe('VALIDATION_ERROR');
    expect(response.body.error.details.errors.map((e: { field: string }) => e.field)).toEqual(fields);
    expect(await t.database.db.sql.query('SELECT id FROM webhooks WHERE org_id = $1', [org.orgId])).toEqual(before);
  });

  test('missing url or events: 422 naming it, nothing stored', async () => {
    for (const [body, field] of [
      [{ events: ['approval.requested'] }, 'url'],
      [{ url: 'https://hooks.example.com/' }, 'events'],
    ] as const) {
      const response = await t.request('POST', webhooksPath(org), { token: org.adminToken, body });
      expect(response.status).toBe(422);
      expect(response.body.error.details.errors.map((e: { field: string }) => e.field)).toEqual([field]);
    }
    expect(await t.database.db.sql.query('SELECT id FROM webhooks WHERE org_id = $1', [org.orgId])).toEqual([]);
  });

  test('the boundaries are accepted: a 16- and a 256-character secret', async () => {
    for (const secret of ['0123456789abcdef', 's'.repeat(256)]) {
      const response = await t.request('POST', webhooksPath(org), {
        token: org.adminToken,
        body: { ...valid, secret },
      });
      expect(response.status).toBe(201);
      expect(response.body.secret).toBe(secret);
    }
  });

  test('PATCH is validated on the result: bad fields are 422 and change nothing', async () => {
    const created = await createWebhook(org, valid);
    const path = `${webhooksPath(org)}/${created.webhook_id}`;
    for (const [body, field] of [
      [{ events: [] }, 'events'],
      [{ url: 'ftp://x/' }, 'url'],
      [{ secret: 'short' }, 'secret'],
      [{ url: 'http://10.0.0.1/' }, 'url'],
    ] as const) {
      const response = await t.request('PATCH', path, { token: org.adminToken, body });
      expect(response.status).toBe(422);
      expect(response.body.error.details.errors.map((e: { field: string }) => e.field)).toEqual([field]);
    }
    const read = await t.request('GET', path, { token: org.adminToken });
    expect(read.body).toMatchObject(valid);
  });
});

describe('address policy (SSRF)', () => {
  let org: OrgFixture;
  /**
   * A deployment that opens every private range (OUTBOUND_PRIVATE_NETWORKS), on a database of its
   * own: its background work (webhook deliveries) must not reach this file's receivers.
   */
  let wide: TestApp;
  let wideOrg: OrgFixture;
  beforeAll(async () => {
    org = await signUp(t, 'whssrf');
    wide = await startTestApp({ OUTBOUND_PRIVATE_NETWORKS: '0.0.0.0/0,::/0' });
    wideOrg = await signUp(wide, 'whssrf-wide');
  });
  afterAll(() => wide.close());

  const refusedUrls: [string, () => string][] = [
    ['127.0.0.1', () => local('/ok/ssrf-literal')],
    ['10.0.0.1', () => 'http://10.0.0.1/hook'],
    ['localhost (resolves to loopback)', () => local('/ok/ssrf-localhost', 'localhost')],
    ['[::1]', () => `http://[::1]:${port}/ok/ssrf-v6`],
    ['2130706433 (decimal loopback)', () => `http://2130706433:${port}/ok/ssrf-decimal`],
    ['api.localhost', () => `http://api.localhost:${port}/ok/ssrf-sub`],
    ['[64:ff9b::127.0.0.1] (NAT64 of loopback)', () => `http://[64:ff9b::127.0.0.1]:${port}/ok/ssrf-nat64`],
    ['[2002:7f00:1::1] (6to4)', () => `http://[2002:7f00:1::1]:${port}/ok/ssrf-6to4`],
    ['[::127.0.0.1] (IPv4-compatible)', () => `http://[::127.0.0.1]:${port}/ok/ssrf-compat`],
    ['[fec0::1] (site-local)', () => `http://[fec0::1]:${port}/ok/ssrf-site-local`],
  ];

  test('169.254.169.254 (cloud metadata): 422 on url with allow_private_network, even where every private range is open', async () => {
    const refused = await wide.request('POST', webhooksPath(wideOrg), {
      token: wideOrg.adminToken,
      body: {
        url: 'http://169.254.169.254/latest/meta-data',
        events: ['approval.requested'],
        allow_private_network: true,
      },
    });
    expect(refused.status).toBe(422);
    expect(refused.body.error.details.errors).toEqual([
      { field: 'url', message: expect.stringContaining('never reachable') },
    ]);
  });

  test.each(refusedUrls)(
    '%s without allow_private_network: 422 on url when saving; accepted with it where the deployment opens it',
    async (_label, url) => {
      const refused = await t.request('POST', webhooksPath(org), {
        token: org.adminToken,
        body: { url: url(), events: ['approval.requested'] },
      });
      expect(refused.status).toBe(422);
      expect(refused.body.error.details.errors).toEqual([
        { field: 'url', message: expect.stringContaining('allow_private_network') },
      ]);
      const allowed = await wide.request('POST', webhooksPath(wideOrg), {
        token: wideOrg.adminToken,
        body: { url: url(), events: ['approval.requested'], allow_private_network: true, active: false },
      });
      expect(allowed.status).toBe(201);
    },
  );

  test('turning allow_private_network off on a loopback webhook is 422 on allow_private_network', async () => {
    const created = await createWebhook(org, {
      url: local('/ok/ssrf-toggle'),
      events: ['approval.requested'],
      allow_private_network: true,
      active: false,
    });
    const response = await t.request('PATCH', `${webhooksPath(org)}/${created.webhook_id}`, {
      token: org.adminToken,
      body: { allow_private_network: false },
    });
    expect(response.status).toBe(422);
    expect(response.body.error.details.errors.map((e: { field: string }) => e.field)).toEqual([
      'allow_private_network',
    ]);
  });

  // A name can start resolving to a private address after it was saved (DNS rebinding), and a row
  // may predate a policy change: the dispatcher checks the address it actually connects to. The
  // rows are written directly, as write-time validation would (rightly) refuse them.
  const deliveryCases: [string, () => string, string | null][] = [
    ['127.0.0.1', () => local('/ok/ssrf-deliver-literal'), '/ok/ssrf-deliver-literal'],
    ['localhost', () => local('/ok/ssrf-deliver-name', 'localhost'), '/ok/ssrf-deliver-name'],
    ['10.0.0.1', () => 'http://10.0.0.1/hook', null],
    ['169.254.169.254', () => 'http://169.254.169.254/latest/meta-data', null],
  ];

  test.each(deliveryCases)(
    '%s at delivery time: every attempt is ADDRESS_REFUSED and the receiver gets nothing',
    async (_label, url, path) => {
      const created = await createWebhook(org, {
        url: 'https://placeholder.example.com/',
        events: ['approval.decided'],
        active: false,
      });
      await t.database.db.sql.query(
        'UPDATE webhooks SET url = $2, allow_private_network = false, active = true WHERE id = $1',
        [created.webhook_id, url()],
      );
      await publish(org.orgId, 'approval.decided', { approval_id: 'apr_ssrf' });
      const { items } = await settled(org, created.webhook_id);
      expect(items[0]).toMatchObject({ status: 'failed', attempts: MAX_ATTEMPTS, last_status_code: null });
      expect(items[0].last_error).toMatch(/^ADDRESS_REFUSED: /);
      if (path) expect(hitsTo(path)).toHaveLength(0);
      await t.request('DELETE', `${webhooksPath(org)}/${created.webhook_id}`, { token: org.adminToken });
    },
  );

  test('control: the same localhost URL with allow_private_network reaches the receiver', async () => {
    const path = `/ok/${tag('localhost-allowed')}`;
    const created = await createWebhook(org, {
      url: local(path, 'localhost'),
      events: ['approval.decided'],
      allow_private_network: true,
    });
    await publish(org.orgId, 'approval.decided', { approval_id: 'apr_control' });
    const { items } = await settled(org, created.webhook_id);
    expect(items[0]).toMatchObject({ status: 'delivered', attempts: 1, last_status_code: 204 });
    expect(hitsTo(path)).toHaveLength(1);
  });
});

describe('delivery', () => {
  test('a receiver failing twice (500) then accepting: delivered after 3 attempts, each signed over timestamp.body', async () => {
    const org = await signUp(t, 'whflaky');
    const path = `/flaky/${tag('retry')}`;
    const webhook = await localWebhook(org, path, ['approval.requested']);
    const data = { approval_id: 'apr_123', svc_id: 'billing-agent', capability: 'billing:refund' };
    await publish(org.orgId, 'approval.requested', data);

    const { items, total } = await settled(org, webhook.webhook_id);
    expect(total).toBe(1);
    const delivery = items[0];
    expect(delivery).toEqual({
      delivery_id: expect.stringMatching(/^whd_[0-9a-f]{32}$/),
      webhook_id: webhook.webhook_id,
      event: 'approval.requested',
      event_id: expect.stringMatching(/^evt_[0-9a-z]{9}[0-9a-f]{16}$/),
      status: 'delivered',
      attempts: 3,
      next_attempt_at: null,
      last_attempt_at: expect.stringMatching(iso),
      last_status_code: 200,
      last_error: null,
      created_at: expect.stringMatching(iso),
      delivered_at: expect.stringMatching(iso),
      payload: {
        event_id: delivery.event_id,
        event: 'approval.requested',
        org_id: org.orgId,
        created_at: delivery.created_at,
        data,
      },
    });

    const received = hitsTo(path);
    expect(received).toHaveLength(3);
    for (const hit of received) {
      expect(hit.headers['content-type']).toBe('application/json');
      expect(hit.headers['x-webhook-id']).toBe(webhook.webhook_id);
      expect(hit.headers['x-webhook-event']).toBe('approval.requested');
      expect(hit.headers['x-webhook-delivery']).toBe(delivery.delivery_id);
      expect(hit.headers['x-webhook-timestamp']).toMatch(/^\d{10}$/);
      expect(Math.abs(Number(hit.headers['x-webhook-timestamp']) - Date.now() / 1000)).toBeLessThan(60);
      expect(hit.headers['x-webhook-signature']).toMatch(/^sha256=[0-9a-f]{64}$/);
      expect(verifySignature(hit, webhook.secret)).toBe(true);
      expect(verifySignature(hit, 'whsec_some-other-secret-entirely')).toBe(false);
      expect(verifySignature({ ...hit, body: hit.body.replace('apr_123', 'apr_124') }, webhook.secret)).toBe(false);
      expect(JSON.parse(hit.body)).toEqual(delivery.payload);
      expect(hit.body).toBe(received[0].body);
      expect(JSON.stringify(hit.headers)).not.toContain(webhook.secret);
    }
  });

  test('a receiver that always fails: failed after WEBHOOK_MAX_ATTEMPTS, with the last status and error', async () => {
    const org = await signUp(t, 'whfail');
    const path = `/fail/${tag('always')}`;
    const webhook = await localWebhook(org, path);
    await publish(org.orgId, 'approval.decided', { approval_id: 'apr_fail', decision: 'approved' });
    const { items } = await settled(org, webhook.webhook_id);
    expect(items[0]).toMatchObject({
      status: 'failed',
      attempts: MAX_ATTEMPTS,
      next_attempt_at: null,
      delivered_at: null,
      last_status_code: 500,
      last_error: expect.stringMatching(/^HTTP_ERROR: .*500/),
    });
    expect(hitsTo(path)).toHaveLength(MAX_ATTEMPTS);
    const failed = await listDeliveries(org, webhook.webhook_id, '?status=failed');
    expect(failed.items.map((d) => d.delivery_id)).toEqual([items[0].delivery_id]);
    expect((await listDeliveries(org, webhook.webhook_id, '?status=delivered')).total).toBe(0);
  });

  test('a redirect is not followed: each 302 is a failed attempt and the Location is never requested', async () => {
    const org = await signUp(t, 'whredirect');
    const name = tag('redirect');
    const webhook = await localWebhook(org, `/redirect/${name}`);
    await publish(org.orgId, 'approval.requested', { approval_id: 'apr_redirect' });
    const { items } = await settled(org, webhook.webhook_id);
    expect(items[0]).toMatchObject({ status: 'failed', attempts: MAX_ATTEMPTS, last_status_code: 302 });
    expect(items[0].last_error).toMatch(/^REDIRECT_REFUSED: /);
    expect(hitsTo(`/redirect/${name}`)).toHaveLength(MAX_ATTEMPTS);
    expect(hitsTo(`/target/${name}`)).toHaveLength(0);
  });

  test('a receiver slower than WEBHOOK_TIMEOUT_MS: the attempt fails with TIMEOUT and is retried', async () => {
    const org = await signUp(t, 'whslow');
    const path = `/slow/${tag('slow')}`;
    const webhook = await localWebhook(org, path);
    await publish(org.orgId, 'approval.requested', { approval_id: 'apr_slow' });
    const page = await eventually(
      () => listDeliveries(org, webhook.webhook_id),
      (p) => p.items[0]?.last_error != null,
      'a timed-out attempt',
    );
    // The retry may already be under way: attempts counts the one that timed out, maybe the next.
    expect(page.items[0]).toMatchObject({ status: 'pending', last_status_code: null });
    expect(page.items[0].attempts).toBeGreaterThanOrEqual(1);
    expect(page.items[0].last_error).toMatch(/^TIMEOUT: /);
    expect(hitsTo(path).length).toBeGreaterThanOrEqual(1);
    await t.request('DELETE', `${webhooksPath(org)}/${webhook.webhook_id}`, { token: org.adminToken });
  });

  test('a receiver that never answers in time holds at most MAX_IN_FLIGHT_PER_WEBHOOK slots: other webhooks still go out', async () => {
    const org = await signUp(t, 'whfair');
    const slowPath = `/slow/${tag('fair')}`;
    const slow = await localWebhook(org, slowPath, ['approval.requested']);
    const backlog = 40;
    await t.database.db.sql.transaction(async (tx) => {
      for (let i = 0; i < backlog; i++) await enqueueWebhookEvent(tx, org.orgId, 'approval.requested', { n: i });
    });
    t.app.webhooks.wake();
    await eventually(
      async () => open.get(slowPath) ?? 0,
      (n) => n > 0,
      'slow attempts in flight',
    );

    const fastPath = `/ok/${tag('fair-fast')}`;
    const fast = await localWebhook(org, fastPath, ['approval.decided']);
    await publish(org.orgId, 'approval.decided', { approval_id: 'apr_fair' });
    const { items } = await settled(org, fast.webhook_id);
    expect(items[0]).toMatchObject({ status: 'delivered', attempts: 1 });
    const waiting = await t.database.db.sql.query(
      'SELECT id FROM webhook_deliveries WHERE webhook_id = $1 AND attempts = 0',
      [slow.webhook_id],
    );
    expect(waiting.length).toBeGreaterThan(0);
    expect(mostOpen.get(slowPath)).toBeLessThanOrEqual(MAX_IN_FLIGHT_PER_WEBHOOK);
    expect(MAX_IN_FLIGHT_PER_WEBHOOK).toBeLessThan(MAX_IN_FLIGHT);
    await t.request('DELETE', `${webhooksPath(org)}/${slow.webhook_id}`, { token: org.adminToken });
  });

  test('a 2 MiB answer is not read beyond the cap and does not stop a 200 from counting', async () => {
    const org = await signUp(t, 'whbig');
    const webhook = await localWebhook(org, `/big/${tag('big')}`);
    await publish(org.orgId, 'approval.decided', { approval_id: 'apr_big' });
    const { items } = await settled(org, webhook.webhook_id);
    expect(items[0]).toMatchObject({ status: 'delivered', attempts: 1, last_status_code: 200 });
  });

  test('deliveries are per subscription, per active webhook, per org; one event has one event_id everywhere', async () => {
    const org = await signUp(t, 'whsubs');
    const other = await signUp(t, 'whsubs-other');
    const name = tag('subs');
    const decidedOnly = await localWebhook(org, `/ok/${name}/decided`, ['approval.decided']);
    const requestedOnly = await localWebhook(org, `/ok/${name}/requested`, ['approval.requested']);
    const both = await localWebhook(org, `/ok/${name}/both`);
    const inactive = await createWebhook(org, {
      url: local(`/ok/${name}/inactive`),
      events: ['approval.requested'],
      allow_private_network: true,
      active: false,
    });
    const otherOrg = await localWebhook(other, `/ok/${name}/other`);

    await publish(org.orgId, 'approval.requested', { approval_id: 'apr_subs' });
    const requested = (await settled(org, both.webhook_id)).items;
    const toRequested = (await settled(org, requestedOnly.webhook_id)).items;
    expect(requested[0]).toMatchObject({ event: 'approval.requested', status: 'delivered' });
    expect(toRequested[0].event_id).toBe(requested[0].event_id);
    expect(toRequested[0].delivery_id).not.toBe(requested[0].delivery_id);
    expect(toRequested[0].payload).toEqual(requested[0].payload);

    await publish(org.orgId, 'approval.decided', { approval_id: 'apr_subs', decision: 'denied' });
    const decided = (await settled(org, decidedOnly.webhook_id)).items;
    expect(decided.map((d) => d.event)).toEqual(['approval.decided']);
    const all = await settled(org, both.webhook_id, 2);
    expect(all.items.map((d) => d.event)).toEqual(['approval.decided', 'approval.requested']);

    expect((await listDeliveries(org, requestedOnly.webhook_id)).total).toBe(1);
    expect((await listDeliveries(org, inactive.webhook_id)).total).toBe(0);
    expect((await listDeliveries(other, otherOrg.webhook_id)).total).toBe(0);
    expect(hitsTo(`/ok/${name}/decided`).map((h) => h.headers['x-webhook-event'])).toEqual(['approval.decided']);
    expect(hitsTo(`/ok/${name}/requested`).map((h) => h.headers['x-webhook-event'])).toEqual(['approval.requested']);
    expect(hitsTo(`/ok/${name}/both`)).toHaveLength(2);
    expect(hitsTo(`/ok/${name}/inactive`)).toHaveLength(0);
    expect(hitsTo(`/ok/${name}/other`)).toHaveLength(0);
  });

  test('pending deliveries of a deactivated webhook wait, and go out once it is active again', async () => {
    const org = await signUp(t, 'whpause');
    const path = `/ok/${tag('pause')}`;
    const webhook = await localWebhook(org, path);
    // Queued while active, then paused before any attempt could be due.
    await t.database.db.sql.transaction(async (tx) => {
      await enqueueWebhookEvent(tx, org.orgId, 'approval.requested', { approval_id: 'apr_pause' });
      await tx.query('UPDATE webhooks SET active = false WHERE id = $1', [webhook.webhook_id]);
    });
    t.app.webhooks.wake();
    // Another org's delivery enqueued after it is sent: the dispatcher has looked since.
    const probeOrg = await signUp(t, 'whpause-probe');
    const probe = await localWebhook(probeOrg, `/ok/${tag('pause-probe')}`);
    await publish(probeOrg.orgId, 'approval.requested', { approval_id: 'apr_probe' });
    await settled(probeOrg, probe.webhook_id);
    expect((await listDeliveries(org, webhook.webhook_id)).items[0]).toMatchObject({ status: 'pending', attempts: 0 });
    expect(hitsTo(path)).toHaveLength(0);

    const resumed = await t.request('PATCH', `${webhooksPath(org)}/${webhook.webhook_id}`, {
      token: org.adminToken,
      body: { active: true },
    });
    expect(resumed.status).toBe(200);
    const { items } = await settled(org, webhook.webhook_id);
    expect(items[0]).toMatchObject({ status: 'delivered', attempts: 1 });
    expect(hitsTo(path)).toHaveLength(1);
  });
});

describe('the outbox is transactional', () => {
  test('an enqueue in a transaction that rolls back delivers nothing', async () => {
    const org = await signUp(t, 'whrollback');
    const path = `/ok/${tag('rollback')}`;
    const webhook = await localWebhook(org, path);
    await expect(
      t.database.db.sql.transaction(async (tx) => {
        await enqueueWebhookEvent(tx, org.orgId, 'approval.requested', { marker: 'rolled-back' });
        const inside = await tx.query('SELECT id FROM webhook_deliveries WHERE webhook_id = $1', [webhook.webhook_id]);
        expect(inside).toHaveLength(1);
        throw new Error('the approval failed');
      }),
    ).rejects.toThrow('the approval failed');
    t.app.webhooks.wake();
    // A later committed event to the same webhook goes out; the rolled-back one never existed.
    await publish(org.orgId, 'approval.requested', { marker: 'committed' });
    const { items } = await settled(org, webhook.webhook_id);
    expect(items.map((d) => d.payload.data)).toEqual([{ marker: 'committed' }]);
    expect(hitsTo(path).map((h) => JSON.parse(h.body).data)).toEqual([{ marker: 'committed' }]);
    const rows = await t.database.db.sql.query(
      `SELECT id FROM webhook_deliveries WHERE payload->'data'->>'marker' = 'rolled-back'`,
    );
    expect(rows).toEqual([]);
  });

  test('inside a Prisma transaction (sqlConnectionOf), with an audit entry: both commit or neither does', async () => {
    const org = await signUp(t, 'whprisma');
    const path = `/ok/${tag('prisma')}`;
    const webhook = await localWebhook(org, path, ['approval.decided']);
    const { db } = t.database;
    await expect(
      db.prisma.$transaction(async (tx) => {
        await enqueueWebhookEvent(sqlConnectionOf(tx), org.orgId, 'approval.decided', { marker: 'prisma-rolled-back' });
        throw new Error('rolled back');
      }),
    ).rejects.toThrow('rolled back');
    await db.prisma.$transaction(async (tx) => {
      await enqueueWebhookEvent(sqlConnectionOf(tx), org.orgId, 'approval.decided', { marker: 'prisma-committed' });
    });
    t.app.webhooks.wake();
    const { items } = await settled(org, webhook.webhook_id);
    expect(items.map((d) => d.payload.data)).toEqual([{ marker: 'prisma-committed' }]);
    expect(hitsTo(path)).toHaveLength(1);
  });

  test('an org without webhooks: enqueue is a no-op; an unknown event is a programming error', async () => {
    const org = await signUp(t, 'whnone');
    await publish(org.orgId, 'approval.requested', { approval_id: 'apr_none' });
    const rows = await t.database.db.sql.query('SELECT id FROM webhook_deliveries WHERE org_id = $1', [org.orgId]);
    expect(rows).toEqual([]);
    await expect(
      t.database.db.sql.transaction((tx) =>
        enqueueWebhookEvent(tx, org.orgId, 'manifest.approved' as WebhookEvent, {}),
      ),
    ).rejects.toThrow(/Unknown webhook event/);
  });
});

describe('several dispatchers on one database', () => {
  test('two app instances never send the same delivery twice', async () => {
    const second = await startTestApp(
      {
        ...LOOPBACK_UPSTREAMS,
        WEBHOOK_POLL_MS: '20',
        WEBHOOK_RETRY_BASE_MS: '20',
        WEBHOOK_MAX_ATTEMPTS: String(MAX_ATTEMPTS),
      },
      { db: t.database.db },
    );
    try {
      const org = await signUp(t, 'whmulti');
      const path = `/ok/${tag('multi')}`;
      const webhook = await localWebhook(org, path);
      const events = 40;
      for (let i = 0; i < events; i++) {
        await t.database.db.sql.transaction((tx) => enqueueWebhookEvent(tx, org.orgId, 'approval.requested', { n: i }));
        t.app.webhooks.wake();
        second.app.webhooks.wake();
      }
      const page = await eventually(
        () => listDeliveries(org, webhook.webhook_id, '?limit=200'),
        (p) => p.total === events && p.items.every((d) => d.status === 'delivered'),
        'all deliveries delivered',
      );
      expect(page.items.every((d) => d.attempts === 1)).toBe(true);
      const received = hitsTo(path).map((h) => h.headers['x-webhook-delivery']);
      expect(received).toHaveLength(events);
      expect(new Set(received)).toEqual(new Set(page.items.map((d) => d.delivery_id)));
    } finally {
      await second.app.stop();
    }
  });
});

describe('listing deliveries', () => {
  let org: OrgFixture;
  let webhookId: string;
  const count = 7;
  beforeAll(async () => {
    org = await signUp(t, 'whlist');
    webhookId = (await localWebhook(org, `/ok/${tag('list')}`)).webhook_id;
    for (let i = 0; i < count; i++)
      await publish(org.orgId, i % 2 ? 'approval.decided' : 'approval.requested', { n: i });
    await settled(org, webhookId, count);
  });

  test('newest first, with limit and offset, and the total of the filter', async () => {
    const all = await listDeliveries(org, webhookId);
    expect(all.total).toBe(count);
    expect(all.items.map((d) => d.payload.data.n)).toEqual([6, 5, 4, 3, 2, 1, 0]);
    const page = await listDeliveries(org, webhookId, '?limit=3&offset=2');
    expect(page).toMatchObject({ total: count });
    expect(page.items.map((d) => d.payload.data.n)).toEqual([4, 3, 2]);
    const beyond = await listDeliveries(org, webhookId, '?offset=50');
    expect(beyond).toEqual({ items: [], total: count });
    expect((await listDeliveries(org, webhookId, '?status=delivered')).total).toBe(count);
    expect(await listDeliveries(org, webhookId, '?status=pending')).toEqual({ items: [], total: 0 });
  });

  test.each([
    ['?limit=0', 'limit'],
    ['?limit=201', 'limit'],
    ['?offset=-1', 'offset'],
    ['?limit=abc', 'limit'],
    ['?status=sent', 'status'],
  ])('%s: 422 on %s', async (query, field) => {
    const response = await t.request('GET', `${webhooksPath(org)}/${webhookId}/deliveries${query}`, {
      token: org.adminToken,
    });
    expect(response.status).toBe(422);
    expect(response.body.error.details.errors.map((e: { field: string }) => e.field)).toEqual([field]);
  });
});

describe('GraphQL', () => {
  const run = <Result, Variables extends Record<string, unknown>>(
    document: TypedDocumentNode<Result, Variables>,
    variables: Variables,
    token: string,
  ) => runOperation(t, document, variables, token);

  async function dashboardStatements(org: OrgFixture) {
    const { result: data, count } = await statements.count(() =>
      run(WebhookDashboardDocument, { orgId: org.orgId, limit: 2 }, org.adminToken),
    );
    return { data, count };
  }

  test('webhooks with their deliveries cost the same few statements for 2 webhooks as for 8', async () => {
    const small = await signUp(t, 'whgql-small');
    const large = await signUp(t, 'whgql-large');
    for (const [org, n] of [
      [small, 2],
      [large, 8],
    ] as const) {
      for (let i = 0; i < n; i++) await localWebhook(org, `/ok/${tag('gql')}`);
      for (let i = 0; i < 3; i++) await publish(org.orgId, 'approval.requested', { n: i });
    }
    await eventually(
      () =>
        t.database.db.sql.query(
          `SELECT count(*)::int AS n FROM webhook_deliveries WHERE org_id IN ($1, $2) AND status <> 'delivered'`,
          [small.orgId, large.orgId],
        ),
      (rows) => (rows[0] as { n: number }).n === 0,
      'dashboard deliveries delivered',
    );

    const a = await dashboardStatements(small);
    const b = await dashboardStatements(large);
    expect(b.data.webhooks.total).toBe(8);
    for (const webhook of b.data.webhooks.items) {
      expect(webhook.deliveries.total).toBe(3);
      expect(webhook.deliveries.items).toHaveLength(2);
      expect(
        webhook.deliveries.items.every((d) => d.webhook_id === webhook.webhook_id && d.status === 'delivered'),
      ).toBe(true);
      expect(webhook.failed.total).toBe(0);
    }
    // Webhook list + one page query per distinct deliveries filter (two aliases here).
    expect(b.count).toBe(a.count);
    expect(b.count).toBe(3);
  });

  test('webhook { deliveries } filters like the REST listing', async () => {
    const org = await signUp(t, 'whgql-one');
    const webhook = await localWebhook(org, `/ok/${tag('gql-one')}`);
    for (let i = 0; i < 3; i++) await publish(org.orgId, 'approval.decided', { n: i });
    const rest = await settled(org, webhook.webhook_id, 3);
    const data = await run(
      WebhookWithDeliveriesDocument,
      { orgId: org.orgId, webhookId: webhook.webhook_id, limit: 2, offset: 1, status: 'delivered' },
      org.adminToken,
    );
    expect(data.webhook.deliveries.total).toBe(3);
    expect(data.webhook.deliveries.items.map((d) => d.delivery_id)).toEqual(
      rest.items.slice(1, 3).map((d) => d.delivery_id),
    );
    const failed = await run(
      WebhookWithDeliveriesDocument,
      { orgId: org.orgId, webhookId: webhook.webhook_id, status: 'failed', limit: null, offset: null },
      org.adminToken,
    );
    expect(failed.webhook.deliveries).toEqual({ total: 0, items: [] });
  });
});

describe('retry schedule (pure)', () => {
  test('doubles from the base, capped', () => {
    expect([1, 2, 3, 4, 5].map((n) => retryDelayMs(n, 2000))).toEqual([2000, 4000, 8000, 16000, 32000]);
    expect(retryDelayMs(40, 2000)).toBe(MAX_RETRY_DELAY_MS);
  });
});
