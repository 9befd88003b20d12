import { createHmac } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { startRecordingServer, type Hit, type RecordingServer } from '../../support/recording-server.js';
import { LOOPBACK_UPSTREAMS, startTestApp, type TestApp } from '../../support/app.js';
import {
  addUser,
  createKey,
  createManifest,
  manifestPayload,
  signUp,
  type OrgFixture,
} from '../../support/fixtures.js';

/**
 * Tool connectors (docs/reference/gateway.md#tools):
 * CRUD with write-only secrets, and execution through the gateway against a receiver on 127.0.0.1,
 * including every failure that must come back as a result and the address policy (SSRF).
 */

let t: TestApp;
const iso = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;
const SECRET = 'whsec-0123456789abcdef';
/** Header values are credentials as often as not: write-only like the secret. */
const HEADERS = { Authorization: 'Bearer tok-4f9d2c1e8b7a6350', 'x-tenant': 'acme-tenant-7731' };
const WRITE_ONLY_VALUES = [SECRET, ...Object.values(HEADERS)];

// ---------------------------------------------------------------------------------------------
// A local receiver on 127.0.0.1 that records every request it gets.

const hits: Hit[] = [];
const pendingTimers = new Set<NodeJS.Timeout>();
let receiver: RecordingServer;
let port: number;
const hitsTo = (path: string) => hits.filter((h) => h.path === path);

function route(hit: Hit, res: http.ServerResponse) {
  res.on('error', () => undefined);
  switch (hit.path) {
    case '/ok': {
      const call = JSON.parse(hit.body);
      res.writeHead(200, { 'content-type': 'application/json' });
      return res.end(JSON.stringify({ received: true, refund_id: 'rf_1', echo: call.action.params }));
    }
    case '/fail':
      res.writeHead(500, { 'content-type': 'application/json' });
      return res.end(JSON.stringify({ error: 'boom' }));
    case '/redirect':
      res.writeHead(302, { location: `http://127.0.0.1:${port}/target` });
      return res.end();
    case '/target':
      res.writeHead(200, { 'content-type': 'application/json' });
      return res.end(JSON.stringify({ reached: 'target' }));
    case '/slow': {
      const timer = setTimeout(() => {
        pendingTimers.delete(timer);
        if (!res.destroyed) res.end(JSON.stringify({ late: true }));
      }, 1500);
      pendingTimers.add(timer);
      return;
    }
    case '/big':
      res.writeHead(200, { 'content-type': 'application/json' });
      return res.end(Buffer.alloc(2 * 1024 * 1024, 'a'));
    case '/medium':
      res.writeHead(200, { 'content-type': 'application/json' });
      return res.end(JSON.stringify({ blob: 'b'.repeat(512 * 1024) }));
    case '/text':
      res.writeHead(200, { 'content-type': 'text/plain' });
      return res.end('plain words');
    default:
      res.writeHead(404);
      return res.end();
  }
}

beforeAll(async () => {
  receiver = await startRecordingServer(hits, (hit, res) => route(hit, res));
  port = receiver.port;
  t = await startTestApp(LOOPBACK_UPSTREAMS);
});

afterAll(async () => {
  for (const timer of pendingTimers) clearTimeout(timer);
  await receiver.close();
  await t.close();
});

// ---------------------------------------------------------------------------------------------
// Helpers

const toolsPath = (org: OrgFixture) => `/api/v1/orgs/${org.orgId}/tools`;

/** An org with an active agent allowed billing:read/refund, a gateway key and (optionally) a tool. */
async function gatewayOrg(tool?: { connector: string; config: Record<string, unknown> }) {
  const org = await signUp(t, 'tools');
  const { svcId } = await createManifest(
    t,
    org,
    'active',
    manifestPayload({
      capabilities: ['billing:read', 'billing:refund'],
      constraints: { max_actions_per_hour: 1000, max_actions_per_day: 1000 },
    }),
  );
  let toolId: string | undefined;
  if (tool) {
    const created = await t.request('POST', toolsPath(org), {
      token: org.adminToken,
      body: { action_type: 'billing', ...tool },
    });
    if (created.status !== 201) throw new Error(`tool create failed: ${created.status} ${created.text}`);
    toolId = created.body.tool_id;
  }
  const { key } = await createKey(t, org, ['gateway:execute']);
  const execute = (params: Record<string, unknown> = { invoice: 'inv_42', amount: 1250 }, toolName = 'refund') =>
    t.request('POST', '/api/v1/gateway/execute', {
      apiKey: key,
      body: { svc_id: svcId, agent_id: svcId, action: { type: 'billing', tool: toolName, params } },
    });
  return { org, svcId, toolId, execute };
}

const httpTool = (config: Record<string, unknown>) => ({ connector: 'http', config: { timeout_ms: 5000, ...config } });
const local = (path: string) => `http://127.0.0.1:${port}${path}`;

/** The gateway allowed and executed the action; the tool run failed with `code`. */
function expectToolFailure(response: { status: number; body: any }, code: string) {
  expect(response.status).toBe(200);
  expect(response.body).toMatchObject({ decision: 'allow', executed: true, reasons: [] });
  expect(response.body.result).toMatchObject({ success: false, error: { code, message: expect.any(String) } });
}

// ---------------------------------------------------------------------------------------------

describe('tool CRUD', () => {
  let org: OrgFixture;
  beforeAll(async () => {
    org = await signUp(t, 'toolcrud');
  });

  test('a mock tool: 201 with its shape, readable and listed', async () => {
    const created = await t.request('POST', toolsPath(org), {
      token: org.adminToken,
      body: { action_type: 'billing', connector: 'mock', config: { response: { ok: true } } },
    });
    expect(created.status).toBe(201);
    expect(created.body).toEqual({
      tool_id: expect.stringMatching(/^tool_[A-Za-z0-9_-]+$/),
      action_type: 'billing',
      connector: 'mock',
      config: { response: { ok: true } },
      definitions: [],
      definitions_checked_at: null,
      definitions_error: null,
      created_at: expect.stringMatching(iso),
      updated_at: expect.stringMatching(iso),
    });
    const read = await t.request('GET', `${toolsPath(org)}/${created.body.tool_id}`, { token: org.adminToken });
    expect(read.status).toBe(200);
    expect(read.body).toEqual(created.body);
    const list = await t.request('GET', toolsPath(org), { token: org.adminToken });
    expect(list.status).toBe(200);
    expect(list.body.items).toContainEqual(created.body);
  });

  test('an http tool: the secret and header values are write-only ("[redacted]"), never in GET, list, GraphQL or the audit log', async () => {
    const created = await t.request('POST', toolsPath(org), {
      token: org.adminToken,
      body: {
        action_type: 'crm',
        connector: 'http',
        config: { url: 'https://tools.example.com/hook', timeout_ms: 2500, headers: HEADERS, secret: SECRET },
      },
    });
    expect(created.status).toBe(201);
    expect(created.body).toEqual({
      tool_id: expect.stringMatching(/^tool_/),
      action_type: 'crm',
      connector: 'http',
      config: {
        url: 'https://tools.example.com/hook',
        timeout_ms: 2500,
        headers: { Authorization: '[redacted]', 'x-tenant': '[redacted]' },
        auth: { type: 'headers' },
        allow_private_network: false,
        secret: '[redacted]',
      },
      definitions: [],
      definitions_checked_at: null,
      definitions_error: null,
      created_at: expect.stringMatching(iso),
      updated_at: expect.stringMatching(iso),
    });
    const read = await t.request('GET', `${toolsPath(org)}/${created.body.tool_id}`, { token: org.adminToken });
    expect(read.body.config).toEqual(created.body.config);
    const list = await t.request('GET', toolsPath(org), { token: org.adminToken });
    const graphql = await t.graphql(
      `query($org: ID!) { tools(org_id: $org) { items { tool_id config } } }`,
      { org: org.orgId },
      { token: org.adminToken },
    );
    expect(graphql.status).toBe(200);
    expect(graphql.text).toContain(created.body.tool_id);
    const audit = await t.database.db.sql.query<{ after: any }>('SELECT * FROM audit_logs WHERE target_id = $1', [
      created.body.tool_id,
    ]);
    expect(audit).toHaveLength(1);
    expect(audit[0].after.config).toEqual(created.body.config);
    // The audit log as a viewer and a logs:read key read it, and its export.
    const viewer = await addUser(t, org, 'viewer');
    const { key } = await createKey(t, org, ['logs:read', 'logs:export']);
    const auditViews = [
      await t.request('GET', `/api/v1/orgs/${org.orgId}/audit-logs?action=tool`, { token: viewer.token }),
      await t.request('GET', `/api/v1/orgs/${org.orgId}/audit-logs?action=tool`, { apiKey: key }),
      await t.request('GET', `/api/v1/orgs/${org.orgId}/audit-logs/export?format=jsonl`, { apiKey: key }),
    ];
    expect(auditViews.map((r) => r.status)).toEqual([200, 200, 200]);
    expect(auditViews[0].text).toContain(created.body.tool_id);
    for (const text of [
      created.text,
      read.text,
      list.text,
      graphql.text,
      JSON.stringify(audit),
      ...auditViews.map((r) => r.text),
    ]) {
      for (const secret of WRITE_ONLY_VALUES) expect(text).not.toContain(secret);
    }
  });

  test('an http tool without a secret shows secret: null and the default timeout', async () => {
    const created = await t.request('POST', toolsPath(org), {
      token: org.adminToken,
      body: { action_type: 'no-secret', connector: 'http', config: { url: 'http://tools.example.com/' } },
    });
    expect(created.status).toBe(201);
    expect(created.body.config).toEqual({
      url: 'http://tools.example.com/',
      timeout_ms: 10000,
      headers: {},
      auth: { type: 'headers' },
      allow_private_network: false,
      secret: null,
    });
  });

  test('a second tool for the same action type: 409 CONFLICT, and the first is unchanged', async () => {
    const first = await t.request('POST', toolsPath(org), {
      token: org.adminToken,
      body: { action_type: 'dup', connector: 'mock', config: { response: { n: 1 } } },
    });
    expect(first.status).toBe(201);
    const second = await t.request('POST', toolsPath(org), {
      token: org.adminToken,
      body: { action_type: 'dup', connector: 'http', config: { url: 'https://tools.example.com/' } },
    });
    expect(second.status).toBe(409);
    expect(second.body.error.code).toBe('CONFLICT');
    const list = await t.request('GET', toolsPath(org), { token: org.adminToken });
    expect(list.body.items.filter((i: { action_type: string }) => i.action_type === 'dup')).toEqual([first.body]);
  });

  test('PATCH replaces config whole; without config it keeps config and secret; a taken action type is 409', async () => {
    const created = await t.request('POST', toolsPath(org), {
      token: org.adminToken,
      body: {
        action_type: 'patchme',
        connector: 'http',
        config: { url: 'https://a.example.com/', timeout_ms: 1234, headers: { 'x-a': '1' }, secret: SECRET },
      },
    });
    expect(created.status).toBe(201);
    const path = `${toolsPath(org)}/${created.body.tool_id}`;

    const renamed = await t.request('PATCH', path, { token: org.adminToken, body: { action_type: 'patched' } });
    expect(renamed.status).toBe(200);
    expect(renamed.body).toMatchObject({
      tool_id: created.body.tool_id,
      action_type: 'patched',
      config: created.body.config,
    });
    expect(renamed.body.config.secret).toBe('[redacted]');
    const [row] = await t.database.db.sql.query<{ secret: string | null }>('SELECT secret FROM tools WHERE id = $1', [
      created.body.tool_id,
    ]);
    expect(row.secret).toBe(SECRET);

    const replaced = await t.request('PATCH', path, {
      token: org.adminToken,
      body: { config: { url: 'https://b.example.com/x' } },
    });
    expect(replaced.status).toBe(200);
    expect(replaced.body.config).toEqual({
      url: 'https://b.example.com/x',
      timeout_ms: 10000,
      headers: {},
      auth: { type: 'headers' },
      allow_private_network: false,
      secret: null,
    });
    expect((await t.request('GET', path, { token: org.adminToken })).body.config).toEqual(replaced.body.config);

    const toMock = await t.request('PATCH', path, {
      token: org.adminToken,
      body: { connector: 'mock', config: { response: { via: 'mock' } } },
    });
    expect(toMock.status).toBe(200);
    expect(toMock.body).toMatchObject({ connector: 'mock', config: { response: { via: 'mock' } } });

    const invalid = await t.request('PATCH', path, {
      token: org.adminToken,
      body: { connector: 'http', config: { url: 'gopher://x' } },
    });
    expect(invalid.status).toBe(422);
    expect(invalid.body.error.details.errors.map((e: { field: string }) => e.field)).toEqual(['config.url']);
    expect((await t.request('GET', path, { token: org.adminToken })).body).toMatchObject({
      connector: 'mock',
      action_type: 'patched',
    });
  });

  test('PATCH to an action type another tool has: 409 CONFLICT, nothing changes', async () => {
    const taken = await t.request('POST', toolsPath(org), {
      token: org.adminToken,
      body: { action_type: 'taken', connector: 'mock', config: {} },
    });
    expect(taken.status).toBe(201);
    const mover = await t.request('POST', toolsPath(org), {
      token: org.adminToken,
      body: { action_type: 'mover', connector: 'http', config: { url: 'https://c.example.com/', secret: SECRET } },
    });
    expect(mover.status).toBe(201);
    const clash = await t.request('PATCH', `${toolsPath(org)}/${mover.body.tool_id}`, {
      token: org.adminToken,
      body: { action_type: 'taken' },
    });
    expect(clash.status).toBe(409);
    expect(clash.body.error.code).toBe('CONFLICT');
    const read = await t.request('GET', `${toolsPath(org)}/${mover.body.tool_id}`, { token: org.adminToken });
    expect(read.body).toMatchObject({ action_type: 'mover', config: mover.body.config });
  });

  test('PATCH of a mock tool without config keeps its config (only the action type changes)', async () => {
    const created = await t.request('POST', toolsPath(org), {
      token: org.adminToken,
      body: { action_type: 'mock-rename', connector: 'mock', config: { response: { kept: true } } },
    });
    expect(created.status).toBe(201);
    const renamed = await t.request('PATCH', `${toolsPath(org)}/${created.body.tool_id}`, {
      token: org.adminToken,
      body: { action_type: 'mock-renamed' },
    });
    expect(renamed.status).toBe(200);
    expect(renamed.body).toMatchObject({
      action_type: 'mock-renamed',
      connector: 'mock',
      config: { response: { kept: true } },
    });
  });

  test('PATCH with the config as GET shows it ("[redacted]") keeps the secret and header values; given values replace them', async () => {
    const {
      org: own,
      toolId,
      execute,
    } = await gatewayOrg(
      httpTool({ url: local('/ok'), secret: SECRET, headers: HEADERS, allow_private_network: true }),
    );
    const path = `${toolsPath(own)}/${toolId}`;
    const lastHit = () => hitsTo('/ok')[hitsTo('/ok').length - 1];
    const signedWith = (secret: string) => {
      const hit = lastHit();
      return (
        hit.headers['x-signature'] ===
        `sha256=${createHmac('sha256', secret).update(`${hit.headers['x-timestamp']}.${hit.body}`).digest('hex')}`
      );
    };

    // Read, change the timeout, write back: what is "[redacted]" stays as it was.
    const shown = (await t.request('GET', path, { token: own.adminToken })).body.config;
    const roundTrip = await t.request('PATCH', path, {
      token: own.adminToken,
      body: { config: { ...shown, timeout_ms: 3000 } },
    });
    expect(roundTrip.status).toBe(200);
    expect(roundTrip.body.config).toEqual({ ...shown, timeout_ms: 3000 });
    expect((await execute()).body.result.success).toBe(true);
    expect(lastHit().headers).toMatchObject({ authorization: HEADERS.Authorization, 'x-tenant': HEADERS['x-tenant'] });
    expect(signedWith(SECRET)).toBe(true);

    // One header value replaced, one kept, one header dropped by leaving it out, a new secret.
    const newSecret = 'a-new-secret-0123456789';
    const changed = await t.request('PATCH', path, {
      token: own.adminToken,
      body: { config: { ...shown, headers: { Authorization: 'Bearer tok-rotated-99887766' }, secret: newSecret } },
    });
    expect(changed.status).toBe(200);
    expect(changed.body.config.headers).toEqual({ Authorization: '[redacted]' });
    expect((await execute()).body.result.success).toBe(true);
    expect(lastHit().headers.authorization).toBe('Bearer tok-rotated-99887766');
    expect(lastHit().headers['x-tenant']).toBeUndefined();
    expect(signedWith(newSecret)).toBe(true);

    // Without config everything is kept.
    expect((await t.request('PATCH', path, { token: own.adminToken, body: { action_type: 'billing' } })).status).toBe(
      200,
    );
    expect((await execute()).body.result.success).toBe(true);
    expect(lastHit().headers.authorization).toBe('Bearer tok-rotated-99887766');
    expect(signedWith(newSecret)).toBe(true);

    const audits = await t.database.db.sql.query<{ action: string; before: any; after: any }>(
      'SELECT action, before, after FROM audit_logs WHERE target_id = $1 ORDER BY created_at, id',
      [toolId],
    );
    expect(audits.map((a) => [a.action, a.after.secrets_set])).toEqual([
      ['tool.created', undefined],
      ['tool.updated', []],
      ['tool.updated', ['headers.Authorization', 'secret']],
      ['tool.updated', []],
    ]);
    expect(audits[2].before.config.headers).toEqual({ Authorization: '[redacted]', 'x-tenant': '[redacted]' });
    const text = JSON.stringify(audits);
    for (const secret of [...WRITE_ONLY_VALUES, newSecret, 'tok-rotated-99887766']) expect(text).not.toContain(secret);
  });

  test.each([
    [
      '"[redacted]" for a header the tool does not have',
      { headers: { 'x-other': '[redacted]' } },
      'config.headers.x-other',
    ],
    ['"[redacted]" for a secret the tool does not have', { secret: '[redacted]' }, 'config.secret'],
    ['a header name with a space', { headers: { 'x bad': 'v' } }, 'config.headers.x bad'],
    ['a header value with a line break', { headers: { 'x-injected': 'v\r\nx-evil: 1' } }, 'config.headers.x-injected'],
    ['one header named twice', { headers: { 'X-A': '1', 'x-a': '2' } }, 'config.headers'],
  ])('%s: 422 naming it, the tool unchanged', async (_label, change, field) => {
    const created = await t.request('POST', toolsPath(org), {
      token: org.adminToken,
      body: {
        action_type: `h-${Math.random().toString(36).slice(2, 8)}`,
        connector: 'http',
        config: { url: 'https://tools.example.com/' },
      },
    });
    const path = `${toolsPath(org)}/${created.body.tool_id}`;
    const response = await t.request('PATCH', path, {
      token: org.adminToken,
      body: { config: { url: 'https://tools.example.com/', ...change } },
    });
    expect(response.status).toBe(422);
    expect(response.body.error.details.errors).toEqual([{ field, message: expect.any(String) }]);
    expect((await t.request('GET', path, { token: org.adminToken })).body).toEqual(created.body);
  });

  test('DELETE: 204, then GET, PATCH and DELETE are 404 and the action type is free again', async () => {
    const created = await t.request('POST', toolsPath(org), {
      token: org.adminToken,
      body: { action_type: 'gone', connector: 'mock', config: {} },
    });
    const path = `${toolsPath(org)}/${created.body.tool_id}`;
    const deleted = await t.request('DELETE', path, { token: org.adminToken });
    expect(deleted.status).toBe(204);
    expect(deleted.text).toBe('');
    for (const [method, body] of [
      ['GET', undefined],
      ['PATCH', { action_type: 'x' }],
      ['DELETE', undefined],
    ] as const) {
      const response = await t.request(method, path, { token: org.adminToken, body });
      expect(response.status).toBe(404);
      expect(response.body.error.code).toBe('NOT_FOUND');
    }
    const list = await t.request('GET', toolsPath(org), { token: org.adminToken });
    expect(list.body.items.map((i: { tool_id: string }) => i.tool_id)).not.toContain(created.body.tool_id);
    const again = await t.request('POST', toolsPath(org), {
      token: org.adminToken,
      body: { action_type: 'gone', connector: 'mock', config: {} },
    });
    expect(again.status).toBe(201);
  });

  test('another org’s tool is 404; a viewer may not manage tools (403)', async () => {
    const created = await t.request('POST', toolsPath(org), {
      token: org.adminToken,
      body: { action_type: 'private', connector: 'mock', config: {} },
    });
    const other = await signUp(t, 'toolother');
    const foreign = await t.request('GET', `${toolsPath(org)}/${created.body.tool_id}`, { token: other.adminToken });
    expect(foreign.status).toBe(404);
    const viaOwn = await t.request('GET', `${toolsPath(other)}/${created.body.tool_id}`, { token: other.adminToken });
    expect(viaOwn.status).toBe(404);
    const viewer = await addUser(t, org, 'viewer');
    const denied = await t.request('POST', toolsPath(org), {
      token: viewer.token,
      body: { action_type: 'viewer-made', connector: 'mock', config: {} },
    });
    expect(denied.status).toBe(403);
    const operator = await addUser(t, org, 'operator');
    const allowed = await t.request('POST', toolsPath(org), {
      token: operator.token,
      body: { action_type: 'operator-made', connector: 'mock', config: {} },
    });
    expect(allowed.status).toBe(201);
  });

  test.each([
    ['an unknown connector', { connector: 'ftp' }, 'connector'],
    ['an action type with capitals', { action_type: 'Billing' }, 'action_type'],
    ['an action type with a colon', { action_type: 'billing:refund' }, 'action_type'],
    ['a non-http(s) url', { config: { url: 'ftp://tools.example.com/' } }, 'config.url'],
    ['a file url', { config: { url: 'file:///etc/passwd' } }, 'config.url'],
    ['a url with credentials', { config: { url: 'https://user:pass@tools.example.com/' } }, 'config.url'],
    ['a url with a user name only', { config: { url: 'https://user@tools.example.com/' } }, 'config.url'],
    ['no url', { config: {} }, 'config.url'],
    ['timeout_ms 0', { config: { url: 'https://tools.example.com/', timeout_ms: 0 } }, 'config.timeout_ms'],
    ['timeout_ms 60001', { config: { url: 'https://tools.example.com/', timeout_ms: 60001 } }, 'config.timeout_ms'],
    ['timeout_ms 1.5', { config: { url: 'https://tools.example.com/', timeout_ms: 1.5 } }, 'config.timeout_ms'],
    [
      'a 15-character secret',
      { config: { url: 'https://tools.example.com/', secret: '0123456789abcde' } },
      'config.secret',
    ],
    ['a non-string header', { config: { url: 'https://tools.example.com/', headers: { 'x-n': 1 } } }, 'config.headers'],
    [
      'a non-boolean allow_private_network',
      { config: { url: 'https://tools.example.com/', allow_private_network: 'yes' } },
      'config.allow_private_network',
    ],
    ['an unknown http config field', { config: { url: 'https://tools.example.com/', method: 'GET' } }, 'config.method'],
    ['an unknown mock config field', { connector: 'mock', config: { response: {}, delay: 5 } }, 'config.delay'],
  ])('%s: 422 naming the field', async (_label, override, field) => {
    const body = {
      action_type: `v-${Math.random().toString(36).slice(2, 8)}`,
      connector: 'http',
      config: { url: 'https://tools.example.com/' },
      ...override,
    };
    const before = (await t.request('GET', toolsPath(org), { token: org.adminToken })).body.total;
    const response = await t.request('POST', toolsPath(org), { token: org.adminToken, body });
    expect(response.status).toBe(422);
    expect(response.body.error.code).toBe('VALIDATION_ERROR');
    expect(response.body.error.details.errors).toEqual([{ field, message: expect.any(String) }]);
    expect((await t.request('GET', toolsPath(org), { token: org.adminToken })).body.total).toBe(before);
  });

  test('the boundaries are accepted: timeout_ms 1 and 60000, a 16-character secret', async () => {
    for (const [actionType, config] of [
      ['edge-1', { url: 'https://tools.example.com/', timeout_ms: 1 }],
      ['edge-2', { url: 'https://tools.example.com/', timeout_ms: 60000, secret: '0123456789abcdef' }],
    ] as const) {
      const response = await t.request('POST', toolsPath(org), {
        token: org.adminToken,
        body: { action_type: actionType, connector: 'http', config },
      });
      expect(response.status).toBe(201);
      expect(response.body.config.timeout_ms).toBe(config.timeout_ms);
    }
  });
});

describe('execution through the gateway', () => {
  test('no tool for the action type: deny with exactly TOOL_NOT_CONFIGURED', async () => {
    const { execute } = await gatewayOrg();
    const response = await execute();
    expect(response.status).toBe(200);
    expect(response.body).toMatchObject({ decision: 'deny', executed: false, result: null });
    expect(response.body.reasons.map((r: { code: string }) => r.code)).toEqual(['TOOL_NOT_CONFIGURED']);
    expect(response.body.reasons[0].message).toContain('billing');
  });

  test('a deleted tool is not configured any more', async () => {
    const { org, toolId, execute } = await gatewayOrg({ connector: 'mock', config: { response: { ok: true } } });
    expect((await execute()).body).toMatchObject({
      decision: 'allow',
      executed: true,
      result: { success: true, data: { ok: true } },
    });
    expect((await t.request('DELETE', `${toolsPath(org)}/${toolId}`, { token: org.adminToken })).status).toBe(204);
    const after = await execute();
    expect(after.body.decision).toBe('deny');
    expect(after.body.reasons.map((r: { code: string }) => r.code)).toEqual(['TOOL_NOT_CONFIGURED']);
  });

  test('a mock tool without a response echoes the params', async () => {
    const { execute } = await gatewayOrg({ connector: 'mock', config: {} });
    const response = await execute({ invoice: 'inv_7', amount: 3 });
    expect(response.body).toMatchObject({ decision: 'allow', executed: true, reasons: [] });
    expect(response.body.result).toEqual({ success: true, data: { invoice: 'inv_7', amount: 3 }, error: null });
  });

  test('http with allow_private_network: the receiver gets a signed POST of the call and its JSON is the result', async () => {
    const { svcId, execute } = await gatewayOrg(
      httpTool({ url: local('/ok'), secret: SECRET, headers: HEADERS, allow_private_network: true }),
    );
    const before = hitsTo('/ok').length;
    const response = await execute({ invoice: 'inv_42', amount: 1250 });
    expect(response.status).toBe(200);
    expect(response.body).toMatchObject({ decision: 'allow', executed: true, reasons: [] });
    expect(response.body.result).toEqual({
      success: true,
      data: { received: true, refund_id: 'rf_1', echo: { invoice: 'inv_42', amount: 1250 } },
      error: null,
    });

    const received = hitsTo('/ok');
    expect(received.length).toBe(before + 1);
    const hit = received[received.length - 1];
    expect(hit.method).toBe('POST');
    expect(hit.headers['content-type']).toBe('application/json');
    expect(hit.headers.authorization).toBe(HEADERS.Authorization);
    expect(hit.headers['x-tenant']).toBe(HEADERS['x-tenant']);
    expect(hit.headers['x-interaction-id']).toBe(response.body.interaction_id);
    expect(JSON.parse(hit.body)).toEqual({
      svc_id: svcId,
      agent_id: svcId,
      action: { type: 'billing', tool: 'refund', params: { invoice: 'inv_42', amount: 1250 } },
      interaction_id: response.body.interaction_id,
    });

    const timestamp = hit.headers['x-timestamp'] as string;
    expect(timestamp).toMatch(/^\d+$/);
    expect(Math.abs(Number(timestamp) - Date.now() / 1000)).toBeLessThan(30);
    const expected = `sha256=${createHmac('sha256', SECRET).update(`${timestamp}.${hit.body}`).digest('hex')}`;
    expect(hit.headers['x-signature']).toBe(expected);
    const wrong = `sha256=${createHmac('sha256', 'another-secret-of-16+').update(`${timestamp}.${hit.body}`).digest('hex')}`;
    expect(hit.headers['x-signature']).not.toBe(wrong);
    expect(JSON.stringify(hit.headers)).not.toContain(SECRET);
    expect(hit.body).not.toContain(SECRET);

    const [record] = await t.database.db.sql.query<{ status: string; executed: boolean; result_hash: string | null }>(
      'SELECT status, executed, result_hash FROM interaction_records WHERE id = $1',
      [response.body.interaction_id],
    );
    expect(record).toMatchObject({ status: 'approved', executed: true, result_hash: expect.any(String) });
  });

  test('http without a secret sends no x-signature; a non-JSON answer becomes {body}', async () => {
    const { execute } = await gatewayOrg(httpTool({ url: local('/text'), allow_private_network: true }));
    const before = hitsTo('/text').length;
    const response = await execute();
    expect(response.body.result).toEqual({ success: true, data: { body: 'plain words' }, error: null });
    const hit = hitsTo('/text')[before];
    expect(hit.headers['x-signature']).toBeUndefined();
    expect(hit.headers['x-timestamp']).toMatch(/^\d+$/);
  });

  test('localhost (a hostname resolving to loopback) with allow_private_network reaches the receiver', async () => {
    const { execute } = await gatewayOrg(httpTool({ url: `http://localhost:${port}/ok`, allow_private_network: true }));
    const before = hitsTo('/ok').length;
    const response = await execute();
    expect(response.body.result).toMatchObject({ success: true, data: { received: true } });
    expect(hitsTo('/ok').length).toBe(before + 1);
  });

  test('a 512 KiB answer (under the 1 MiB cap) is returned whole', async () => {
    const { execute } = await gatewayOrg(httpTool({ url: local('/medium'), allow_private_network: true }));
    const response = await execute();
    expect(response.body.result.success).toBe(true);
    expect(response.body.result.data.blob).toHaveLength(512 * 1024);
  });

  describe('failures are results (allow, executed, success false)', () => {
    test('the receiver answers 500: TOOL_HTTP_ERROR with its body as data', async () => {
      const { execute } = await gatewayOrg(httpTool({ url: local('/fail'), allow_private_network: true }));
      const before = hitsTo('/fail').length;
      const response = await execute();
      expectToolFailure(response, 'TOOL_HTTP_ERROR');
      expect(response.body.result.error.message).toContain('500');
      expect(response.body.result.data).toEqual({ error: 'boom' });
      expect(hitsTo('/fail').length).toBe(before + 1);
    });

    test('the receiver answers 302: TOOL_REDIRECT_REFUSED and the Location is not requested', async () => {
      const { execute } = await gatewayOrg(httpTool({ url: local('/redirect'), allow_private_network: true }));
      const redirectsBefore = hitsTo('/redirect').length;
      const response = await execute();
      expectToolFailure(response, 'TOOL_REDIRECT_REFUSED');
      expect(hitsTo('/redirect').length).toBe(redirectsBefore + 1);
      await new Promise((resolve) => setTimeout(resolve, 100));
      expect(hitsTo('/target')).toHaveLength(0);
    });

    test('the receiver is slower than timeout_ms 200: TOOL_TIMEOUT, well before the receiver answers', async () => {
      const { execute } = await gatewayOrg(
        httpTool({ url: local('/slow'), timeout_ms: 200, allow_private_network: true }),
      );
      const started = Date.now();
      const response = await execute();
      const elapsed = Date.now() - started;
      expectToolFailure(response, 'TOOL_TIMEOUT');
      expect(response.body.result.error.message).toContain('200');
      expect(elapsed).toBeLessThan(1400);
      expect(hitsTo('/slow').length).toBeGreaterThan(0);
    });

    test('the receiver sends 2 MiB: TOOL_RESPONSE_TOO_LARGE', async () => {
      const { execute } = await gatewayOrg(httpTool({ url: local('/big'), allow_private_network: true }));
      const response = await execute();
      expectToolFailure(response, 'TOOL_RESPONSE_TOO_LARGE');
      expect(response.body.result.data).toEqual({});
      expect(response.text.length).toBeLessThan(10_000);
    });

    test('nothing listens on the port: TOOL_UNREACHABLE', async () => {
      const closed = http.createServer();
      await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
      const deadPort = (closed.address() as AddressInfo).port;
      await new Promise<void>((resolve) => closed.close(() => resolve()));
      const { execute } = await gatewayOrg(
        httpTool({ url: `http://127.0.0.1:${deadPort}/`, allow_private_network: true }),
      );
      expectToolFailure(await execute(), 'TOOL_UNREACHABLE');
    });
  });

  describe('address policy at call time: rows saved before save-time checks, names that resolve to private addresses', () => {
    // Saving refuses these (see "address policy when saving"); rows written before that check
    // existed, or names that start resolving to such addresses (DNS rebinding), are still refused
    // on connecting. The rows are written directly, as saving (rightly) refuses them.
    const cases: [string, () => string][] = [
      ['127.0.0.1', () => local('/ok')],
      ['10.0.0.1', () => 'http://10.0.0.1/'],
      ['169.254.169.254 (cloud metadata)', () => 'http://169.254.169.254/latest/meta-data'],
      ['[::1]', () => `http://[::1]:${port}/ok`],
      ['localhost (resolves to loopback)', () => `http://localhost:${port}/ok`],
      ['[::ffff:127.0.0.1] (IPv4-mapped loopback)', () => `http://[::ffff:127.0.0.1]:${port}/ok`],
      ['[64:ff9b::127.0.0.1] (NAT64 of loopback)', () => `http://[64:ff9b::127.0.0.1]:${port}/ok`],
      ['[::127.0.0.1] (IPv4-compatible)', () => `http://[::127.0.0.1]:${port}/ok`],
      ['0.0.0.0', () => `http://0.0.0.0:${port}/ok`],
      ['2130706433 (decimal loopback)', () => `http://2130706433:${port}/ok`],
      ['127.1 (short loopback)', () => `http://127.1:${port}/ok`],
      ['[::] (unspecified)', () => `http://[::]:${port}/ok`],
    ];

    test.each(cases)('%s: TOOL_ADDRESS_REFUSED and the receiver counts no request', async (_label, url) => {
      const before = hits.length;
      const { toolId, execute } = await gatewayOrg(
        httpTool({ url: 'https://tools.example.com/placeholder', timeout_ms: 5000 }),
      );
      await t.database.db.sql.query(
        `UPDATE tools SET config = jsonb_set(config, '{url}', to_jsonb($2::text)) WHERE id = $1`,
        [toolId, url()],
      );
      const started = Date.now();
      const response = await execute();
      expectToolFailure(response, 'TOOL_ADDRESS_REFUSED');
      expect(response.body.result.data).toEqual({});
      expect(Date.now() - started).toBeLessThan(4000);
      expect(hits.length).toBe(before);
    });
  });
});

describe('address policy when saving (SSRF): the rule webhooks follow, 422 on config.url', () => {
  let org: OrgFixture;
  /**
   * A deployment that opens every private range (OUTBOUND_PRIVATE_NETWORKS), on a database of its
   * own: its background work (webhook deliveries) must not reach this file's receivers.
   */
  let wide: TestApp;
  let wideOrg: OrgFixture;
  beforeAll(async () => {
    org = await signUp(t, 'toolssrf');
    wide = await startTestApp({ OUTBOUND_PRIVATE_NETWORKS: '0.0.0.0/0,::/0' });
    wideOrg = await signUp(wide, 'toolssrf-wide');
  });
  afterAll(() => wide.close());

  // As the URL parser reads them: `127.1`, `2130706433`, `0x7f.1` and `017700000001` are 127.0.0.1,
  // `[::ffff:127.0.0.1]` becomes `[::ffff:7f00:1]`.
  const refusedUrls: [string, () => string][] = [
    ['127.0.0.1', () => local('/ok')],
    ['127.1', () => `http://127.1:${port}/ok`],
    ['2130706433 (decimal)', () => `http://2130706433:${port}/ok`],
    ['0x7f.1 (hex)', () => `http://0x7f.1:${port}/ok`],
    ['017700000001 (octal)', () => `http://017700000001:${port}/ok`],
    ['0.0.0.0', () => `http://0.0.0.0:${port}/ok`],
    ['0 (0.0.0.0)', () => `http://0:${port}/ok`],
    ['10.0.0.1', () => 'http://10.0.0.1/'],
    ['172.16.0.1', () => 'http://172.16.0.1/'],
    ['192.168.1.1', () => 'http://192.168.1.1/'],
    ['100.64.0.1 (carrier-grade NAT)', () => 'http://100.64.0.1/'],
    ['192.0.2.1 (documentation)', () => 'http://192.0.2.1/'],
    ['localhost', () => `http://localhost:${port}/ok`],
    ['LOCALHOST. (upper case, trailing dot)', () => `http://LOCALHOST.:${port}/ok`],
    ['api.localhost', () => `http://api.localhost:${port}/ok`],
    ['[::1]', () => `http://[::1]:${port}/ok`],
    ['[::]', () => `http://[::]:${port}/ok`],
    ['[0:0:0:0:0:0:0:1] (long loopback)', () => `http://[0:0:0:0:0:0:0:1]:${port}/ok`],
    ['[::ffff:127.0.0.1] (IPv4-mapped)', () => `http://[::ffff:127.0.0.1]:${port}/ok`],
    ['[64:ff9b::127.0.0.1] (NAT64 of loopback)', () => `http://[64:ff9b::127.0.0.1]:${port}/ok`],
    ['[64:ff9b:1::1] (local-use NAT64)', () => 'http://[64:ff9b:1::808:808]/'],
    ['[2002:7f00:1::1] (6to4)', () => 'http://[2002:7f00:1::1]/'],
    ['[2002:808:808::1] (6to4 of a public address)', () => 'http://[2002:808:808::1]/'],
    ['[::127.0.0.1] (IPv4-compatible)', () => `http://[::127.0.0.1]:${port}/ok`],
    ['[::ffff:0:127.0.0.1] (IPv4-translated)', () => `http://[::ffff:0:127.0.0.1]:${port}/ok`],
    ['[2001::1] (Teredo)', () => 'http://[2001::1]/'],
    ['[fec0::1] (site-local)', () => 'http://[fec0::1]/'],
    ['[fd00::1] (unique local)', () => 'http://[fd00::1]/'],
    ['[ff02::1] (multicast)', () => 'http://[ff02::1]/'],
    ['[2001:db8::1] (documentation)', () => 'http://[2001:db8::1]/'],
    ['[100::1] (discard)', () => 'http://[100::1]/'],
  ];
  let n = 0;
  const nextActionType = () => `ssrf-${++n}`;

  /** Link-local, where cloud metadata services answer: refused even where every private range is open. */
  const neverReachable: [string, () => string][] = [
    ['169.254.169.254 (cloud metadata)', () => 'http://169.254.169.254/latest/meta-data'],
    ['[::ffff:a9fe:a9fe] (IPv4-mapped metadata, hex)', () => 'http://[::ffff:a9fe:a9fe]/'],
    ['[64:ff9b::a9fe:a9fe] (NAT64 of metadata)', () => 'http://[64:ff9b::a9fe:a9fe]/'],
    ['[fe80::1] (link-local)', () => 'http://[fe80::1]/'],
  ];

  test.each(neverReachable)(
    '%s: 422 on config.url with allow_private_network, even on a deployment that opens every private range',
    async (_label, url) => {
      const refused = await wide.request('POST', toolsPath(wideOrg), {
        token: wideOrg.adminToken,
        body: { action_type: nextActionType(), ...httpTool({ url: url(), allow_private_network: true }) },
      });
      expect(refused.status).toBe(422);
      expect(refused.body.error.details.errors).toEqual([
        { field: 'config.url', message: expect.stringContaining('never reachable') },
      ]);
    },
  );

  test.each(refusedUrls)(
    '%s without allow_private_network: 422 on config.url, nothing saved or sent; accepted with it where the deployment opens it',
    async (_label, url) => {
      const before = hits.length;
      const total = (await t.request('GET', toolsPath(org), { token: org.adminToken })).body.total;
      const refused = await t.request('POST', toolsPath(org), {
        token: org.adminToken,
        body: { action_type: nextActionType(), ...httpTool({ url: url(), secret: SECRET }) },
      });
      expect(refused.status).toBe(422);
      expect(refused.body.error.details.errors).toEqual([
        { field: 'config.url', message: expect.stringContaining('allow_private_network') },
      ]);
      expect((await t.request('GET', toolsPath(org), { token: org.adminToken })).body.total).toBe(total);
      const allowed = await wide.request('POST', toolsPath(wideOrg), {
        token: wideOrg.adminToken,
        body: { action_type: nextActionType(), ...httpTool({ url: url(), allow_private_network: true }) },
      });
      expect(allowed.status).toBe(201);
      expect(hits.length).toBe(before);
    },
  );

  test.each([
    ['a public IPv4 address', 'http://93.184.216.34/'],
    ['IPv4-mapped public', 'http://[::ffff:93.184.216.34]/'],
    ['NAT64 of a public address (DNS64 networks)', 'http://[64:ff9b::93.184.216.34]/'],
    ['public IPv6', 'http://[2606:4700:4700::1111]/'],
    ['a name', 'https://tools.example.com/'],
  ])('%s is saved without allow_private_network', async (_label, url) => {
    const saved = await t.request('POST', toolsPath(org), {
      token: org.adminToken,
      body: { action_type: nextActionType(), ...httpTool({ url }) },
    });
    expect(saved.status).toBe(201);
  });

  test('PATCH to a private URL is 422 and keeps the tool; a refused save leaves the action unconfigured and the receiver untouched', async () => {
    const {
      org: gatewayOrgFixture,
      toolId,
      execute,
    } = await gatewayOrg(httpTool({ url: 'https://tools.example.com/' }));
    const path = `${toolsPath(gatewayOrgFixture)}/${toolId}`;
    const before = hits.length;
    const patched = await t.request('PATCH', path, {
      token: gatewayOrgFixture.adminToken,
      body: { config: { url: local('/ok') } },
    });
    expect(patched.status).toBe(422);
    expect(patched.body.error.details.errors.map((e: { field: string }) => e.field)).toEqual(['config.url']);
    expect((await t.request('GET', path, { token: gatewayOrgFixture.adminToken })).body.config.url).toBe(
      'https://tools.example.com/',
    );

    expect((await t.request('DELETE', path, { token: gatewayOrgFixture.adminToken })).status).toBe(204);
    const refused = await t.request('POST', toolsPath(gatewayOrgFixture), {
      token: gatewayOrgFixture.adminToken,
      body: { action_type: 'billing', ...httpTool({ url: local('/ok') }) },
    });
    expect(refused.status).toBe(422);
    const response = await execute();
    expect(response.body.reasons.map((r: { code: string }) => r.code)).toEqual(['TOOL_NOT_CONFIGURED']);
    expect(hits.length).toBe(before);
  });
});
