import { AgentDetailDocument, AgentIdsDocument } from '../../generated/graphql.js';
import { startTestApp, type RequestOptions, type TestApp, type TestResponse } from '../../support/app.js';
import {
  addUser,
  createKey,
  createManifest,
  manifestPayload,
  signUp,
  type OrgFixture,
} from '../../support/fixtures.js';
import { actionBody, execute, readyAgent } from '../../support/gateway.js';
import { runOperation } from '../../support/statements.js';

/**
 * Agents (docs/decisions/0020-agents.md) over HTTP: register, list with its filters, read, deactivate and
 * reactivate, each with its status, envelope and audit entry; the agent a manifest registration
 * creates, its current manifest and budget usage; roles and API key scopes (a key limited to
 * svc_ids sees and registers only those); and GraphQL answering what REST does.
 */

let t: TestApp;
let org: OrgFixture;
let operator: { email: string; token: string };
let viewer: { email: string; token: string };

beforeAll(async () => {
  t = await startTestApp();
  org = await signUp(t, 'agents');
  operator = await addUser(t, org, 'operator');
  viewer = await addUser(t, org, 'viewer');
});
afterAll(() => t.close());

const iso = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;
let counter = 0;
const uniqueId = (prefix = 'agent') => `${prefix}-${Date.now().toString(36)}-${++counter}`;
const asAdmin = (): RequestOptions => ({ token: org.adminToken });

const register = (body: Record<string, unknown>, as: RequestOptions = asAdmin()) =>
  t.request('POST', '/api/v1/agents', { ...as, body });
const read = (id: string, as: RequestOptions = asAdmin()) => t.request('GET', `/api/v1/agents/${id}`, as);
const list = (query = '', as: RequestOptions = asAdmin()) => t.request('GET', `/api/v1/agents${query}`, as);
const deactivate = (id: string, reason?: string, as: RequestOptions = asAdmin()) =>
  t.request('DELETE', `/api/v1/agents/${id}${reason === undefined ? '' : `?reason=${encodeURIComponent(reason)}`}`, as);
const reactivate = (id: string, as: RequestOptions = asAdmin()) =>
  t.request('POST', `/api/v1/agents/${id}/reactivate`, as);

/** A registered agent's body; fails the test when the register does not answer 201. */
async function registered(body: Record<string, unknown>, as?: RequestOptions) {
  const response = await register(body, as);
  expect({ status: response.status, body: response.body }).toEqual({
    status: 201,
    body: expect.objectContaining({ agent_id: body.agent_id }),
  });
  return response.body;
}

/** The org's audit entries about one agent, newest first. */
async function auditsOf(agentId: string, action: string, within: OrgFixture = org) {
  const response = await t.request(
    'GET',
    `/api/v1/orgs/${within.orgId}/audit-logs?target_type=agent&target_id=${agentId}&action=${action}`,
    {
      token: within.adminToken,
    },
  );
  expect(response.status).toBe(200);
  return response.body.items as {
    action: string;
    actor: { type: string; label: string };
    before: any;
    after: any;
    reason: string | null;
  }[];
}

function expectValidationError(response: TestResponse, fields: string[]) {
  expect({ status: response.status, code: response.body?.error?.code }).toEqual({
    status: 422,
    code: 'VALIDATION_ERROR',
  });
  expect(response.body.error.details.errors.map((e: { field: string }) => e.field).sort()).toEqual([...fields].sort());
}

function expectForbidden(response: TestResponse) {
  expect({ status: response.status, body: response.body }).toEqual({
    status: 403,
    body: { detail: { code: 'FORBIDDEN', message: expect.any(String) } },
  });
}

function expectNotFound(response: TestResponse) {
  expect({ status: response.status, body: response.body }).toEqual({
    status: 404,
    body: { error: { code: 'NOT_FOUND', message: 'Agent not found', details: {} } },
  });
}

/** The end of the fixed UTC window of `seconds` containing `at` (usage.*.resets_at). */
const windowEnd = (at: number, seconds: number) =>
  new Date((Math.floor(at / 1000 / seconds) + 1) * seconds * 1000).toISOString();

/** resets_at of both windows, allowing for a window boundary passed while the request ran. */
function expectResetsAt(
  usage: { hour: { resets_at: string }; day: { resets_at: string } },
  before: number,
  after: number,
) {
  expect([windowEnd(before, 3600), windowEnd(after, 3600)]).toContain(usage.hour.resets_at);
  expect([windowEnd(before, 86400), windowEnd(after, 86400)]).toContain(usage.day.resets_at);
}

const agentFields = [
  'agent_id',
  'name',
  'description',
  'team',
  'owner_email',
  'labels',
  'status',
  'current_manifest',
  'usage',
  'last_seen_at',
  'created_at',
  'created_by',
  'deactivated_at',
  'deactivated_by',
  'deactivation_reason',
];

describe('POST /agents', () => {
  test('201 with the whole agent: no manifest yet, zero usage without limits, owned by the registering user', async () => {
    const agentId = uniqueId('full');
    const before = Date.now();
    const response = await register({
      agent_id: agentId,
      name: '  Billing assistant  ',
      description: 'Answers billing questions',
      team: 'finance',
      labels: { env: 'prod', 'cost-center': '42' },
    });
    const after = Date.now();
    expect(response.status).toBe(201);
    expect(Object.keys(response.body).sort()).toEqual([...agentFields].sort());
    expect(response.body).toEqual({
      agent_id: agentId,
      name: 'Billing assistant',
      description: 'Answers billing questions',
      team: 'finance',
      owner_email: org.adminEmail,
      labels: { env: 'prod', 'cost-center': '42' },
      status: 'active',
      current_manifest: null,
      usage: {
        hour: { count: 0, limit: null, resets_at: expect.stringMatching(iso) },
        day: { count: 0, limit: null, resets_at: expect.stringMatching(iso) },
      },
      last_seen_at: null,
      created_at: expect.stringMatching(iso),
      created_by: org.adminEmail,
      deactivated_at: null,
      deactivated_by: null,
      deactivation_reason: null,
    });
    expectResetsAt(response.body.usage, before, after);
    expect(Date.parse(response.body.created_at)).toBeGreaterThanOrEqual(before - 1000);
    expect((await read(agentId)).body).toEqual(response.body);
  });

  test('only agent_id and name: empty description, no team, no labels', async () => {
    const body = await registered({ agent_id: uniqueId('min'), name: 'Minimal' }, { token: operator.token });
    expect(body).toMatchObject({
      description: '',
      team: null,
      labels: {},
      owner_email: operator.email,
      created_by: operator.email,
    });
  });

  test('a given owner_email is trimmed and lower-cased', async () => {
    const body = await registered({
      agent_id: uniqueId('owner'),
      name: 'Owned',
      owner_email: ' Jane.Doe@Example.COM ',
    });
    expect(body.owner_email).toBe('jane.doe@example.com');
  });

  test('the audit entry agent.created carries the new agent and no manifest', async () => {
    const agentId = uniqueId('audited');
    await registered({ agent_id: agentId, name: 'Audited', team: 'ops', labels: { tier: 'gold' } });
    expect(await auditsOf(agentId, 'agent.created')).toEqual([
      expect.objectContaining({
        action: 'agent.created',
        actor: expect.objectContaining({ type: 'user', label: org.adminEmail }),
        after: {
          name: 'Audited',
          team: 'ops',
          owner_email: org.adminEmail,
          labels: { tier: 'gold' },
          status: 'active',
          from_manifest: null,
        },
      }),
    ]);
  });

  test('an existing agent id is 409 CONFLICT, whether registered here or created by a manifest', async () => {
    const agentId = uniqueId('twice');
    await registered({ agent_id: agentId, name: 'First' });
    const { svcId } = await createManifest(t, org, 'pending');
    for (const id of [agentId, svcId]) {
      const response = await register({ agent_id: id, name: 'Second' });
      expect({
        status: response.status,
        code: response.body.error?.code,
        details: response.body.error?.details,
      }).toEqual({
        status: 409,
        code: 'CONFLICT',
        details: { field: 'agent_id' },
      });
    }
    // The first registration stands.
    expect((await read(agentId)).body.name).toBe('First');
    expect(await auditsOf(agentId, 'agent.created')).toHaveLength(1);
  });

  test('another org may use the same agent id: ids are per org', async () => {
    const agentId = uniqueId('per-org');
    const other = await signUp(t, 'agents-same-id');
    await registered({ agent_id: agentId, name: 'Ours' });
    await registered({ agent_id: agentId, name: 'Theirs' }, { token: other.adminToken });
    expect((await read(agentId)).body.name).toBe('Ours');
    expect((await read(agentId, { token: other.adminToken })).body.name).toBe('Theirs');
  });

  describe('422 VALIDATION_ERROR naming each field', () => {
    const manyLabels = Object.fromEntries(Array.from({ length: 21 }, (_, i) => [`k${i}`, 'v']));
    const cases: [string, Record<string, unknown>, string[]][] = [
      ['an agent_id with capitals and underscores', { agent_id: 'Billing_Agent', name: 'x' }, ['agent_id']],
      ['an agent_id ending with a hyphen', { agent_id: 'billing-', name: 'x' }, ['agent_id']],
      ['an agent_id with a dot', { agent_id: 'billing.agent', name: 'x' }, ['agent_id']],
      ['an agent_id of 65 characters', { agent_id: 'a'.repeat(65), name: 'x' }, ['agent_id']],
      ['an empty name', { agent_id: 'valid-id', name: '' }, ['name']],
      ['a name of spaces', { agent_id: 'valid-id', name: '   ' }, ['name']],
      ['a name over 200 characters', { agent_id: 'valid-id', name: 'n'.repeat(201) }, ['name']],
      [
        'an owner_email that is not an address',
        { agent_id: 'valid-id', name: 'x', owner_email: 'not-an-email' },
        ['owner_email'],
      ],
      ['21 labels', { agent_id: 'valid-id', name: 'x', labels: manyLabels }, ['labels']],
      ['labels as an array', { agent_id: 'valid-id', name: 'x', labels: ['env:prod'] }, ['labels']],
      [
        'a label with a number value',
        { agent_id: 'valid-id', name: 'x', labels: { env: 'prod', tier: 1 } },
        ['labels.tier'],
      ],
      ['a label with a null value', { agent_id: 'valid-id', name: 'x', labels: { owner: null } }, ['labels.owner']],
      [
        'a label value over 256 characters',
        { agent_id: 'valid-id', name: 'x', labels: { note: 'v'.repeat(257) } },
        ['labels.note'],
      ],
      [
        'a label key with capitals and a space',
        { agent_id: 'valid-id', name: 'x', labels: { 'Cost Center': '42' } },
        ['labels.Cost Center'],
      ],
      [
        'a label key starting with a hyphen',
        { agent_id: 'valid-id', name: 'x', labels: { '-env': 'prod' } },
        ['labels.-env'],
      ],
      [
        'several problems at once',
        { agent_id: 'NO', name: '', owner_email: 'x@', labels: { ok: 'fine', 'B A D': 'v' } },
        ['agent_id', 'name', 'owner_email', 'labels.B A D'],
      ],
    ];

    test.each(cases)('%s', async (_, body, fields) => {
      expectValidationError(await register(body), fields);
    });

    test('nothing is stored by a refused register', async () => {
      expectValidationError(await register({ agent_id: 'refused-agent', name: 'x', labels: manyLabels }), ['labels']);
      expectNotFound(await read('refused-agent'));
    });
  });

  describe('who may register', () => {
    test('an API key with manifests:write registers; the agent has no owner and was created by the key', async () => {
      const { keyId, key } = await createKey(t, org, ['manifests:write']);
      const body = await registered({ agent_id: uniqueId('by-key'), name: 'By a key' }, { apiKey: key });
      expect(body).toMatchObject({ owner_email: null, created_by: keyId });
    });

    test('an API key limited to svc_ids registers those ids and gets 403 for any other', async () => {
      const allowed = uniqueId('scoped');
      const { key } = await createKey(t, org, ['manifests:write'], { svc_ids: [allowed] });
      await registered({ agent_id: allowed, name: 'In scope' }, { apiKey: key });
      const other = uniqueId('out-of-scope');
      expectForbidden(await register({ agent_id: other, name: 'Out of scope' }, { apiKey: key }));
      expectNotFound(await read(other));
    });

    test('a key with only manifests:read, and a viewer, get 403 and nothing is stored', async () => {
      const { key } = await createKey(t, org, ['manifests:read']);
      const agentId = uniqueId('refused');
      expectForbidden(await register({ agent_id: agentId, name: 'x' }, { apiKey: key }));
      expectForbidden(await register({ agent_id: agentId, name: 'x' }, { token: viewer.token }));
      expectNotFound(await read(agentId));
    });
  });
});

describe('the agent a manifest registration creates', () => {
  test('named after the manifest agent block, audited with from_manifest, its manifest current', async () => {
    const agentId = uniqueId('from-manifest');
    const payload = manifestPayload({ svcId: agentId });
    payload.agent = {
      id: agentId,
      name: 'Refund bot',
      version: '2.3.4',
      team: 'payments',
      description: 'Issues refunds',
    } as typeof payload.agent;
    const registeredManifest = await t.request('POST', `/api/v1/orgs/${org.orgId}/manifests`, {
      token: operator.token,
      body: payload,
    });
    expect(registeredManifest.status).toBe(201);
    const manifestId = registeredManifest.body.manifest_id;

    const agent = await read(agentId);
    expect(agent.status).toBe(200);
    expect(agent.body).toMatchObject({
      agent_id: agentId,
      name: 'Refund bot',
      description: 'Issues refunds',
      team: 'payments',
      owner_email: operator.email,
      created_by: operator.email,
      labels: {},
      status: 'active',
    });
    // Over REST current_manifest is exactly the five fields docs/decisions/0020-agents.md names (history etc. are GraphQL only).
    expect(agent.body.current_manifest).toEqual({
      manifest_id: manifestId,
      status: 'pending',
      agent_version: '2.3.4',
      manifest_hash: registeredManifest.body.manifest_hash,
      approved_at: null,
    });
    expect(await auditsOf(agentId, 'agent.created')).toEqual([
      expect.objectContaining({
        actor: expect.objectContaining({ type: 'user', label: operator.email }),
        after: {
          name: 'Refund bot',
          team: 'payments',
          owner_email: operator.email,
          labels: {},
          status: 'active',
          from_manifest: manifestId,
        },
      }),
    ]);

    const approved = await t.request('POST', `/api/v1/orgs/${org.orgId}/manifests/${manifestId}/approve`, {
      token: org.adminToken,
      body: {},
    });
    expect(approved.status).toBe(200);
    const after = await read(agentId);
    expect(after.body.current_manifest).toEqual({
      manifest_id: manifestId,
      status: 'active',
      agent_version: '2.3.4',
      manifest_hash: registeredManifest.body.manifest_hash,
      approved_at: approved.body.approved_at,
    });
    expect(after.body.current_manifest.approved_at).toMatch(iso);
  });

  test('a second version keeps the agent as it is: no new agent, no second agent.created', async () => {
    const { svcId, manifestId } = await createManifest(t, org, 'active');
    const v2 = manifestPayload({ svcId });
    v2.agent = { ...v2.agent, name: 'Renamed in v2', version: '2.0.0' };
    const second = await t.request('POST', `/api/v1/orgs/${org.orgId}/manifests`, { token: org.adminToken, body: v2 });
    expect(second.status).toBe(201);
    const agent = (await read(svcId)).body;
    expect(agent.name).toBe('Test agent');
    // The active version stays current while v2 waits for approval.
    expect(agent.current_manifest).toMatchObject({ manifest_id: manifestId, status: 'active', agent_version: '1.0.0' });
    expect(await auditsOf(svcId, 'agent.created')).toHaveLength(1);
  });

  test("usage: the limits are the manifest's, the counts rise with each allowed execute", async () => {
    const agent = await readyAgent(t, org, { constraints: { max_actions_per_hour: 7, max_actions_per_day: 70 } });
    const before = Date.now();
    const fresh = (await read(agent.svcId)).body.usage;
    expect(fresh).toMatchObject({ hour: { count: 0, limit: 7 }, day: { count: 0, limit: 70 } });
    for (let i = 0; i < 3; i++) expect((await execute(t, agent)).body.decision).toBe('allow');
    // A denied action (a capability not approved) uses no budget.
    expect((await execute(t, agent, actionBody(agent, 'delete'))).body.decision).toBe('deny');
    const used = (await read(agent.svcId)).body.usage;
    expect(used).toMatchObject({ hour: { count: 3, limit: 7 }, day: { count: 3, limit: 70 } });
    expectResetsAt(used, before, Date.now());
  });
});

describe('GET /agents', () => {
  let listed: OrgFixture;
  // Registered in this order, so newest first is d, c, b, a.
  const ids = { a: 'alpha-billing', b: 'beta-refunds', c: 'gamma-ops', d: 'delta-reports' };
  const letters = (response: TestResponse) =>
    response.body.items.map(
      (item: { agent_id: string }) => Object.entries(ids).find(([, id]) => id === item.agent_id)?.[0] ?? item.agent_id,
    );
  const listedAs = (query: string) => list(query, { token: listed.adminToken });

  beforeAll(async () => {
    listed = await signUp(t, 'agents-list');
    const as = { token: listed.adminToken };
    await registered(
      { agent_id: ids.a, name: 'Refund helper', team: 'finance', labels: { env: 'prod', url: 'https://x:8080' } },
      as,
    );
    await registered({ agent_id: ids.b, name: 'Alpha refunds', team: 'finance', labels: { env: 'staging' } }, as);
    await registered({ agent_id: ids.c, name: 'Ops', team: 'ops', labels: { env: 'prod' } }, as);
    await registered({ agent_id: ids.d, name: 'Reports 100%', labels: {} }, as);
    expect((await deactivate(ids.c, 'retired', as)).status).toBe(204);
  });

  test.each([
    ['', ['d', 'c', 'b', 'a']],
    ['?status=active', ['d', 'b', 'a']],
    ['?status=deactivated', ['c']],
    ['?team=finance', ['b', 'a']],
    ['?team=Finance', []],
    ['?label=env:prod', ['c', 'a']],
    ['?label=env:staging&team=finance', ['b']],
    ['?label=env:dev', []],
    // Only the first colon separates key and value.
    [`?label=${encodeURIComponent('url:https://x:8080')}`, ['a']],
    ['?q=alpha', ['b', 'a']],
    ['?q=ALPHA%20R', ['b']],
    ['?q=ref', ['a']],
    ['?q=refunds', []],
    ['?q=delta-rep', ['d']],
    ['?q=Reports%20100%25', ['d']],
    // LIKE wildcards in q are literal characters.
    ['?q=%25', []],
    ['?q=_', []],
    ['?q=alpha&status=active&team=finance&label=env:prod', ['a']],
  ])('GET /agents%s, newest first', async (query, expected) => {
    const response = await listedAs(query);
    expect(response.status).toBe(200);
    expect({ items: letters(response), total: response.body.total }).toEqual({
      items: expected,
      total: expected.length,
    });
  });

  test('pages keep the total of every match', async () => {
    const first = await listedAs('?limit=2');
    expect({ items: letters(first), total: first.body.total }).toEqual({ items: ['d', 'c'], total: 4 });
    const second = await listedAs('?limit=2&offset=2');
    expect({ items: letters(second), total: second.body.total }).toEqual({ items: ['b', 'a'], total: 4 });
    const past = await listedAs('?offset=10');
    expect(past.body).toEqual({ items: [], total: 4 });
  });

  test('an item is the whole agent, as GET /agents/:id shows it', async () => {
    const response = await listedAs('?status=deactivated');
    expect(response.body.items).toEqual([(await read(ids.c, { token: listed.adminToken })).body]);
  });

  test.each([
    ['?limit=0', 'limit'],
    ['?limit=201', 'limit'],
    ['?offset=-1', 'offset'],
    ['?label=env', 'label'],
    ['?label=:prod', 'label'],
  ])('GET /agents%s is 422 on %s', async (query, field) => {
    expectValidationError(await listedAs(query), [field]);
  });

  test('?status=retired is 422 (not a status)', async () => {
    const response = await listedAs('?status=retired');
    expect({ status: response.status, code: response.body.error?.code }).toEqual({
      status: 422,
      code: 'VALIDATION_ERROR',
    });
  });

  test('limit 200 is accepted', async () => {
    expect((await listedAs('?limit=200')).status).toBe(200);
  });

  test('a key limited to svc_ids lists only those agents and gets 404 for any other', async () => {
    const { key } = await createKey(t, listed, ['manifests:read'], { svc_ids: [ids.a, ids.c, 'not-registered'] });
    const response = await list('', { apiKey: key });
    expect({ items: letters(response), total: response.body.total }).toEqual({ items: ['c', 'a'], total: 2 });
    expect((await read(ids.a, { apiKey: key })).body.agent_id).toBe(ids.a);
    expectNotFound(await read(ids.b, { apiKey: key }));
    // GraphQL answers the same.
    const graphql = await t.graphql(`{ agents { total items { agent_id } } }`, {}, { apiKey: key });
    expect(graphql.body).toEqual({ data: { agents: { total: 2, items: [{ agent_id: ids.c }, { agent_id: ids.a }] } } });
  });

  test('a key of any scope lists every agent; another org sees none of them', async () => {
    const { key } = await createKey(t, listed, ['manifests:read']);
    expect(letters(await list('', { apiKey: key }))).toEqual(['d', 'c', 'b', 'a']);
    const other = await signUp(t, 'agents-other');
    expect((await list('', { token: other.adminToken })).body).toEqual({ items: [], total: 0 });
  });

  test('a viewer lists; a key without manifests:read gets 403', async () => {
    const listedViewer = await addUser(t, listed, 'viewer');
    expect(letters(await list('', { token: listedViewer.token }))).toEqual(['d', 'c', 'b', 'a']);
    const { key } = await createKey(t, listed, ['gateway:execute', 'logs:read']);
    expectForbidden(await list('', { apiKey: key }));
  });
});

describe('GET /agents/:agent_id', () => {
  test('200 for an agent of the org, for every role', async () => {
    const agentId = uniqueId('read');
    const created = await registered({ agent_id: agentId, name: 'Readable' });
    for (const token of [org.adminToken, operator.token, viewer.token]) {
      const response = await read(agentId, { token });
      expect({ status: response.status, body: response.body }).toEqual({ status: 200, body: created });
    }
  });

  test("404 NOT_FOUND for an unknown id and for another org's agent", async () => {
    expectNotFound(await read('no-such-agent'));
    const other = await signUp(t, 'agents-foreign');
    const foreignId = uniqueId('foreign');
    await registered({ agent_id: foreignId, name: 'Theirs' }, { token: other.adminToken });
    expectNotFound(await read(foreignId));
    // Nor can it be deactivated or reactivated from here.
    expectNotFound(await deactivate(foreignId));
    expectNotFound(await reactivate(foreignId));
    expect((await read(foreignId, { token: other.adminToken })).body.status).toBe('active');
  });
});

describe('DELETE /agents/:agent_id (deactivate)', () => {
  test('204 without a body; the agent shows who, when and why; pending approvals denied, tokens revoked, audited', async () => {
    const agent = await readyAgent(t, org, {
      constraints: { max_actions_per_hour: 100, max_actions_per_day: 1000, require_human_approval: ['billing:refund'] },
    });
    const asked = await execute(t, agent, actionBody(agent, 'refund'));
    expect(asked.body.approval_id).toMatch(/^apr_/);
    const issued = await t.request('POST', `/api/v1/orgs/${org.orgId}/capability-tokens`, {
      token: org.adminToken,
      body: { svc_id: agent.svcId, capabilities: ['billing:read'], expires_in_seconds: 600 },
    });
    expect(issued.status).toBe(201);
    const before = (await read(agent.svcId)).body;

    const started = Date.now();
    const response = await deactivate(agent.svcId, 'Leaked credentials', { token: operator.token });
    expect({ status: response.status, text: response.text }).toEqual({ status: 204, text: '' });

    const after = await read(agent.svcId);
    expect(after.body).toEqual({
      ...before,
      status: 'deactivated',
      deactivated_at: expect.stringMatching(iso),
      deactivated_by: operator.email,
      deactivation_reason: 'Leaked credentials',
      // Usage windows may have rolled over meanwhile; they are checked elsewhere.
      usage: expect.any(Object),
    });
    expect(Date.parse(after.body.deactivated_at)).toBeGreaterThanOrEqual(started - 1000);

    const approval = await t.request('GET', `/api/v1/orgs/${org.orgId}/approvals/${asked.body.approval_id}`, {
      token: org.adminToken,
    });
    expect(approval.body).toMatchObject({ status: 'denied', reason: 'agent deactivated' });

    expect(await auditsOf(agent.svcId, 'agent.deactivated')).toEqual([
      expect.objectContaining({
        actor: expect.objectContaining({ type: 'user', label: operator.email }),
        reason: 'Leaked credentials',
        before: {
          name: before.name,
          team: before.team,
          owner_email: before.owner_email,
          labels: before.labels,
          status: 'active',
        },
        after: {
          name: before.name,
          team: before.team,
          owner_email: before.owner_email,
          labels: before.labels,
          status: 'deactivated',
          approvals_denied: 1,
          capability_tokens_revoked: 1,
          oauth_grants_revoked: 0,
        },
      }),
    ]);
  });

  test('without a reason: deactivation_reason is null', async () => {
    const agentId = uniqueId('no-reason');
    await registered({ agent_id: agentId, name: 'x' });
    expect((await deactivate(agentId)).status).toBe(204);
    expect((await read(agentId)).body).toMatchObject({
      status: 'deactivated',
      deactivation_reason: null,
      deactivated_by: org.adminEmail,
    });
    const [entry] = await auditsOf(agentId, 'agent.deactivated');
    expect(entry.after).toMatchObject({ approvals_denied: 0, capability_tokens_revoked: 0 });
  });

  test('a second DELETE is 204 and changes nothing: same fields, no second audit entry', async () => {
    const agentId = uniqueId('twice-off');
    await registered({ agent_id: agentId, name: 'x' });
    expect((await deactivate(agentId, 'first')).status).toBe(204);
    const first = (await read(agentId)).body;
    const again = await deactivate(agentId, 'second', { token: operator.token });
    expect({ status: again.status, text: again.text }).toEqual({ status: 204, text: '' });
    expect((await read(agentId)).body).toEqual(first);
    expect(await auditsOf(agentId, 'agent.deactivated')).toHaveLength(1);
  });

  test('a deactivated agent refuses new manifests with 409; reactivated, it takes them again', async () => {
    const agentId = uniqueId('no-manifests');
    await registered({ agent_id: agentId, name: 'x' });
    expect((await deactivate(agentId)).status).toBe(204);
    const base = `/api/v1/orgs/${org.orgId}/manifests`;
    const refused = await t.request('POST', base, { token: org.adminToken, body: manifestPayload({ svcId: agentId }) });
    expect({ status: refused.status, code: refused.body.error?.code }).toEqual({ status: 409, code: 'CONFLICT' });
    expect((await read(agentId)).body.current_manifest).toBeNull();
    expect((await reactivate(agentId)).status).toBe(200);
    expect(
      (await t.request('POST', base, { token: org.adminToken, body: manifestPayload({ svcId: agentId }) })).status,
    ).toBe(201);
  });

  test('a reason over 1000 characters is 422 and the agent stays active', async () => {
    const agentId = uniqueId('long-reason');
    await registered({ agent_id: agentId, name: 'x' });
    expectValidationError(await deactivate(agentId, 'r'.repeat(1001)), ['reason']);
    expect((await read(agentId)).body.status).toBe('active');
    expect((await deactivate(agentId, 'r'.repeat(1000))).status).toBe(204);
  });

  test('404 for an unknown agent', async () => {
    expectNotFound(await deactivate('no-such-agent'));
  });

  test('a viewer and any API key get 403; the agent stays active', async () => {
    const agentId = uniqueId('guarded');
    await registered({ agent_id: agentId, name: 'x' });
    const { key } = await createKey(t, org, [
      'manifests:read',
      'manifests:write',
      'approvals:write',
      'gateway:execute',
      'logs:export',
    ]);
    expectForbidden(await deactivate(agentId, 'nope', { token: viewer.token }));
    expectForbidden(await deactivate(agentId, 'nope', { apiKey: key }));
    expect((await read(agentId)).body.status).toBe('active');
    expect(await auditsOf(agentId, 'agent.deactivated')).toEqual([]);
  });
});

describe('POST /agents/:agent_id/reactivate', () => {
  test('admin only: the agent is active again with the deactivation fields cleared, audited', async () => {
    const agentId = uniqueId('back');
    const created = await registered({ agent_id: agentId, name: 'Comes back', labels: { env: 'prod' } });
    expect((await deactivate(agentId, 'pause')).status).toBe(204);

    expectForbidden(await reactivate(agentId, { token: operator.token }));
    expectForbidden(await reactivate(agentId, { token: viewer.token }));
    expect((await read(agentId)).body.status).toBe('deactivated');

    const response = await reactivate(agentId);
    expect(response.status).toBe(200);
    expect(response.body).toEqual({ ...created, usage: expect.any(Object) });
    expect((await read(agentId)).body).toEqual(response.body);
    expect(await auditsOf(agentId, 'agent.reactivated')).toEqual([
      expect.objectContaining({
        actor: expect.objectContaining({ type: 'user', label: org.adminEmail }),
        before: expect.objectContaining({ status: 'deactivated' }),
        after: {
          name: 'Comes back',
          team: null,
          owner_email: org.adminEmail,
          labels: { env: 'prod' },
          status: 'active',
        },
      }),
    ]);
  });

  test('an active agent is 409 INVALID_STATE_TRANSITION from active to active', async () => {
    const agentId = uniqueId('already');
    await registered({ agent_id: agentId, name: 'x' });
    const response = await reactivate(agentId);
    expect({ status: response.status, body: response.body }).toEqual({
      status: 409,
      body: {
        error: {
          code: 'INVALID_STATE_TRANSITION',
          message: expect.any(String),
          details: { from: 'active', to: 'active' },
        },
      },
    });
    expect(await auditsOf(agentId, 'agent.reactivated')).toEqual([]);
  });

  test('404 for an unknown agent; an API key with every scope gets 403', async () => {
    expectNotFound(await reactivate('no-such-agent'));
    const agentId = uniqueId('key-back');
    await registered({ agent_id: agentId, name: 'x' });
    expect((await deactivate(agentId)).status).toBe(204);
    const { key } = await createKey(t, org, ['manifests:read', 'manifests:write', 'approvals:write']);
    expectForbidden(await reactivate(agentId, { apiKey: key }));
    expect((await read(agentId)).body.status).toBe('deactivated');
  });
});

describe('GraphQL', () => {
  test('agent(agent_id) answers exactly what GET /agents/:id does', async () => {
    const agent = await readyAgent(t, org, { constraints: { max_actions_per_hour: 9, max_actions_per_day: 90 } });
    expect((await execute(t, agent)).body.decision).toBe('allow');
    const deactivatedId = uniqueId('gql-off');
    await registered({
      agent_id: deactivatedId,
      name: 'Off',
      team: 't',
      labels: { a: 'b' },
      owner_email: 'x@example.com',
    });
    expect((await deactivate(deactivatedId, 'why')).status).toBe(204);
    for (const agentId of [agent.svcId, deactivatedId]) {
      const graphql = await runOperation(t, AgentDetailDocument, { agentId }, org.adminToken);
      const rest = await read(agentId);
      expect(graphql.agent).toEqual(rest.body);
    }
  });

  test('agents answers what GET /agents does, and agent of an unknown id is NOT_FOUND', async () => {
    const graphql = await runOperation(t, AgentIdsDocument, { limit: 200 }, org.adminToken);
    const rest = await list('?limit=200');
    expect(graphql.agents).toEqual({
      total: rest.body.total,
      items: rest.body.items.map((a: { agent_id: string }) => ({ agent_id: a.agent_id })),
    });
    const unknown = await t.graphql(
      'query ($id: ID!) { agent(agent_id: $id) { agent_id } }',
      { id: 'no-such-agent' },
      asAdmin(),
    );
    expect(unknown.body.errors.map((e: { extensions: { code: string } }) => e.extensions.code)).toEqual(['NOT_FOUND']);
  });
});
