import { spawnSync } from 'node:child_process';
import { createCipheriv, createHmac, generateKeyPairSync, randomBytes, sign, verify } from 'node:crypto';
import { cp, mkdtemp, rm } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import pino from 'pino';
import { reencryptSecrets } from '../src/cli/reencrypt.js';
import { defaultMigrationsDir, migrate } from '../src/db/migrate.js';
import { EnvError, parseEnv } from '../src/env.js';
import { keyIdOf, SecretBox } from '../src/lib/secret-box.js';
import { SigningKeyStore } from '../src/lib/signing-keys.js';
import { enqueueWebhookEvent } from '../src/modules/webhook/webhook.service.js';
import { LOOPBACK_UPSTREAMS, startTestApp, type TestApp } from './support/app.js';
import { backend, createTestDatabase, reopenTestDatabase, type TestDatabase } from './support/database.js';
import { signUp, type OrgFixture } from './support/fixtures.js';
import { execute, readyAgent, type AgentFixture } from './support/gateway.js';
import { nodeArguments } from './support/child-command.js';

/**
 * Secrets at rest (KEY_ENCRYPTION_KEY): signing keys, http tools' secret and header values and
 * webhook secrets are sealed in the database, still sign and send what they should, rows written
 * without a key keep working, the key rotates (KEY_ENCRYPTION_KEY_PREVIOUS + `agent-gateway
 * reencrypt`), and the service warns at start when no key is set. Several app instances share one
 * database (on PostgreSQL each with its own pool), one after the other, as a restart with a new
 * environment would.
 */

const FIRST_KEY = randomBytes(32);
const SECOND_KEY = randomBytes(32);
const hex = (key: Buffer) => key.toString('hex');

let database: TestDatabase;

// ---------------------------------------------------------------------------------------------
// A receiver on 127.0.0.1 recording every request; it answers 200 with JSON.

interface Hit {
  path: string;
  headers: http.IncomingHttpHeaders;
  body: string;
}
const hits: Hit[] = [];
let receiver: http.Server;
let port: number;
const hitsTo = (p: string) => hits.filter((hit) => hit.path === p);

beforeAll(async () => {
  receiver = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      hits.push({ path: req.url!, headers: req.headers, body: Buffer.concat(chunks).toString('utf8') });
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{"ok":true}');
    });
  });
  await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
  port = (receiver.address() as AddressInfo).port;
  database = await createTestDatabase();
});

afterAll(async () => {
  receiver.closeAllConnections();
  await new Promise<void>((resolve) => receiver.close(() => resolve()));
  await database.close();
});

/** An app instance on the shared database with this environment; closing it leaves the database. */
async function startApp(env: Record<string, string>): Promise<TestApp> {
  const handle = await reopenTestDatabase(database);
  const app = await startTestApp(
    { ...LOOPBACK_UPSTREAMS, WEBHOOK_POLL_MS: '20', WEBHOOK_RETRY_BASE_MS: '20', WEBHOOK_MAX_ATTEMPTS: '1', ...env },
    { db: handle.db },
  );
  return {
    ...app,
    async close() {
      await app.close();
      await handle.close();
    },
  };
}

async function withApp<T>(env: Record<string, string>, work: (app: TestApp) => Promise<T>): Promise<T> {
  const app = await startApp(env);
  try {
    return await work(app);
  } finally {
    await app.close();
  }
}

// ---------------------------------------------------------------------------------------------
// An org with an http tool and a webhook, both to the receiver, both with write-only values.

let counter = 0;

interface Configured {
  org: OrgFixture;
  agent: AgentFixture;
  toolId: string;
  webhookId: string;
  toolPath: string;
  hookPath: string;
  toolSecret: string;
  webhookSecret: string;
  headers: Record<string, string>;
}

async function configure(
  app: TestApp,
  webhookSecret = `whsec-${randomBytes(12).toString('hex')}`,
): Promise<Configured> {
  const n = ++counter;
  const org = await signUp(app, 'atrest');
  const agent = await readyAgent(app, org, { tool: false });
  const toolPath = `/tool/${n}`;
  const hookPath = `/hook/${n}`;
  const toolSecret = `tool-secret-${randomBytes(12).toString('hex')}`;
  const headers = {
    Authorization: `Bearer header-token-${randomBytes(8).toString('hex')}`,
    'x-api-key': `header-key-${randomBytes(8).toString('hex')}`,
  };
  const tool = await app.request('POST', `/api/v1/orgs/${org.orgId}/tools`, {
    token: org.adminToken,
    body: {
      action_type: 'billing',
      connector: 'http',
      config: { url: `http://127.0.0.1:${port}${toolPath}`, headers, secret: toolSecret, allow_private_network: true },
    },
  });
  expect(tool.status).toBe(201);
  const webhook = await app.request('POST', `/api/v1/orgs/${org.orgId}/webhooks`, {
    token: org.adminToken,
    body: {
      url: `http://127.0.0.1:${port}${hookPath}`,
      events: ['approval.decided'],
      secret: webhookSecret,
      allow_private_network: true,
    },
  });
  expect(webhook.status).toBe(201);
  return {
    org,
    agent,
    toolId: tool.body.tool_id,
    webhookId: webhook.body.webhook_id,
    toolPath,
    hookPath,
    toolSecret,
    webhookSecret,
    headers,
  };
}

const hmac = (secret: string, hit: Hit, timestampHeader: string) =>
  `sha256=${createHmac('sha256', secret).update(`${hit.headers[timestampHeader]}.${hit.body}`).digest('hex')}`;

/** A gateway call through `app` reaches the tool with its headers, signed with its secret. */
async function expectToolCallWorks(app: TestApp, c: Configured) {
  const before = hitsTo(c.toolPath).length;
  const response = await execute(app, c.agent, {
    svc_id: c.agent.svcId,
    agent_id: c.agent.svcId,
    action: { type: 'billing', tool: 'refund', params: {} },
  });
  expect(response.status).toBe(200);
  expect(response.body.result).toMatchObject({ success: true, data: { ok: true } });
  const received = hitsTo(c.toolPath);
  expect(received).toHaveLength(before + 1);
  const hit = received[before];
  expect(hit.headers.authorization).toBe(c.headers.Authorization);
  expect(hit.headers['x-api-key']).toBe(c.headers['x-api-key']);
  expect(hit.headers['x-signature']).toBe(hmac(c.toolSecret, hit, 'x-timestamp'));
}

/** The delivery of a new event, sent by the dispatcher of `app`, the one running now. */
async function deliverEvent(app: TestApp, c: Configured) {
  await database.db.sql.transaction((tx) =>
    enqueueWebhookEvent(tx, c.org.orgId, 'approval.decided', { approval_id: `apr_${++counter}` }),
  );
  app.app.webhooks.wake();
  const until = Date.now() + 15_000;
  for (;;) {
    const [delivery] = await database.db.sql.query<{ status: string; last_error: string | null }>(
      'SELECT status::text AS status, last_error FROM webhook_deliveries WHERE webhook_id = $1 ORDER BY seq DESC LIMIT 1',
      [c.webhookId],
    );
    if (delivery.status !== 'pending') return delivery;
    if (Date.now() > until) throw new Error('the delivery stayed pending');
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** A webhook delivery reaches the receiver signed with the webhook's secret. */
async function expectDeliveryWorks(app: TestApp, c: Configured) {
  const before = hitsTo(c.hookPath).length;
  expect(await deliverEvent(app, c)).toEqual({ status: 'delivered', last_error: null });
  const received = hitsTo(c.hookPath);
  expect(received).toHaveLength(before + 1);
  expect(received[before].headers['x-webhook-signature']).toBe(
    hmac(c.webhookSecret, received[before], 'x-webhook-timestamp'),
  );
}

interface StoredSecrets {
  tool: { secret: string | null; secret_headers: Record<string, string> | null; config: unknown };
  webhook: { secret: string };
  signingKeys: { private_key: string; encrypted: boolean }[];
}

async function storedSecrets(c: Configured): Promise<StoredSecrets> {
  const [tool] = await database.db.sql.query<StoredSecrets['tool']>(
    'SELECT secret, secret_headers, config FROM tools WHERE id = $1',
    [c.toolId],
  );
  const [webhook] = await database.db.sql.query<StoredSecrets['webhook']>('SELECT secret FROM webhooks WHERE id = $1', [
    c.webhookId,
  ]);
  const signingKeys = await database.db.sql.query<StoredSecrets['signingKeys'][number]>(
    'SELECT private_key, encrypted FROM signing_keys',
  );
  return { tool, webhook, signingKeys };
}

/** Every stored secret of the org's tool and webhook, and every signing key, is sealed with `key`. */
async function expectAllSealedWith(c: Configured, key: Buffer) {
  const stored = await storedSecrets(c);
  const sealed = new RegExp(`^agw:v1:${keyIdOf(key)}:[A-Za-z0-9_-]+$`);
  expect(stored.tool.secret).toMatch(sealed);
  expect(Object.keys(stored.tool.secret_headers!).sort()).toEqual(Object.keys(c.headers).sort());
  for (const value of Object.values(stored.tool.secret_headers!)) expect(value).toMatch(sealed);
  expect(stored.webhook.secret).toMatch(sealed);
  expect(stored.signingKeys.length).toBeGreaterThan(0);
  for (const row of stored.signingKeys)
    expect(row).toEqual({ private_key: expect.stringMatching(sealed), encrypted: true });
  const text = JSON.stringify(stored);
  for (const plain of [c.toolSecret, c.webhookSecret, ...Object.values(c.headers), 'PRIVATE KEY'])
    expect(text).not.toContain(plain);
}

// ---------------------------------------------------------------------------------------------

describe('with KEY_ENCRYPTION_KEY', () => {
  afterEach(() => database.db.sql.query('DELETE FROM signing_keys'));

  test('raw rows hold no plaintext secret or header value, and tools and webhooks still sign and send with them', async () => {
    await withApp({ KEY_ENCRYPTION_KEY: hex(FIRST_KEY) }, async (app) => {
      const c = await configure(app);
      await expectAllSealedWith(c, FIRST_KEY);
      await expectToolCallWorks(app, c);
      await expectDeliveryWorks(app, c);
    });
  });

  test('rows written without a key keep working once it is set; new writes are sealed; reencrypt seals the old ones, once', async () => {
    const c = await withApp({}, async (app) => {
      const configured = await configure(app);
      const stored = await storedSecrets(configured);
      expect(stored.tool.secret).toBe(configured.toolSecret);
      expect(stored.tool.secret_headers).toEqual(configured.headers);
      expect(stored.webhook.secret).toBe(configured.webhookSecret);
      return configured;
    });

    await withApp({ KEY_ENCRYPTION_KEY: hex(FIRST_KEY) }, async (app) => {
      await expectToolCallWorks(app, c);
      await expectDeliveryWorks(app, c);
      // A new webhook secret is sealed, beside the plaintext rows.
      const rotated = `whsec-rotated-${randomBytes(8).toString('hex')}`;
      const patched = await app.request('PATCH', `/api/v1/orgs/${c.org.orgId}/webhooks/${c.webhookId}`, {
        token: c.org.adminToken,
        body: { secret: rotated },
      });
      expect(patched.status).toBe(200);
      c.webhookSecret = rotated;
      expect((await storedSecrets(c)).webhook.secret).toMatch(new RegExp(`^agw:v1:${keyIdOf(FIRST_KEY)}:`));
      expect((await storedSecrets(c)).tool.secret).toBe(c.toolSecret);
      await expectDeliveryWorks(app, c);

      const counts = await reencryptSecrets(database.db.sql, new SecretBox(FIRST_KEY));
      expect(counts).toEqual({
        signingKeys: expect.any(Number),
        tools: expect.any(Number),
        webhooks: expect.any(Number),
        ssoClientSecrets: 0,
        toolConnections: 0,
      });
      expect(counts.signingKeys).toBeGreaterThan(0);
      expect(counts.tools).toBeGreaterThanOrEqual(1);
      await expectAllSealedWith(c, FIRST_KEY);
      expect(await reencryptSecrets(database.db.sql, new SecretBox(FIRST_KEY))).toEqual({
        signingKeys: 0,
        tools: 0,
        webhooks: 0,
        ssoClientSecrets: 0,
        toolConnections: 0,
      });
    });
    // A fresh instance (nothing cached) reads the re-sealed rows.
    await withApp({ KEY_ENCRYPTION_KEY: hex(FIRST_KEY) }, async (app) => {
      await expectToolCallWorks(app, c);
      await expectDeliveryWorks(app, c);
    });
  });

  test('rotation: KEY_ENCRYPTION_KEY_PREVIOUS opens what the old key sealed, reencrypt moves all to the new key, the old key alone no longer opens it', async () => {
    const c = await withApp({ KEY_ENCRYPTION_KEY: hex(FIRST_KEY) }, (app) => configure(app));
    await expectAllSealedWith(c, FIRST_KEY);

    const rotatedEnv = { KEY_ENCRYPTION_KEY: hex(SECOND_KEY), KEY_ENCRYPTION_KEY_PREVIOUS: hex(FIRST_KEY) };
    await withApp(rotatedEnv, async (app) => {
      await expectToolCallWorks(app, c);
      await expectDeliveryWorks(app, c);
    });
    await reencryptSecrets(database.db.sql, new SecretBox(SECOND_KEY, [FIRST_KEY]));
    await expectAllSealedWith(c, SECOND_KEY);

    await withApp({ KEY_ENCRYPTION_KEY: hex(SECOND_KEY) }, async (app) => {
      await expectToolCallWorks(app, c);
      await expectDeliveryWorks(app, c);
    });
    // With only the retired key, the webhook secret no longer opens: a failed attempt that says so,
    // nothing sent. (The signing keys do not open either: such a process cannot serve the gateway.)
    await withApp({ KEY_ENCRYPTION_KEY: hex(FIRST_KEY) }, async (app) => {
      const before = hitsTo(c.hookPath).length;
      const delivery = await deliverEvent(app, c);
      expect(delivery).toEqual({
        status: 'failed',
        last_error: expect.stringMatching(/^SECRET_UNAVAILABLE: .*neither KEY_ENCRYPTION_KEY/),
      });
      expect(hitsTo(c.hookPath)).toHaveLength(before);
    });
  });

  test('a tool whose secrets do not open: its calls fail with TOOL_CONFIG_INVALID and send nothing, GET still works, new values repair it', async () => {
    await withApp({ KEY_ENCRYPTION_KEY: hex(FIRST_KEY) }, async (app) => {
      const c = await configure(app);
      // Sealed with a key this service does not hold (a lost or wrong KEY_ENCRYPTION_KEY).
      const foreign = new SecretBox(randomBytes(32));
      await database.db.sql.query('UPDATE tools SET secret = $2 WHERE id = $1', [c.toolId, foreign.seal(c.toolSecret)]);
      const before = hitsTo(c.toolPath).length;
      const call = await execute(app, c.agent, {
        svc_id: c.agent.svcId,
        agent_id: c.agent.svcId,
        action: { type: 'billing', tool: 'refund', params: {} },
      });
      expect(call.status).toBe(200);
      expect(call.body).toMatchObject({
        decision: 'allow',
        executed: true,
        result: { success: false, error: { code: 'TOOL_CONFIG_INVALID' } },
      });
      expect(hitsTo(c.toolPath)).toHaveLength(before);

      const toolUrl = `/api/v1/orgs/${c.org.orgId}/tools/${c.toolId}`;
      const shown = await app.request('GET', toolUrl, { token: c.org.adminToken });
      expect(shown.status).toBe(200);
      expect(shown.body.config.secret).toBe('[redacted]');
      // Keeping the stored secret needs it opened: 503 saying so; giving it anew works.
      const kept = await app.request('PATCH', toolUrl, {
        token: c.org.adminToken,
        body: { config: { ...shown.body.config, timeout_ms: 2000 } },
      });
      expect(kept.status).toBe(503);
      expect(kept.body.error.message).toMatch(/cannot be decrypted/);
      const repaired = await app.request('PATCH', toolUrl, {
        token: c.org.adminToken,
        body: { config: { ...shown.body.config, headers: c.headers, secret: c.toolSecret } },
      });
      expect(repaired.status).toBe(200);
      await expectToolCallWorks(app, c);
    });
  });
});

describe('the rotation tools', () => {
  afterEach(() => database.db.sql.query('DELETE FROM signing_keys'));

  test('KEY_ENCRYPTION_KEY_PREVIOUS: a comma-separated list of 32-byte keys, only beside KEY_ENCRYPTION_KEY', () => {
    const env = parseEnv({
      KEY_ENCRYPTION_KEY: hex(SECOND_KEY),
      KEY_ENCRYPTION_KEY_PREVIOUS: `${hex(FIRST_KEY)}, ${FIRST_KEY.toString('base64')}`,
    });
    expect(env.keyEncryptionKeyPrevious).toEqual([FIRST_KEY, FIRST_KEY]);
    expect(() => parseEnv({ KEY_ENCRYPTION_KEY_PREVIOUS: hex(FIRST_KEY) })).toThrow(EnvError);
    expect(() => parseEnv({ KEY_ENCRYPTION_KEY: hex(SECOND_KEY), KEY_ENCRYPTION_KEY_PREVIOUS: 'abcd' })).toThrow(
      /KEY_ENCRYPTION_KEY_PREVIOUS must be 32 bytes/,
    );
  });

  // The CLI opens the service's database itself: a PostgreSQL database (an in-memory PGlite is
  // this process's alone).
  (backend === 'postgresql' ? test : test.skip)(
    '`agent-gateway reencrypt` seals what is left in plaintext, and refuses to run without a key',
    async () => {
      const c = await withApp({}, (app) => configure(app));
      const run = (env: Record<string, string>) =>
        spawnSync(process.execPath, [...nodeArguments('cli/agent-gateway'), 'reencrypt'], {
          cwd: fileURLToPath(new URL('..', import.meta.url)),
          env: { PATH: process.env.PATH, DATABASE_URL: database.url, ...env },
          encoding: 'utf8',
        });
      const refused = run({});
      expect(refused.status).toBe(2);
      expect(refused.stderr).toContain('reencrypt needs KEY_ENCRYPTION_KEY');
      // Earlier tests left rows sealed with the first key: the CLI opens them with it as a previous key.
      const sealed = run({ KEY_ENCRYPTION_KEY: hex(SECOND_KEY), KEY_ENCRYPTION_KEY_PREVIOUS: hex(FIRST_KEY) });
      expect(sealed.stderr).toBe('');
      expect(sealed.status).toBe(0);
      expect(sealed.stdout).toMatch(
        new RegExp(
          `^sealed with key ${keyIdOf(SECOND_KEY)}: \\d+ signing keys, \\d+ tools, \\d+ webhooks, \\d+ single sign-on client secrets, \\d+ tool connection rows rewritten\n$`,
        ),
      );
      await expectAllSealedWith(c, SECOND_KEY);
      await withApp({ KEY_ENCRYPTION_KEY: hex(SECOND_KEY) }, async (app) => {
        await expectToolCallWorks(app, c);
        await expectDeliveryWorks(app, c);
      });
    },
  );
});

describe('without KEY_ENCRYPTION_KEY', () => {
  afterEach(() => database.db.sql.query('DELETE FROM signing_keys'));

  test('a plaintext secret that looks sealed is stored escaped and signs as given, with a key set later too', async () => {
    const lookalike = `agw:v1:${keyIdOf(FIRST_KEY)}:not-sealed-at-all`;
    const c = await withApp({}, async (app) => {
      const configured = await configure(app, lookalike);
      expect((await storedSecrets(configured)).webhook.secret).toBe(`agw:plain:${lookalike}`);
      await expectDeliveryWorks(app, configured);
      return configured;
    });
    await withApp({ KEY_ENCRYPTION_KEY: hex(FIRST_KEY) }, (app) => expectDeliveryWorks(app, c));
  });

  test('the service warns once at start, in one line, when KEY_ENCRYPTION_KEY is not set, and not when it is', async () => {
    const linesWith = async (env: Record<string, string>) => {
      const lines: { level: number; msg: string }[] = [];
      const sink = new Writable({
        write(chunk, _encoding, done) {
          for (const line of String(chunk).split('\n').filter(Boolean)) lines.push(JSON.parse(line));
          done();
        },
      });
      const handle = await reopenTestDatabase(database);
      const app = await startTestApp(env, { db: handle.db, logger: pino({ level: 'info' }, sink) });
      // The start-up work that follows (keys, caches, a request) adds no further warning.
      await app.request('GET', '/.well-known/jwks.json');
      await app.close();
      await handle.close();
      return lines.filter((line) => line.msg.includes('KEY_ENCRYPTION_KEY'));
    };
    const warned = await linesWith({});
    expect(warned).toEqual([
      { ...warned[0], level: 40, msg: expect.stringContaining('KEY_ENCRYPTION_KEY is not set') },
    ]);
    expect(warned[0].msg).toMatch(/plaintext/);
    expect(await linesWith({ KEY_ENCRYPTION_KEY: hex(FIRST_KEY) })).toEqual([]);
  });
});

describe('formats from before', () => {
  test('a signing key encrypted the old way (`v1:` base64, no key id) still signs, and reencrypt moves it to the sealed form', async () => {
    const { privateKey, publicKey } = generateKeyPairSync('ed25519');
    const pem = privateKey.export({ format: 'pem', type: 'pkcs8' }).toString();
    // The format src/lib/signing-keys.ts wrote before secret-box.ts: v1: + base64(iv ‖ tag ‖ ciphertext).
    const iv = randomBytes(12);
    const cipher = createCipheriv('aes-256-gcm', FIRST_KEY, iv);
    const body = Buffer.concat([cipher.update(pem, 'utf8'), cipher.final()]);
    const legacy = `v1:${Buffer.concat([iv, cipher.getAuthTag(), body]).toString('base64')}`;
    const kid = `record_legacy${randomBytes(4).toString('hex')}`;
    const publicJwk = { ...publicKey.export({ format: 'jwk' }), kid, alg: 'EdDSA', use: 'sig' };
    await database.db.sql.query(
      "INSERT INTO signing_keys (kid, purpose, algorithm, public_jwk, private_key, encrypted, retired_at) VALUES ($1, 'record', 'EdDSA', $2, $3, true, now())",
      [kid, JSON.stringify(publicJwk), legacy],
    );
    const signsWith = async (secrets: SecretBox) => {
      const key = (await new SigningKeyStore(database.db.sql, secrets).byId(kid))!;
      return verify(null, Buffer.from('record'), publicKey, sign(null, Buffer.from('record'), key.privateKey));
    };
    // The current key and a previous one are both tried.
    expect(await signsWith(new SecretBox(FIRST_KEY))).toBe(true);
    expect(await signsWith(new SecretBox(SECOND_KEY, [FIRST_KEY]))).toBe(true);
    await reencryptSecrets(database.db.sql, new SecretBox(SECOND_KEY, [FIRST_KEY]));
    const [row] = await database.db.sql.query<{ private_key: string }>(
      'SELECT private_key FROM signing_keys WHERE kid = $1',
      [kid],
    );
    expect(row.private_key).toMatch(new RegExp(`^agw:v1:${keyIdOf(SECOND_KEY)}:`));
    expect(await signsWith(new SecretBox(SECOND_KEY))).toBe(true);
    await database.db.sql.query('DELETE FROM signing_keys');
  });

  test('the migration moves header values out of the config, escapes look-alike plaintext and redacts header values in audit entries', async () => {
    const old = await createTestDatabase({ migrate: false });
    const dir = await mkdtemp(path.join(os.tmpdir(), 'agw-migrations-'));
    try {
      await cp(defaultMigrationsDir, dir, { recursive: true });
      await rm(path.join(dir, '20261123010000_secrets_at_rest'), { recursive: true });
      await migrate(old.db.sql, dir);
      const orgId = '6f1c1d7e-0000-4000-8000-000000000001';
      const headers = { Authorization: 'Bearer legacy-header-token', 'x-tenant': 'agw:looks-reserved' };
      const config = { url: 'https://tools.example.com/', timeout_ms: 1000, headers, allow_private_network: false };
      await old.db.sql.exec(
        `INSERT INTO organizations (id, name, slug, updated_at) VALUES ('${orgId}', 'Legacy', 'legacy', now())`,
      );
      await old.db.sql.query(
        "INSERT INTO tools (id, org_id, action_type, connector, config, secret, updated_at) VALUES ('tool_legacy', $1, 'billing', 'http', $2, 'legacy-tool-secret-0123', now())",
        [orgId, JSON.stringify(config)],
      );
      await old.db.sql.query(
        "INSERT INTO tools (id, org_id, action_type, connector, config, updated_at) VALUES ('tool_mock', $1, 'crm', 'mock', '{\"response\": {}}', now())",
        [orgId],
      );
      await old.db.sql.query(
        "INSERT INTO webhooks (id, org_id, url, events, secret, updated_at) VALUES ('whk_legacy', $1, 'https://hooks.example.com/', '{approval.decided}', 'agw:v1:chosen-by-a-receiver', now())",
        [orgId],
      );
      for (const [id, action, column] of [
        ['aud_1', 'tool.created', 'after'],
        ['aud_2', 'tool.deleted', 'before'],
      ]) {
        await old.db.sql.query(
          `INSERT INTO audit_logs (id, org_id, actor_type, action, target_type, target_id, ${column}) VALUES ($1, $2, 'system', $3, 'tool', 'tool_legacy', $4)`,
          [
            id,
            orgId,
            action,
            JSON.stringify({ action_type: 'billing', connector: 'http', config: { ...config, secret: '[redacted]' } }),
          ],
        );
      }

      await migrate(old.db.sql);

      const tools = await old.db.sql.query<{ id: string; config: any; secret: string | null; secret_headers: unknown }>(
        'SELECT id, config, secret, secret_headers FROM tools ORDER BY id',
      );
      expect(tools).toEqual([
        {
          id: 'tool_legacy',
          config: { url: 'https://tools.example.com/', timeout_ms: 1000, allow_private_network: false },
          secret: 'legacy-tool-secret-0123',
          secret_headers: { Authorization: 'Bearer legacy-header-token', 'x-tenant': 'agw:plain:agw:looks-reserved' },
        },
        { id: 'tool_mock', config: { response: {} }, secret: null, secret_headers: null },
      ]);
      const [webhook] = await old.db.sql.query<{ secret: string }>(
        "SELECT secret FROM webhooks WHERE id = 'whk_legacy'",
      );
      expect(webhook.secret).toBe('agw:plain:agw:v1:chosen-by-a-receiver');
      const audits = await old.db.sql.query<{ before: any; after: any }>(
        'SELECT before, after FROM audit_logs ORDER BY id',
      );
      expect(audits.map((a) => (a.after ?? a.before).config.headers)).toEqual([
        { Authorization: '[redacted]', 'x-tenant': '[redacted]' },
        { Authorization: '[redacted]', 'x-tenant': '[redacted]' },
      ]);
      expect(JSON.stringify(audits)).not.toContain('legacy-header-token');

      // The service reads the migrated row as written: the same values to send, the same secret.
      const app = await startTestApp({ ...LOOPBACK_UPSTREAMS, KEY_ENCRYPTION_KEY: hex(FIRST_KEY) }, { db: old.db });
      try {
        const tool = await app.app.services.tools.forAction(orgId, 'billing');
        expect(tool?.credentials).toEqual({ secret: 'legacy-tool-secret-0123', headers, clientSecret: null });
      } finally {
        await app.close();
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
      await old.close();
    }
  });
});
