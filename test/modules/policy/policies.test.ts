import type { TypedDocumentNode } from '@graphql-typed-document-node/core';
import { print } from 'graphql';
import type { ConditionFacts } from '../../../src/modules/policy/policy-condition.js';
import { runCondition } from '../../../src/modules/policy/policy-condition.js';
import { MAX_POLICIES_PER_ORG } from '../../../src/modules/policy/policy.service.js';
import { CreatePolicyDocument, OrganizationPoliciesDocument } from '../../generated/graphql.js';
import { startTestApp, type RequestOptions, type TestApp, type TestResponse } from '../../support/app.js';
import { addUser, createKey, signUp, type OrgFixture } from '../../support/fixtures.js';

/**
 * Policies CRUD (docs/guides/policies.md): REST and GraphQL over the real service and database.
 * Defaults, every validation rule with the field it names, replace semantics and versions, the
 * per-org limit (also under concurrency), audit entries, roles, org isolation, and what the
 * gateway reads (`active`): enabled policies in order, compiled once, failing closed.
 */

let t: TestApp;
let org: OrgFixture;
const iso = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;
let counter = 0;
const uniqueName = (prefix = 'policy') => `${prefix} ${++counter}`;

beforeAll(async () => {
  t = await startTestApp();
  org = await signUp(t, 'pol');
});
afterAll(() => t.close());

const create = (body: Record<string, unknown>, as: RequestOptions = { token: org.adminToken }) =>
  t.request('POST', '/api/v1/policies', { ...as, body });
const read = (id: string, as: RequestOptions = { token: org.adminToken }) =>
  t.request('GET', `/api/v1/policies/${id}`, as);
const replace = (id: string, body: Record<string, unknown>, as: RequestOptions = { token: org.adminToken }) =>
  t.request('PUT', `/api/v1/policies/${id}`, { ...as, body });
const remove = (id: string, as: RequestOptions = { token: org.adminToken }) =>
  t.request('DELETE', `/api/v1/policies/${id}`, as);
const list = (query = '', as: RequestOptions = { token: org.adminToken }) =>
  t.request('GET', `/api/v1/policies${query}`, as);

/** A created policy's id; fails the test when the create does not answer 201. */
async function created(body: Record<string, unknown>, as?: RequestOptions): Promise<string> {
  const response = await create(body, as);
  expect({ status: response.status, body: response.body }).toEqual({
    status: 201,
    body: expect.objectContaining({ policy_id: expect.any(String) }),
  });
  return response.body.policy_id;
}

function expectValidationError(response: TestResponse, fields: string[]) {
  expect({ status: response.status, code: response.body?.error?.code }).toEqual({
    status: 422,
    code: 'VALIDATION_ERROR',
  });
  expect(response.body.error.details.errors.map((e: { field: string }) => e.field).sort()).toEqual([...fields].sort());
}

const fullPolicy = () => ({
  name: uniqueName('full'),
  description: 'Refunds over 1000 at night need a human',
  enabled: false,
  mode: 'shadow',
  priority: 7,
  effect: 'rate_limit',
  target: { svc_ids: ['billing-agent', 'refund-bot'], capabilities: ['billing:*', '*:refund'] },
  condition: 'params.amount > 1000 && request.hour < 6',
  rate_limit: { limit: 5, window_seconds: 3600, per: 'agent' },
  message: 'Ask the finance team',
});

/** What every optional field shows when not given. */
const defaults = {
  description: '',
  enabled: true,
  mode: 'enforce',
  priority: 100,
  target: { svc_ids: null, capabilities: null },
  condition: null,
  rate_limit: null,
  message: null,
  labels: null,
  history_window_seconds: null,
  detectors: null,
};

const facts = (overrides: Partial<ConditionFacts> = {}): ConditionFacts => ({
  agent: { id: 'billing-agent', name: 'Billing', version: '1.0.0', team: 'finance' },
  action: { type: 'billing', tool: 'refund', capability: 'billing:refund', params: { amount: 5000 } },
  params: { amount: 5000 },
  key: { id: 'key_1', prefix: 'agw_12345678', scopes: ['gateway:execute'] },
  request: { time: new Date(), hour: 3n, weekday: 1n, channel: 'rest', mode: 'execute' },
  ...overrides,
});

describe('create and read', () => {
  test('a policy with only a name and an effect gets every default, version 1 and its author', async () => {
    const response = await create({ name: '  Block deletes  ', effect: 'deny' });
    expect(response.status).toBe(201);
    const expected = {
      policy_id: expect.stringMatching(/^pol_[A-Za-z0-9_-]{16}$/),
      name: 'Block deletes',
      ...defaults,
      effect: 'deny',
      version: 1,
      created_at: expect.stringMatching(iso),
      updated_at: expect.stringMatching(iso),
      created_by: org.adminEmail,
      updated_by: org.adminEmail,
    };
    expect(response.body).toEqual(expected);
    const again = await read(response.body.policy_id);
    expect(again.status).toBe(200);
    expect(again.body).toEqual(response.body);
  });

  test('every field given is stored and shown as given', async () => {
    const body = fullPolicy();
    const response = await create(body);
    expect(response.status).toBe(201);
    expect(response.body).toMatchObject({ ...body, version: 1 });
  });

  test('an unknown policy id is 404 NOT_FOUND', async () => {
    const response = await read('pol_doesnotexist');
    expect({ status: response.status, body: response.body }).toEqual({
      status: 404,
      body: { error: { code: 'NOT_FOUND', message: 'Policy not found', details: {} } },
    });
  });

  test('a second policy with the same name (after trimming) is 409 CONFLICT on name', async () => {
    const name = uniqueName('dup');
    await created({ name, effect: 'deny' });
    const response = await create({ name: `${name} `, effect: 'require_approval' });
    expect({ status: response.status, code: response.body.error.code, details: response.body.error.details }).toEqual({
      status: 409,
      code: 'CONFLICT',
      details: { field: 'name' },
    });
  });
});

describe('validation: 422 VALIDATION_ERROR naming each field', () => {
  const long = (n: number) => 'x'.repeat(n);
  const cases: [string, Record<string, unknown>, string[]][] = [
    ['empty name', { name: '', effect: 'deny' }, ['name']],
    ['a name of spaces', { name: '   ', effect: 'deny' }, ['name']],
    ['a name over 100 characters', { name: long(101), effect: 'deny' }, ['name']],
    ['no name', { effect: 'deny' }, ['name']],
    ['no effect', { name: 'x' }, ['effect']],
    ['an unknown effect', { name: 'x', effect: 'allow' }, ['effect']],
    ['an unknown mode', { name: 'x', effect: 'deny', mode: 'audit' }, ['mode']],
    ['a negative priority', { name: 'x', effect: 'deny', priority: -1 }, ['priority']],
    ['a priority over 1000', { name: 'x', effect: 'deny', priority: 1001 }, ['priority']],
    ['a fractional priority', { name: 'x', effect: 'deny', priority: 1.5 }, ['priority']],
    ['enabled as a string', { name: 'x', effect: 'deny', enabled: 'yes' }, ['enabled']],
    ['a description over 2000 characters', { name: 'x', effect: 'deny', description: long(2001) }, ['description']],
    ['a message over 500 characters', { name: 'x', effect: 'deny', message: long(501) }, ['message']],
    ['a rate_limit policy without rate_limit', { name: 'x', effect: 'rate_limit' }, ['rate_limit']],
    [
      'rate_limit on a deny policy',
      { name: 'x', effect: 'deny', rate_limit: { limit: 1, window_seconds: 60, per: 'org' } },
      ['rate_limit'],
    ],
    [
      'a zero limit',
      { name: 'x', effect: 'rate_limit', rate_limit: { limit: 0, window_seconds: 60, per: 'org' } },
      ['rate_limit.limit'],
    ],
    [
      'a window over a day',
      { name: 'x', effect: 'rate_limit', rate_limit: { limit: 1, window_seconds: 86401, per: 'org' } },
      ['rate_limit.window_seconds'],
    ],
    [
      'an unknown counter scope',
      { name: 'x', effect: 'rate_limit', rate_limit: { limit: 1, window_seconds: 60, per: 'team' } },
      ['rate_limit.per'],
    ],
    [
      'an unknown rate_limit field',
      { name: 'x', effect: 'rate_limit', rate_limit: { limit: 1, window_seconds: 60, per: 'org', burst: 2 } },
      ['rate_limit.burst'],
    ],
    ['an unknown target field', { name: 'x', effect: 'deny', target: { teams: ['a'] } }, ['target.teams']],
    ['an empty svc_ids list', { name: 'x', effect: 'deny', target: { svc_ids: [] } }, ['target.svc_ids']],
    [
      'an invalid agent id',
      { name: 'x', effect: 'deny', target: { svc_ids: ['billing-agent', 'Billing_Agent'] } },
      ['target.svc_ids[1]'],
    ],
    ['a repeated agent id', { name: 'x', effect: 'deny', target: { svc_ids: ['a-1', 'a-1'] } }, ['target.svc_ids[1]']],
    [
      'a capability without an action',
      { name: 'x', effect: 'deny', target: { capabilities: ['billing:*', 'billing'] } },
      ['target.capabilities[1]'],
    ],
    [
      'a partial wildcard',
      { name: 'x', effect: 'deny', target: { capabilities: ['bill*:read'] } },
      ['target.capabilities[0]'],
    ],
    [
      'a non-string capability',
      { name: 'x', effect: 'deny', target: { capabilities: [42] } },
      ['target.capabilities[0]'],
    ],
    [
      'over 100 capability patterns',
      { name: 'x', effect: 'deny', target: { capabilities: Array.from({ length: 101 }, (_, i) => `d${i}:*`) } },
      ['target.capabilities'],
    ],
    [
      'several problems at once',
      { name: '', effect: 'deny', priority: 5000, rate_limit: { limit: 1, window_seconds: 60, per: 'org' } },
      ['name', 'priority', 'rate_limit'],
    ],
  ];

  test.each(cases)('%s', async (_, body, fields) => {
    expectValidationError(await create(body), fields);
  });

  const conditionCases: [string, string, RegExp, { line: number; column: number } | null][] = [
    ['a syntax error', 'params.amount >', /^at line 1, column 16: /, { line: 1, column: 16 }],
    [
      'a syntax error on line 2',
      "agent.id == 'x' &&\n  (params.amount > )",
      /^at line 2, column 20: Unexpected token/,
      { line: 2, column: 20 },
    ],
    ['an int result', '1 + 2', /boolean expression, not int/, { line: 1, column: 1 }],
    ['a string result', '"x"', /boolean expression, not string/, { line: 1, column: 1 }],
    ['an unknown variable', 'foo == 1', /Unknown variable: foo/, { line: 1, column: 1 }],
    ['a regular expression', "agent.name.matches('^(a+)+$')", /`matches`\) are not allowed/, { line: 1, column: 1 }],
    [
      'a nested comprehension',
      'params.items.exists(i, params.tags.exists(t, t == i))',
      /inside another comprehension/,
      { line: 1, column: 24 },
    ],
    ['over 4,096 characters', `${'params.a > 1 && '.repeat(300)}true`, /at most 4096 characters/, null],
    ['an empty condition', '', /must not be empty/, null],
  ];

  test.each(conditionCases)(
    'a condition with %s names the condition and where',
    async (_, condition, message, position) => {
      const response = await create({ name: uniqueName('cond'), effect: 'deny', condition });
      expectValidationError(response, ['condition']);
      const [error] = response.body.error.details.errors;
      expect(error.message).toMatch(message);
      if (position) expect(error.position).toEqual({ offset: expect.any(Number), ...position });
      else expect(error).not.toHaveProperty('position');
    },
  );

  test('conditions over params (dyn) and every variable are accepted', async () => {
    const condition =
      "params.amount * 2 > 1000 && agent.team == 'finance' && action.capability == 'billing:refund' && " +
      "'gateway:execute' in key.scopes && request.weekday == 0 && request.channel == 'rest' && params.flag";
    const response = await create({ name: uniqueName('vars'), effect: 'deny', condition });
    expect(response.status).toBe(201);
    expect(response.body.condition).toBe(condition);
  });

  test('nothing is written by a refused create', async () => {
    const name = uniqueName('refused');
    expectValidationError(await create({ name, effect: 'deny', priority: -5 }), ['priority']);
    const all = await list('?limit=200');
    expect(all.body.items.map((p: { name: string }) => p.name)).not.toContain(name);
  });

  test('over GraphQL the same 422 carries the position in extensions.details', async () => {
    const response = await t.graphql(
      print(CreatePolicyDocument),
      { name: uniqueName('gql'), effect: 'deny', condition: 'params.x >' },
      { token: org.adminToken },
    );
    expect(response.body.errors[0].extensions).toMatchObject({
      code: 'VALIDATION_ERROR',
      details: {
        errors: [
          {
            field: 'condition',
            message: expect.stringMatching(/^at line 1, column 11: /),
            position: { offset: 10, line: 1, column: 11 },
          },
        ],
      },
    });
  });
});

describe('list', () => {
  let filtered: OrgFixture;
  const ids: Record<'c' | 'a' | 'b' | 'd', string> = { a: '', b: '', c: '', d: '' };
  const names = (response: TestResponse) =>
    response.body.items.map(
      (p: { policy_id: string }) => Object.entries(ids).find(([, id]) => id === p.policy_id)?.[0],
    );
  const listed = (query: string) => list(query, { token: filtered.adminToken });

  beforeAll(async () => {
    filtered = await signUp(t, 'pol-list');
    const as = { token: filtered.adminToken };
    // Priority first, then name: c (5), a and b (10, by name), d (500).
    ids.a = await created({ name: 'a deny', priority: 10, effect: 'deny', target: { svc_ids: ['agent-a'] } }, as);
    ids.b = await created(
      {
        name: 'b approval',
        priority: 10,
        effect: 'require_approval',
        mode: 'shadow',
        target: { svc_ids: ['agent-b'] },
      },
      as,
    );
    ids.c = await created(
      {
        name: 'c limit',
        priority: 5,
        effect: 'rate_limit',
        enabled: false,
        rate_limit: { limit: 3, window_seconds: 60, per: 'org' },
      },
      as,
    );
    ids.d = await created(
      { name: 'd deletes', priority: 500, effect: 'deny', mode: 'shadow', target: { capabilities: ['*:delete'] } },
      as,
    );
  });

  test.each([
    ['', ['c', 'a', 'b', 'd']],
    ['?enabled=false', ['c']],
    ['?enabled=true', ['a', 'b', 'd']],
    ['?mode=shadow', ['b', 'd']],
    ['?mode=enforce', ['c', 'a']],
    ['?effect=deny', ['a', 'd']],
    ['?effect=rate_limit', ['c']],
    ['?svc_id=agent-a', ['c', 'a', 'd']],
    ['?svc_id=agent-b', ['c', 'b', 'd']],
    ['?svc_id=agent-z', ['c', 'd']],
    ['?effect=deny&svc_id=agent-b', ['d']],
    ['?enabled=true&mode=shadow&effect=require_approval', ['b']],
  ])('GET /policies%s in priority, then name order', async (query, expected) => {
    const response = await listed(query);
    expect(response.status).toBe(200);
    expect({ items: names(response), total: response.body.total }).toEqual({ items: expected, total: expected.length });
  });

  test('pages keep the total of every match', async () => {
    const first = await listed('?limit=2');
    expect({ items: names(first), total: first.body.total }).toEqual({ items: ['c', 'a'], total: 4 });
    const second = await listed('?limit=2&offset=2');
    expect({ items: names(second), total: second.body.total }).toEqual({ items: ['b', 'd'], total: 4 });
    const past = await listed('?offset=10');
    expect({ items: past.body.items, total: past.body.total }).toEqual({ items: [], total: 4 });
  });

  test.each([
    ['?limit=0', 'limit'],
    ['?limit=201', 'limit'],
    ['?offset=-1', 'offset'],
    ['?limit=ten', 'limit'],
    ['?mode=audit', 'mode'],
    ['?effect=allow', 'effect'],
    ['?enabled=maybe', 'enabled'],
    ['?svc_id=Not_An_Agent', 'svc_id'],
  ])('GET /policies%s is 422 on %s', async (query, field) => {
    expectValidationError(await listed(query), [field]);
  });

  test('an item is the whole policy, as GET /policies/:id shows it', async () => {
    const response = await listed('?effect=rate_limit');
    const one = await read(ids.c, { token: filtered.adminToken });
    expect(response.body.items).toEqual([one.body]);
  });

  test("GraphQL organization.policies answers what REST does, filters included; another org's viewer gets 404", async () => {
    const run = <R, V extends Record<string, unknown>>(
      doc: TypedDocumentNode<R, V>,
      variables: V,
      as: RequestOptions,
    ) => t.graphql<{ data: R | null; errors?: { extensions: { code: string } }[] }>(print(doc), variables, as);
    for (const [variables, query] of [
      [{ orgId: filtered.orgId }, ''],
      [{ orgId: filtered.orgId, effect: 'deny' as const, svcId: 'agent-b' }, '?effect=deny&svc_id=agent-b'],
      [{ orgId: filtered.orgId, limit: 2, offset: 1 }, '?limit=2&offset=1'],
    ] as const) {
      const graphql = await run(OrganizationPoliciesDocument, variables, { token: filtered.adminToken });
      expect(graphql.body.errors).toBeUndefined();
      const rest = await listed(query);
      expect(graphql.body.data!.organization.policies).toEqual({
        total: rest.body.total,
        items: rest.body.items.map((p: Record<string, unknown>) => ({
          policy_id: p.policy_id,
          name: p.name,
          priority: p.priority,
          effect: p.effect,
          mode: p.mode,
          target: p.target,
          version: p.version,
        })),
      });
    }
    const otherViewer = await addUser(t, org, 'viewer');
    const foreign = await run(OrganizationPoliciesDocument, { orgId: filtered.orgId }, { token: otherViewer.token });
    expect(foreign.body.data).toBeNull();
    expect(foreign.body.errors?.map((e) => e.extensions.code)).toEqual(['NOT_FOUND']);
  });
});

describe('replace (PUT) and delete', () => {
  test('PUT replaces every field: omitted optional fields go back to their defaults; version + 1 each time', async () => {
    const operator = await addUser(t, org, 'operator');
    const original = await create(fullPolicy());
    const id = original.body.policy_id;
    const name = uniqueName('replaced');
    const first = await replace(id, { name, effect: 'deny' }, { token: operator.token });
    expect(first.status).toBe(200);
    expect(first.body).toEqual({
      ...original.body,
      name,
      ...defaults,
      effect: 'deny',
      version: 2,
      updated_at: expect.stringMatching(iso),
      updated_by: operator.email,
    });
    expect(first.body.created_by).toBe(org.adminEmail);
    expect(Date.parse(first.body.updated_at)).toBeGreaterThanOrEqual(Date.parse(original.body.updated_at));

    const second = await replace(id, { ...fullPolicy(), name });
    expect(second.body).toMatchObject({ version: 3, mode: 'shadow', effect: 'rate_limit', updated_by: org.adminEmail });
    expect((await read(id)).body).toEqual(second.body);
  });

  test('PUT validates like create, and keeps names unique', async () => {
    const id = await created({ name: uniqueName('keep'), effect: 'deny' });
    const taken = uniqueName('taken');
    await created({ name: taken, effect: 'deny' });
    expectValidationError(await replace(id, { name: 'x', effect: 'rate_limit' }), ['rate_limit']);
    expectValidationError(await replace(id, { effect: 'deny' }), ['name']);
    const conflict = await replace(id, { name: taken, effect: 'deny' });
    expect({ status: conflict.status, code: conflict.body.error.code, details: conflict.body.error.details }).toEqual({
      status: 409,
      code: 'CONFLICT',
      details: { field: 'name' },
    });
    expect((await read(id)).body.version).toBe(1);
  });

  test('concurrent replaces each get their own version; none is lost', async () => {
    const id = await created({ name: uniqueName('race'), effect: 'deny' });
    const responses = await Promise.all(
      Array.from({ length: 5 }, (_, i) => replace(id, { name: uniqueName('race'), effect: 'deny', priority: i })),
    );
    expect(responses.map((r) => r.status)).toEqual([200, 200, 200, 200, 200]);
    expect(responses.map((r) => r.body.version).sort()).toEqual([2, 3, 4, 5, 6]);
    expect((await read(id)).body.version).toBe(6);
    const audits = await t.request(
      'GET',
      `/api/v1/orgs/${org.orgId}/audit-logs?target_id=${id}&action=policy.updated`,
      { token: org.adminToken },
    );
    // Each update recorded the version it replaced.
    expect(audits.body.items.map((a: { before: { version: number } }) => a.before.version).sort()).toEqual([
      1, 2, 3, 4, 5,
    ]);
  });

  test('DELETE is 204 without a body; the policy is then gone for GET, PUT and DELETE', async () => {
    const id = await created({ name: uniqueName('gone'), effect: 'deny' });
    const deleted = await remove(id);
    expect({ status: deleted.status, text: deleted.text }).toEqual({ status: 204, text: '' });
    expect((await read(id)).status).toBe(404);
    expect((await replace(id, { name: uniqueName('gone'), effect: 'deny' })).status).toBe(404);
    expect((await remove(id)).status).toBe(404);
  });

  test('concurrent deletes: one wins, the others are 404', async () => {
    const id = await created({ name: uniqueName('twice'), effect: 'deny' });
    const statuses = (await Promise.all([remove(id), remove(id), remove(id)])).map((r) => r.status).sort();
    expect(statuses).toEqual([204, 404, 404]);
  });
});

describe(`at most ${MAX_POLICIES_PER_ORG} policies per org`, () => {
  /** Fills an org up to `count` policies straight in SQL (fast), as the service would store them. */
  async function fill(target: OrgFixture, count: number) {
    await t.database.db.sql.query(
      `INSERT INTO policies (id, org_id, name, mode, priority, effect, target, created_by, updated_by, updated_at)
       SELECT 'pol_fill_' || $1::text || '_' || i, $1::uuid, 'filler ' || i, 'enforce', 100, 'deny', '{}'::jsonb, 'test', 'test', now()
       FROM generate_series(1, $2::int) AS i`,
      [target.orgId, count],
    );
  }

  test(`the ${MAX_POLICIES_PER_ORG}th is created, the next is 422 until one is deleted`, async () => {
    const full = await signUp(t, 'pol-full');
    const as = { token: full.adminToken };
    await fill(full, MAX_POLICIES_PER_ORG - 1);
    const last = await created({ name: 'the last one', effect: 'deny' }, as);
    const refused = await create({ name: 'one too many', effect: 'deny' }, as);
    expectValidationError(refused, ['policies']);
    expect(refused.body.error.details.errors[0].message).toMatch(/at most 200 policies/);
    expect((await list('?limit=1', as)).body.total).toBe(MAX_POLICIES_PER_ORG);
    expect((await remove(last, as)).status).toBe(204);
    await created({ name: 'fits again', effect: 'deny' }, as);
    // Other orgs are not affected.
    await created({ name: uniqueName('elsewhere'), effect: 'deny' });
  });

  test('concurrent creates for the last free place: exactly one wins', async () => {
    const full = await signUp(t, 'pol-race');
    const as = { token: full.adminToken };
    await fill(full, MAX_POLICIES_PER_ORG - 1);
    const responses = await Promise.all(
      Array.from({ length: 4 }, (_, i) => create({ name: `racer ${i}`, effect: 'deny' }, as)),
    );
    expect(responses.map((r) => r.status).sort()).toEqual([201, 422, 422, 422]);
    expect((await list('?limit=1', as)).body.total).toBe(MAX_POLICIES_PER_ORG);
  });
});

describe('audit', () => {
  test('create, replace and delete are audited with the public fields before and after', async () => {
    const id = await created({ name: uniqueName('audited'), effect: 'deny', condition: 'params.amount > 10' });
    const createdBody = (await read(id)).body;
    const replaced = await replace(id, { ...fullPolicy(), name: createdBody.name });
    expect((await remove(id)).status).toBe(204);

    const audits = await t.request('GET', `/api/v1/orgs/${org.orgId}/audit-logs?target_type=policy&target_id=${id}`, {
      token: org.adminToken,
    });
    expect(audits.status).toBe(200);
    const withoutTimestamps = ({ created_at: _c, updated_at: _u, ...rest }: Record<string, unknown>) => rest;
    expect(
      audits.body.items.map((a: Record<string, unknown>) => ({
        action: a.action,
        actor: a.actor,
        target: a.target,
        before: a.before,
        after: a.after,
      })),
    ).toEqual([
      {
        action: 'policy.deleted',
        actor: { type: 'user', id: org.adminUserId, label: org.adminEmail },
        target: { type: 'policy', id },
        before: withoutTimestamps(replaced.body),
        after: null,
      },
      {
        action: 'policy.updated',
        actor: { type: 'user', id: org.adminUserId, label: org.adminEmail },
        target: { type: 'policy', id },
        before: withoutTimestamps(createdBody),
        after: withoutTimestamps(replaced.body),
      },
      {
        action: 'policy.created',
        actor: { type: 'user', id: org.adminUserId, label: org.adminEmail },
        target: { type: 'policy', id },
        before: null,
        after: withoutTimestamps(createdBody),
      },
    ]);
  });
});

describe('who may do what', () => {
  let viewer: { token: string };
  let policyId: string;
  beforeAll(async () => {
    viewer = await addUser(t, org, 'viewer');
    policyId = await created({ name: uniqueName('guarded'), effect: 'deny' });
  });

  test('a viewer reads the list and one policy', async () => {
    const listed = await list('?limit=200', viewer);
    expect(listed.status).toBe(200);
    expect(listed.body.items.map((p: { policy_id: string }) => p.policy_id)).toContain(policyId);
    expect((await read(policyId, viewer)).status).toBe(200);
  });

  test('a viewer gets 403 FORBIDDEN on every write, and nothing changes', async () => {
    for (const response of [
      await create({ name: uniqueName('viewer'), effect: 'deny' }, viewer),
      await replace(policyId, { name: uniqueName('viewer'), effect: 'deny' }, viewer),
      await remove(policyId, viewer),
    ]) {
      expect({ status: response.status, body: response.body }).toEqual({
        status: 403,
        body: { detail: { code: 'FORBIDDEN', message: expect.any(String) } },
      });
    }
    expect((await read(policyId)).body.version).toBe(1);
  });

  test('an API key, whatever its scopes, gets 403 FORBIDDEN: policies are bearer-only', async () => {
    const { key } = await createKey(t, org, [
      'manifests:read',
      'manifests:write',
      'logs:read',
      'approvals:write',
      'gateway:execute',
    ]);
    for (const response of [
      await list('', { apiKey: key }),
      await read(policyId, { apiKey: key }),
      await create({ name: uniqueName('key'), effect: 'deny' }, { apiKey: key }),
    ]) {
      expect({ status: response.status, code: response.body.detail?.code }).toEqual({ status: 403, code: 'FORBIDDEN' });
    }
  });

  test("another org's admin cannot see or change the policy: 404, and its own list is separate", async () => {
    const other = await signUp(t, 'pol-other');
    const as = { token: other.adminToken };
    expect((await read(policyId, as)).status).toBe(404);
    expect((await replace(policyId, { name: uniqueName('theirs'), effect: 'deny' }, as)).status).toBe(404);
    expect((await remove(policyId, as)).status).toBe(404);
    expect((await list('', as)).body).toEqual({ items: [], total: 0 });
    expect((await read(policyId)).body.version).toBe(1);
  });
});

describe('active(orgId): what the gateway applies', () => {
  test('enabled policies only, in priority order, mapped for the gateway and refreshed by writes', async () => {
    const own = await signUp(t, 'pol-active');
    const as = { token: own.adminToken };
    const policies = t.app.services.policies;
    expect(await policies.active(own.orgId)).toEqual([]);
    const limited = await created(
      {
        name: 'limit',
        priority: 50,
        effect: 'rate_limit',
        rate_limit: { limit: 3, window_seconds: 60, per: 'api_key' },
        target: { svc_ids: ['agent-a'] },
      },
      as,
    );
    const denied = await created(
      {
        name: 'deny big',
        priority: 1,
        effect: 'deny',
        condition: 'params.amount > 1000',
        target: { capabilities: ['billing:*'] },
        message: 'too big',
      },
      as,
    );
    await created({ name: 'disabled', priority: 0, effect: 'deny', enabled: false }, as);

    const active = await policies.active(own.orgId);
    expect(active.map((p) => p.id)).toEqual([denied, limited]);
    expect(active[0]).toMatchObject({
      name: 'deny big',
      version: 1,
      mode: 'enforce',
      effect: 'deny',
      svcIds: null,
      capabilities: ['billing:*'],
      rateLimit: null,
      message: 'too big',
    });
    expect(active[1]).toMatchObject({
      svcIds: ['agent-a'],
      capabilities: null,
      condition: null,
      rateLimit: { limit: 3, windowSeconds: 60, per: 'api_key' },
    });
    expect(runCondition(active[0].condition!, facts())).toEqual({ matched: true, error: null });
    expect(runCondition(active[0].condition!, facts({ params: { amount: 5 } }))).toEqual({
      matched: false,
      error: null,
    });

    // A write empties the cache at once in the writing process.
    expect((await remove(limited, as)).status).toBe(204);
    expect((await policies.active(own.orgId)).map((p) => p.id)).toEqual([denied]);
  });

  test('a reload after an unrelated change does not compile the conditions again; a new version does', async () => {
    const own = await signUp(t, 'pol-compile');
    const as = { token: own.adminToken };
    const policies = t.app.services.policies;
    const id = await created({ name: 'cond', effect: 'deny', condition: "agent.team == 'finance'" }, as);
    const [before] = await policies.active(own.orgId);
    const renamed = await t.request('PATCH', `/api/v1/orgs/${own.orgId}`, { ...as, body: { name: 'Renamed org' } });
    expect(renamed.status).toBe(200);
    const [reloaded] = await policies.active(own.orgId);
    expect(reloaded).not.toBe(before);
    expect(reloaded.condition).toBe(before.condition);

    expect((await replace(id, { name: 'cond', effect: 'deny', condition: "agent.team == 'ops'" }, as)).status).toBe(
      200,
    );
    const [replaced] = await policies.active(own.orgId);
    expect(replaced.version).toBe(2);
    expect(replaced.condition).not.toBe(before.condition);
    expect(runCondition(replaced.condition!, facts())).toEqual({ matched: false, error: null });
  });

  test('a stored condition that no longer compiles fails closed: it matches, with the reason', async () => {
    const own = await signUp(t, 'pol-broken');
    await t.database.db.sql.query(
      `INSERT INTO policies (id, org_id, name, mode, priority, effect, target, condition, created_by, updated_by, updated_at)
       VALUES ($1, $2::uuid, 'broken', 'enforce', 1, 'deny', '{}'::jsonb, 'params.amount >', 'test', 'test', now())`,
      [`pol_broken_${own.orgId}`, own.orgId],
    );
    const [broken] = await t.app.services.policies.active(own.orgId);
    expect(broken.condition).not.toBeNull();
    expect(runCondition(broken.condition!, facts())).toEqual({
      matched: true,
      error: expect.stringMatching(/does not compile/),
    });
  });
});
