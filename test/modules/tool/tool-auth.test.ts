import { randomBytes } from 'node:crypto';
import { reencryptSecrets } from '../../../src/cli/reencrypt.js';
import { SecretBox } from '../../../src/lib/secret-box.js';
import { LOOPBACK_UPSTREAMS, startTestApp, type TestApp } from '../../support/app.js';
import { addUser, signUp, type OrgFixture } from '../../support/fixtures.js';

/**
 * A tool's `config.auth` (docs/decisions/0068-upstream-connections.md): the static headers by
 * default, an OAuth connection per org or per user, or a client-credentials grant. Saved with
 * clear 422s; the client secret is write-only, sealed with KEY_ENCRYPTION_KEY, kept by
 * "[redacted]", re-sealed by `reencrypt`, and appears in no answer, listing or audit entry.
 */

const KEY = randomBytes(32);
const NEXT_KEY = randomBytes(32);
const CLIENT_SECRET = `cs-${randomBytes(12).toString('hex')}`;
let t: TestApp;
let org: OrgFixture;

beforeAll(async () => {
  t = await startTestApp({ ...LOOPBACK_UPSTREAMS, KEY_ENCRYPTION_KEY: KEY.toString('hex') });
  org = await signUp(t);
});
afterAll(() => t.close());

const toolsPath = () => `/api/v1/orgs/${org.orgId}/tools`;
const save = (actionType: string, connector: string, config: Record<string, unknown>) =>
  t.request('POST', toolsPath(), { token: org.adminToken, body: { action_type: actionType, connector, config } });
const storedSecret = async (toolId: string) =>
  (
    await t.database.db.sql.query<{ auth_client_secret: string | null }>(
      'SELECT auth_client_secret FROM tools WHERE id = $1',
      [toolId],
    )
  )[0].auth_client_secret;

describe('config.auth, as saved and shown', () => {
  test('without auth, and with {"type": "headers"}, a tool sends its static headers: shown as such, nothing stored for it', async () => {
    const plain = await save('plain', 'mcp', { url: 'https://mcp.example.com/mcp' });
    const explicit = await save('explicit', 'http', { url: 'https://api.example.com/', auth: { type: 'headers' } });
    for (const created of [plain, explicit]) {
      expect(created.status).toBe(201);
      expect(created.body.config.auth).toEqual({ type: 'headers' });
      expect(await storedSecret(created.body.tool_id)).toBeNull();
    }
    const [row] = await t.database.db.sql.query<{ config: Record<string, unknown> }>(
      'SELECT config FROM tools WHERE id = $1',
      [explicit.body.tool_id],
    );
    expect(row.config).not.toHaveProperty('auth');
  });

  test('an OAuth connection per user, with scopes and a registered client: the secret is sealed, shown "[redacted]", kept by "[redacted]"', async () => {
    const auth = {
      type: 'oauth',
      connection: 'user',
      scopes: ['repo', 'read:org', 'repo'],
      client_id: 'gateway-client',
      client_secret: CLIENT_SECRET,
    };
    const created = await save('code', 'mcp', { url: 'https://mcp.example.com/mcp', auth });
    expect(created.status).toBe(201);
    expect(created.body.config.auth).toEqual({
      type: 'oauth',
      connection: 'user',
      scopes: ['repo', 'read:org'],
      client_id: 'gateway-client',
      client_secret: '[redacted]',
    });
    const sealed = await storedSecret(created.body.tool_id);
    expect(sealed).toMatch(/^agw:v1:/);
    expect(new SecretBox(KEY).open(sealed!)).toBe(CLIENT_SECRET);

    const path = `${toolsPath()}/${created.body.tool_id}`;
    const kept = await t.request('PATCH', path, {
      token: org.adminToken,
      body: { config: { ...created.body.config, timeout_ms: 3000 } },
    });
    expect(kept.status).toBe(200);
    expect(kept.body.config.auth.client_secret).toBe('[redacted]');
    expect(new SecretBox(KEY).open((await storedSecret(created.body.tool_id))!)).toBe(CLIENT_SECRET);

    // Without a client the gateway registers itself: no secret to keep.
    const registered = await t.request('PATCH', path, {
      token: org.adminToken,
      body: { config: { url: 'https://mcp.example.com/mcp', auth: { type: 'oauth', connection: 'org' } } },
    });
    expect(registered.status).toBe(200);
    expect(registered.body.config.auth).toEqual({
      type: 'oauth',
      connection: 'org',
      scopes: null,
      client_id: null,
      client_secret: null,
    });
    expect(await storedSecret(created.body.tool_id)).toBeNull();
  });

  test('client credentials for an http tool: token URL, client and secret required; the secret never shown, listed, audited or sent back over GraphQL', async () => {
    const created = await save('billing', 'http', {
      url: 'https://api.example.com/billing',
      auth: {
        type: 'client_credentials',
        token_url: 'https://auth.example.com/oauth/token',
        client_id: 'billing-bot',
        client_secret: CLIENT_SECRET,
        scopes: ['billing.write'],
        audience: 'https://api.example.com',
      },
    });
    expect(created.status).toBe(201);
    expect(created.body.config.auth).toEqual({
      type: 'client_credentials',
      token_url: 'https://auth.example.com/oauth/token',
      client_id: 'billing-bot',
      client_secret: '[redacted]',
      scopes: ['billing.write'],
      audience: 'https://api.example.com',
    });
    const answers = [
      created,
      await t.request('GET', `${toolsPath()}/${created.body.tool_id}`, { token: org.adminToken }),
      await t.request('GET', toolsPath(), { token: org.adminToken }),
      await t.request('GET', `/api/v1/orgs/${org.orgId}/audit-logs?action=tool`, { token: org.adminToken }),
      await t.graphql(
        'query($org: ID!) { tools(org_id: $org) { items { config } } }',
        { org: org.orgId },
        {
          token: org.adminToken,
        },
      ),
    ];
    for (const answer of answers) {
      expect(answer.status).toBe(200 + (answer === created ? 1 : 0));
      expect(answer.text).not.toContain(CLIENT_SECRET);
    }
    expect(answers[3].text).toContain('client_credentials');
    const audited = await t.database.db.sql.query<{ entry: string }>(
      'SELECT row_to_json(a)::text AS entry FROM audit_logs a WHERE target_id = $1',
      [created.body.tool_id],
    );
    expect(audited.length).toBeGreaterThan(0);
    for (const { entry } of audited) expect(entry).not.toContain(CLIENT_SECRET);
  });

  test('reencrypt re-seals client secrets with the new key', async () => {
    const created = await save('rotated', 'mcp', {
      url: 'https://mcp.example.com/rotated',
      auth: { type: 'oauth', connection: 'org', client_id: 'rotated-client', client_secret: CLIENT_SECRET },
    });
    expect(created.status).toBe(201);
    const counts = await reencryptSecrets(t.database.db.sql, new SecretBox(NEXT_KEY, [KEY]));
    expect(counts.tools).toBeGreaterThanOrEqual(1);
    const resealed = (await storedSecret(created.body.tool_id))!;
    expect(new SecretBox(NEXT_KEY).open(resealed)).toBe(CLIENT_SECRET);
    expect(() => new SecretBox(KEY).open(resealed)).toThrow();
    // Back to the app's key, for the tests that follow.
    await reencryptSecrets(t.database.db.sql, new SecretBox(KEY, [NEXT_KEY]));
  });
});

describe('config.auth, refused with a 422 naming the field', () => {
  const refusals: Array<[string, string, Record<string, unknown>, string, RegExp]> = [
    ['an unknown type', 'mcp', { type: 'basic' }, 'config.auth', /one of headers, oauth, client_credentials/],
    ['auth that is not an object', 'http', 'oauth' as never, 'config.auth', /must be an object/],
    ['oauth without a connection', 'mcp', { type: 'oauth' }, 'config.auth.connection', /"org".*"user"/],
    [
      'a scope with a space',
      'mcp',
      { type: 'oauth', connection: 'org', scopes: ['a b'] },
      'config.auth.scopes',
      /OAuth scopes/,
    ],
    [
      'a secret without a client',
      'mcp',
      { type: 'oauth', connection: 'org', client_secret: 'x' },
      'config.auth.client_secret',
      /needs a client_id/,
    ],
    [
      '"[redacted]" with nothing stored',
      'mcp',
      { type: 'oauth', connection: 'org', client_id: 'c', client_secret: '[redacted]' },
      'config.auth.client_secret',
      /the tool has none/,
    ],
    [
      'an unknown field',
      'mcp',
      { type: 'oauth', connection: 'org', token_url: 'https://a.example/t' },
      'config.auth.token_url',
      /unknown field for auth of type "oauth"/,
    ],
    [
      'client credentials without a token URL',
      'http',
      { type: 'client_credentials', client_id: 'c', client_secret: 's' },
      'config.auth.token_url',
      /is required/,
    ],
    [
      'client credentials without a client',
      'http',
      { type: 'client_credentials', token_url: 'https://a.example/t', client_secret: 's' },
      'config.auth.client_id',
      /is required/,
    ],
    [
      'client credentials without a secret',
      'http',
      { type: 'client_credentials', token_url: 'https://a.example/t', client_id: 'c' },
      'config.auth.client_secret',
      /is required/,
    ],
    [
      'a token URL on a private address the deployment did not open',
      'http',
      { type: 'client_credentials', token_url: 'http://10.1.2.3/token', client_id: 'c', client_secret: 's' },
      'config.auth.token_url',
      /OUTBOUND_PRIVATE_NETWORKS/,
    ],
  ];
  test.each(refusals)('%s', async (_, connector, auth, field, message) => {
    const refused = await save(`refused-${randomBytes(3).toString('hex')}`, connector, {
      url: 'https://upstream.example.com/',
      auth,
    });
    expect(refused.status).toBe(422);
    expect(refused.body.error.code).toBe('VALIDATION_ERROR');
    const problem = refused.body.error.details.errors.find((e: { field: string }) => e.field === field);
    expect(problem?.message).toMatch(message);
    expect(refused.text).not.toContain('"s"');
  });

  test('an Authorization header beside a grant: the gateway sends that header from the grant', async () => {
    const refused = await save('both', 'mcp', {
      url: 'https://mcp.example.com/',
      headers: { Authorization: 'Bearer static' },
      auth: { type: 'oauth', connection: 'org' },
    });
    expect(refused.status).toBe(422);
    expect(refused.text).toContain('config.headers.Authorization');
    expect(refused.text).toContain('the gateway sends the Authorization header from the grant');
    expect(refused.text).not.toContain('Bearer static');
  });

  test('a mock tool has no upstream to authenticate to', async () => {
    const refused = await save('mocked', 'mock', { auth: { type: 'headers' } });
    expect(refused.status).toBe(422);
    expect(refused.text).toContain('unknown field for a mock tool');
  });

  test('a viewer cannot configure it: 403, and nothing is saved', async () => {
    const viewer = await addUser(t, org, 'viewer');
    const refused = await t.request('POST', toolsPath(), {
      token: viewer.token,
      body: {
        action_type: 'sneaky',
        connector: 'mcp',
        config: { url: 'https://a.example/', auth: { type: 'oauth', connection: 'org' } },
      },
    });
    expect(refused.status).toBe(403);
    const listed = await t.request('GET', toolsPath(), { token: org.adminToken });
    expect(listed.body.items.map((tool: { action_type: string }) => tool.action_type)).not.toContain('sneaky');
  });
});
