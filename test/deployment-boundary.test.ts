/**
 * The deployment boundary (docs/decisions/0062-the-deployment-boundary.md): a tenant's configuration
 * reaches a private address only when it sets `allow_private_network` and the deployment lists the
 * address in OUTBOUND_PRIVATE_NETWORKS; link-local never. A canary server on 127.0.0.1 plays the
 * deployment's internal service (a metadata endpoint with credentials in its answer): on a default
 * deployment it must see nothing of what a stranger who signed up configures (http and mcp tools,
 * the mcp tools' definition reads, webhooks, single sign-on), whether the URL is refused when saved
 * or, saved while the deployment opened loopback, refused when connecting after it closed it.
 */
import { parseEnv } from '../src/env.js';
import { LOOPBACK_UPSTREAMS, startTestApp, type TestApp } from './support/app.js';
import { signUp, type OrgFixture } from './support/fixtures.js';
import { actionBody, execute, readyAgent } from './support/gateway.js';
import { startIdentityProvider, type TestIdentityProvider } from './support/oidc-provider.js';
import { allRecords } from './support/records.js';
import { startRecordingServer, type Hit, type RecordingServer } from './support/recording-server.js';

/** What the canary answers: what a tenant must never read through the gateway. */
const INTERNAL_SECRET = 'AKIA-internal-canary-credential';

const hits: Hit[] = [];
let canary: RecordingServer;
/** A deployment as shipped: OUTBOUND_PRIVATE_NETWORKS unset. */
let closed: TestApp;
/** The same database behind a deployment that opened loopback to tenants. */
let opened: TestApp;

beforeAll(async () => {
  canary = await startRecordingServer(hits, (_hit, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ AccessKeyId: INTERNAL_SECRET, issuer: INTERNAL_SECRET }));
  });
  closed = await startTestApp({ WEBHOOK_POLL_MS: '20', WEBHOOK_RETRY_BASE_MS: '20', WEBHOOK_MAX_ATTEMPTS: '1' });
  // Its dispatcher polls once an hour, so the deliveries due are the closed deployment's to send.
  opened = await startTestApp({ ...LOOPBACK_UPSTREAMS, WEBHOOK_POLL_MS: '3600000' }, { db: closed.database.db });
});

afterAll(async () => {
  await opened?.close();
  await closed?.close();
  await canary?.close();
});

const canaryUrl = (path: string) => `${canary.base}${path}`;
const hitsOn = (prefix: string) => hits.filter((hit) => hit.path.startsWith(prefix));
let counter = 0;
/** A canary path of the test's own, so that each test counts only its hits. */
const pathOf = (label: string) => `/${label}-${++counter}/latest/meta-data/iam`;

const OUTSIDE_THE_LIST =
  'the URL points to a loopback, private or reserved address outside the networks this deployment opens to tenants (OUTBOUND_PRIVATE_NETWORKS, which also needs allow_private_network: true; OUTBOUND_PRIVATE_NETWORKS=127.0.0.0/8 opens loopback for local tools)';

const toolBody = (connector: 'http' | 'mcp', url: string) => ({
  action_type: 'billing',
  connector,
  config: { url, timeout_ms: 2000, allow_private_network: true },
});

async function saveTool(app: TestApp, org: OrgFixture, connector: 'http' | 'mcp', url: string) {
  return app.request('POST', `/api/v1/orgs/${org.orgId}/tools`, {
    token: org.adminToken,
    body: toolBody(connector, url),
  });
}

/** The org's single sign-on at `provider`, asking for private networks as a tenant may. */
const configureSso = (
  app: TestApp,
  org: OrgFixture,
  provider: { issuer: string; client_id: string; client_secret: string },
) =>
  app.request('PUT', `/api/v1/orgs/${org.orgId}/sso`, {
    token: org.adminToken,
    body: { ...provider, allowed_domains: [`${org.slug}.example`], allow_private_network: true },
  });

/** A stranger's org: signed up, its own manifest approved, an execute key; the tool is the test's. */
async function strangerWithAgent(app: TestApp, label: string) {
  const org = await signUp(app, label);
  const agent = await readyAgent(app, org, { tool: false });
  return { org, agent };
}

async function eventually<T>(read: () => Promise<T>, done: (value: T) => boolean, what: string): Promise<T> {
  const until = Date.now() + 20_000;
  for (;;) {
    const value = await read();
    if (done(value)) return value;
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}: ${JSON.stringify(value)}`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

describe('a default deployment (OUTBOUND_PRIVATE_NETWORKS unset): nothing a tenant saves reaches loopback', () => {
  test.each(['http', 'mcp'] as const)(
    'an %s tool at a loopback URL with allow_private_network is 422 naming OUTBOUND_PRIVATE_NETWORKS; nothing is sent',
    async (connector) => {
      const org = await signUp(closed, `b-${connector}`);
      const path = pathOf(connector);
      const saved = await saveTool(closed, org, connector, canaryUrl(path));
      expect(saved.status).toBe(422);
      expect(saved.body.error.details.errors).toEqual([{ field: 'config.url', message: OUTSIDE_THE_LIST }]);
      expect(hitsOn(path)).toEqual([]);
    },
  );

  test('a webhook at a loopback URL with allow_private_network is 422 naming OUTBOUND_PRIVATE_NETWORKS', async () => {
    const org = await signUp(closed, 'b-webhook');
    const saved = await closed.request('POST', `/api/v1/orgs/${org.orgId}/webhooks`, {
      token: org.adminToken,
      body: { url: canaryUrl(pathOf('webhook')), events: ['approval.requested'], allow_private_network: true },
    });
    expect(saved.status).toBe(422);
    expect(saved.body.error.details.errors).toEqual([{ field: 'url', message: OUTSIDE_THE_LIST }]);
  });

  test('single sign-on with a loopback issuer is 422 naming OUTBOUND_PRIVATE_NETWORKS, and its discovery is never fetched', async () => {
    const org = await signUp(closed, 'b-sso');
    const before = hits.length;
    const saved = await configureSso(closed, org, {
      issuer: canary.base,
      client_id: 'client',
      client_secret: 'client-secret-value',
    });
    expect(saved.status).toBe(422);
    expect(saved.body.error.details.errors).toEqual([{ field: 'issuer', message: OUTSIDE_THE_LIST }]);
    expect(hits.length).toBe(before);
  });
});

describe('saved while the deployment opened loopback, refused on connecting once it closed it', () => {
  test('an http tool: the call is a failed execution with its record; the canary sees nothing, the agent reads nothing of it', async () => {
    const { org, agent } = await strangerWithAgent(opened, 'c-http');
    const path = pathOf('http');
    expect((await saveTool(opened, org, 'http', canaryUrl(path))).status).toBe(201);

    const refused = await execute(closed, agent, actionBody(agent));
    expect(refused.status).toBe(200);
    expect(refused.body.result).toMatchObject({
      success: false,
      error: {
        code: 'TOOL_ADDRESS_REFUSED',
        message: expect.stringContaining('outside the networks this deployment opens to tenants'),
      },
    });
    expect(refused.text).not.toContain(INTERNAL_SECRET);
    expect(hitsOn(path)).toEqual([]);
    const records = await allRecords(closed, org);
    expect(records.map((r) => [r.record_id, r.executed])).toEqual([[refused.body.interaction_id, true]]);

    // The deployment that opened loopback does reach it: the list is what stands between.
    const reached = await execute(opened, agent, actionBody(agent));
    expect(reached.body.result).toMatchObject({ success: true, data: { AccessKeyId: INTERNAL_SECRET } });
    expect(hitsOn(path)).toHaveLength(1);
  });

  test('an mcp tool: the call and the definition read are refused before any byte is sent', async () => {
    const { org, agent } = await strangerWithAgent(opened, 'c-mcp');
    const path = pathOf('mcp');
    const saved = await saveTool(opened, org, 'mcp', canaryUrl(path));
    expect(saved.status).toBe(201);
    // Saving read the definitions through the deployment that opened loopback.
    await eventually(
      async () => hitsOn(path).length,
      (n) => n > 0,
      'the definition read on the opened deployment',
    );
    const seen = hitsOn(path).length;

    const refused = await execute(closed, agent, actionBody(agent));
    expect(refused.body.result).toMatchObject({ success: false, error: { code: 'TOOL_ADDRESS_REFUSED' } });
    const reread = await closed.request('POST', `/api/v1/orgs/${org.orgId}/tools/${saved.body.tool_id}/refresh`, {
      token: org.adminToken,
    });
    expect(reread.text).not.toContain(INTERNAL_SECRET);
    expect(reread.body.definitions_error).toMatch(/^TOOL_ADDRESS_REFUSED: .*OUTBOUND_PRIVATE_NETWORKS/);
    expect(hitsOn(path)).toHaveLength(seen);
    expect((await allRecords(closed, org)).map((r) => r.record_id)).toContain(refused.body.interaction_id);
  });

  test('a webhook: its delivery fails as ADDRESS_REFUSED and never reaches the canary', async () => {
    const org = await signUp(opened, 'c-webhook');
    const agent = await readyAgent(opened, org, {
      constraints: { max_actions_per_hour: 10, max_actions_per_day: 10, require_human_approval: ['billing:read'] },
    });
    const path = pathOf('webhook');
    const created = await opened.request('POST', `/api/v1/orgs/${org.orgId}/webhooks`, {
      token: org.adminToken,
      body: { url: canaryUrl(path), events: ['approval.requested'], allow_private_network: true },
    });
    expect(created.status).toBe(201);
    const asked = await execute(closed, agent, actionBody(agent));
    expect(asked.body.reasons.map((r: { code: string }) => r.code)).toEqual(['APPROVAL_REQUIRED']);
    const deliveries = await eventually(
      async () =>
        (
          await closed.request('GET', `/api/v1/orgs/${org.orgId}/webhooks/${created.body.webhook_id}/deliveries`, {
            token: org.adminToken,
          })
        ).body,
      (page) => page.items?.length === 1 && page.items[0].status === 'failed',
      'the refused delivery',
    );
    expect(deliveries.items[0].last_error).toMatch(
      /^ADDRESS_REFUSED: 127\.0\.0\.1 is a loopback, private or reserved address outside/,
    );
    expect(hitsOn(path)).toEqual([]);
  });

  test('single sign-on: a provider saved on loopback is not asked anything once the deployment closed it', async () => {
    const provider: TestIdentityProvider = await startIdentityProvider({
      redirectUri: 'http://localhost/auth/sso/callback',
    });
    try {
      const org = await signUp(opened, 'c-sso');
      const saved = await configureSso(opened, org, {
        issuer: provider.issuer,
        client_id: provider.clientId,
        client_secret: provider.clientSecret,
      });
      expect(saved.status).toBe(200);
      const asked = new Map(provider.hits);

      const start = await closed.request('GET', `/auth/sso/${org.slug}`, { headers: { accept: 'application/json' } });
      expect(start.status).toBe(503);
      expect(start.text).toContain('OUTBOUND_PRIVATE_NETWORKS');
      expect(provider.hits).toEqual(asked);
    } finally {
      await provider.close();
    }
  });

  test('single sign-on: a discovery read that reaches an internal service quotes nothing of its answer', async () => {
    const org = await signUp(opened, 'c-sso-quote');
    const before = hits.length;
    const saved = await configureSso(opened, org, {
      issuer: canary.base,
      client_id: 'client',
      client_secret: 'client-secret-value',
    });
    expect(saved.status).toBe(422);
    expect(saved.text).not.toContain(INTERNAL_SECRET);
    expect(saved.body.error.details.errors).toEqual([
      {
        field: 'issuer',
        message: `the provider's discovery document could not be used: The provider is unusable: its discovery document names no issuer URL (${JSON.stringify(canary.base)} expected)`,
      },
    ]);
    expect(hits.slice(before).map((hit) => hit.path)).toEqual(['/.well-known/openid-configuration']);
  });
});

describe('link-local is never reachable', () => {
  /** A deployment that lists every range, on a database of its own (its background work stays its own). */
  let everything: TestApp;
  beforeAll(async () => {
    everything = await startTestApp({ OUTBOUND_PRIVATE_NETWORKS: '0.0.0.0/0,::/0' });
  });
  afterAll(() => everything.close());

  test.each([
    ['http://169.254.169.254/latest/meta-data/iam', 'config.url'],
    ['http://169.254.170.2/v2/credentials', 'config.url'],
    ['http://[fd00:ec2::254]/latest/meta-data/', 'config.url'],
    ['http://[::ffff:169.254.169.254]/latest/meta-data/', 'config.url'],
  ])('%s: a tool is 422 even on a deployment listing 0.0.0.0/0 and ::/0', async (url, field) => {
    const org = await signUp(everything, 'linklocal');
    const saved = await saveTool(everything, org, 'http', url);
    expect(saved.status).toBe(422);
    expect(saved.body.error.details.errors).toEqual([
      {
        field,
        message:
          'the URL points to a link-local address (where cloud metadata services answer), which is never reachable',
      },
    ]);
    // The same deployment reaches loopback: the list works, link-local stays shut.
    expect((await saveTool(everything, org, 'http', canaryUrl('/listed'))).status).toBe(201);
  });
});

test('the service refuses to start on an OUTBOUND_PRIVATE_NETWORKS it cannot read, naming the entry', () => {
  expect(() => parseEnv({ OUTBOUND_PRIVATE_NETWORKS: '127.0.0.0/8,10.0.0.0/40' })).toThrow(
    'OUTBOUND_PRIVATE_NETWORKS: "10.0.0.0/40" is not a network: write it as a CIDR (10.0.0.0/8, 127.0.0.0/8, fd00::/8) or an address',
  );
  expect(parseEnv({ OUTBOUND_PRIVATE_NETWORKS: ' 10.0.0.0/8 , ::1 ' }).outboundPrivateNetworks.ranges).toEqual([
    '10.0.0.0/8',
    '::1/128',
  ]);
});
