/**
 * Agent manifests over HTTP, on the real app and a real database: registration, validation and its
 * rules one by one, the manifest hash, reads, the list and its paging, by-svc, every row of the
 * lifecycle transition table, history, org isolation, the audit trail, the database's own
 * one-current-manifest guarantee, and who may do what.
 */
import { createHash, randomBytes, randomUUID } from 'node:crypto';
import canonicalizeModule from 'canonicalize';
import { startTestApp, type TestApp, type TestResponse } from '../../support/app.js';
import {
  addUser,
  createKey,
  createManifest,
  manifestPayload,
  signUp,
  type OrgFixture,
} from '../../support/fixtures.js';

// CommonJS package with `export default`-style typings that NodeNext resolution misreads.
const canonicalize = canonicalizeModule as unknown as (value: unknown) => string | undefined;

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

type Json = Record<string, any>;
type State = 'pending' | 'active' | 'suspended' | 'revoked' | 'rejected' | 'superseded';
type Action = 'approve' | 'reject' | 'suspend' | 'reactivate' | 'revoke';

const ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;
const HASH = /^sha256:[0-9a-f]{64}$/;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

const unique = () => randomBytes(4).toString('hex');
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const clone = <T>(value: T): T => structuredClone(value);

/** What the test expects the hash to be, computed without the service's code. */
const independentHash = (value: unknown) => {
  const text = canonicalize(value);
  if (text === undefined) throw new Error('cannot canonicalize');
  return `sha256:${createHash('sha256').update(text, 'utf8').digest('hex')}`;
};

const base = (org: OrgFixture) => `/api/v1/orgs/${org.orgId}/manifests`;

interface Caller {
  token?: string;
  apiKey?: string;
}
const as = (org: OrgFixture, caller?: Caller) => (caller ? caller : { token: org.adminToken });

const register = (org: OrgFixture, payload: unknown, caller?: Caller) =>
  t.request('POST', base(org), { ...as(org, caller), body: payload });
const validate = (org: OrgFixture, payload: unknown, caller?: Caller) =>
  t.request('POST', `${base(org)}/validate`, { ...as(org, caller), body: payload });
const read = (org: OrgFixture, id: string, caller?: Caller) => t.request('GET', `${base(org)}/${id}`, as(org, caller));
const history = (org: OrgFixture, id: string, caller?: Caller) =>
  t.request('GET', `${base(org)}/${id}/history`, as(org, caller));
const list = (org: OrgFixture, query = '', caller?: Caller) =>
  t.request('GET', `${base(org)}${query ? `?${query}` : ''}`, as(org, caller));
const bySvc = (org: OrgFixture, svcId: string, caller?: Caller) =>
  t.request('GET', `${base(org)}/by-svc/${svcId}`, as(org, caller));
const act = (org: OrgFixture, id: string, action: Action, body?: unknown, caller?: Caller) =>
  t.request('POST', `${base(org)}/${id}/${action}`, { ...as(org, caller), body });

const fields = (problems: { field: string }[]) => problems.map((p) => p.field);

function expectValidationError(response: TestResponse, expectedFields: string[]) {
  expect(response.status).toBe(422);
  expect(response.body).toEqual({
    error: {
      code: 'VALIDATION_ERROR',
      message: expect.any(String),
      details: { errors: expectedFields.map((field) => ({ field, message: expect.any(String) })) },
    },
  });
}

/** The smallest payload that passes validation (docs/decisions/0016-manifests.md). */
const minimal = (svcId = `agent-${unique()}`, requested = ['billing:read']) => ({
  version: '1.0',
  agent: { id: svcId, name: 'Minimal agent', version: '0.1.0' },
  capabilities: { requested },
});

/** A payload of agent version `agentVersion` for `svcId` (same capabilities as manifestPayload). */
const versionOf = (svcId: string, agentVersion: string, extra: Json = {}): Json =>
  manifestPayload({
    svcId,
    agent: { id: svcId, name: 'Test agent', version: agentVersion, team: 'platform' },
    ...extra,
  });

async function ok(response: Promise<TestResponse>, status = 200): Promise<Json> {
  const r = await response;
  if (r.status !== status) throw new Error(`expected ${status}, got ${r.status}: ${r.text}`);
  return r.body;
}

/** A manifest in any of the six states; returns its id and agent id. */
async function manifestIn(org: OrgFixture, state: State): Promise<{ id: string; svcId: string }> {
  if (state === 'pending' || state === 'active' || state === 'suspended') {
    const created = await createManifest(t, org, state);
    return { id: created.manifestId, svcId: created.svcId };
  }
  if (state === 'revoked' || state === 'rejected') {
    const created = await createManifest(t, org, 'pending');
    const done = await ok(act(org, created.manifestId, state === 'revoked' ? 'revoke' : 'reject', { reason: 'setup' }));
    expect(done.status).toBe(state);
    return { id: created.manifestId, svcId: created.svcId };
  }
  const svcId = `agent-${unique()}`;
  const old = await createManifest(t, org, 'active', versionOf(svcId, '1.0.0'));
  const next = await ok(register(org, versionOf(svcId, '2.0.0')), 201);
  await ok(act(org, next.manifest_id, 'approve', {}));
  return { id: old.manifestId, svcId };
}

async function dbRows<T = Json>(text: string, params: unknown[]): Promise<T[]> {
  return t.database.db.sql.query<T>(text, params);
}

const asObject = (value: unknown): Json => (typeof value === 'string' ? JSON.parse(value) : (value as Json));

function containsNull(value: unknown): boolean {
  if (value === null) return true;
  if (Array.isArray(value)) return value.some(containsNull);
  if (typeof value === 'object') return Object.values(value as object).some(containsNull);
  return false;
}

// ---------------------------------------------------------------------------------------------

describe('register', () => {
  let org: OrgFixture;
  beforeAll(async () => {
    org = await signUp(t, 'reg');
  });

  test('201 pending with empty approved capabilities, a sha256 hash, svc_id = agent.id and the creator', async () => {
    const svcId = `billing-${unique()}`;
    const payload = {
      version: '1.0',
      agent: {
        id: svcId,
        name: 'Billing agent',
        version: '1.2.0',
        description: 'Pays invoices',
        organization: 'Acme',
        team: 'finance',
      },
      capabilities: { requested: ['billing:read', 'billing:write', 'email:send'] },
      constraints: { max_actions_per_hour: 10, max_actions_per_day: 100, require_human_approval: ['billing:write'] },
      metadata: { contact: 'ops@acme.example', documentation: 'https://docs.acme.example/billing' },
    };
    const created = await register(org, payload);
    expect(created.status).toBe(201);
    expect(created.body).toMatchObject({
      manifest_id: expect.stringMatching(UUID),
      svc_id: svcId,
      version: '1.0',
      status: 'pending',
      manifest_hash: expect.stringMatching(HASH),
      agent: payload.agent,
      capabilities: { requested: payload.capabilities.requested, approved: [] },
      constraints: payload.constraints,
      metadata: payload.metadata,
      created_by: org.adminEmail,
      created_at: expect.stringMatching(ISO),
      approved_by: null,
      approved_at: null,
    });
    expect(created.body.manifest_hash).toBe(independentHash(payload));
    // What was returned is what is stored.
    const again = await read(org, created.body.manifest_id);
    expect(again.status).toBe(200);
    expect(again.body).toEqual(created.body);
  });

  test('absent optional blocks stay absent in the stored document (metadata: null, no constraints)', async () => {
    const payload = { ...minimal(), metadata: null };
    const created = await register(org, payload);
    expect(created.status).toBe(201);
    const [row] = await dbRows<{ document: unknown }>('SELECT document FROM manifests WHERE id = $1', [
      created.body.manifest_id,
    ]);
    const document = asObject(row.document);
    expect(document).not.toHaveProperty('metadata');
    expect(document).not.toHaveProperty('constraints');
    expect(containsNull(document)).toBe(false);
    expect(document).toEqual(minimal(payload.agent.id));
    // The hash covers the document as stored, so anyone can check it from the stored document.
    expect(created.body.manifest_hash).toBe(independentHash(document));
    // The API shows the absent blocks as null.
    expect(created.body.constraints).toBeNull();
    expect(created.body.metadata).toBeNull();
  });

  test('nested nulls are dropped too, and an empty capabilities.approved is accepted and not stored', async () => {
    const svcId = `agent-${unique()}`;
    const payload = {
      ...minimal(svcId),
      agent: { id: svcId, name: 'N', version: '1', team: null, description: null },
      capabilities: { requested: ['billing:read'], approved: [] },
      constraints: { max_actions_per_hour: 5, max_actions_per_day: 10, require_human_approval: null },
    };
    const created = await register(org, payload);
    expect(created.status).toBe(201);
    expect(created.body.capabilities).toEqual({ requested: ['billing:read'], approved: [] });
    const [row] = await dbRows<{ document: unknown }>('SELECT document FROM manifests WHERE id = $1', [
      created.body.manifest_id,
    ]);
    const document = asObject(row.document);
    expect(containsNull(document)).toBe(false);
    expect(document).toEqual({
      version: '1.0',
      agent: { id: svcId, name: 'N', version: '1' },
      capabilities: { requested: ['billing:read'] },
      constraints: { max_actions_per_hour: 5, max_actions_per_day: 10 },
    });
  });

  test('an invalid payload is 422 VALIDATION_ERROR listing every problem with a dotted path; nothing is stored', async () => {
    const svcId = 'Bad_Id';
    const payload = {
      version: '1.0',
      agent: { id: svcId, name: 'Bad', version: '1' },
      capabilities: { requested: ['billing', 'billing:read'] },
      constraints: { max_actions_per_hour: 0, max_actions_per_day: 10 },
    };
    const response = await register(org, payload);
    expectValidationError(response, ['agent.id', 'capabilities.requested[0]', 'constraints.max_actions_per_hour']);
    const rows = await dbRows('SELECT id FROM manifests WHERE org_id = $1 AND svc_id = $2', [org.orgId, svcId]);
    expect(rows).toHaveLength(0);
  });

  test('a second pending manifest for the same agent id is 409 CONFLICT', async () => {
    const svcId = `agent-${unique()}`;
    expect((await register(org, versionOf(svcId, '1.0.0'))).status).toBe(201);
    const second = await register(org, versionOf(svcId, '1.0.1'));
    expect(second.status).toBe(409);
    expect(second.body).toEqual({
      error: { code: 'CONFLICT', message: expect.stringContaining(svcId), details: { svc_id: svcId } },
    });
    const rows = await dbRows('SELECT id FROM manifests WHERE org_id = $1 AND svc_id = $2', [org.orgId, svcId]);
    expect(rows).toHaveLength(1);
  });

  test('a new version while one is active is 201 pending and the active one stays active', async () => {
    const svcId = `agent-${unique()}`;
    const v1 = await createManifest(t, org, 'active', versionOf(svcId, '1.0.0'));
    const v2 = await register(org, versionOf(svcId, '2.0.0'));
    expect(v2.status).toBe(201);
    expect(v2.body).toMatchObject({ svc_id: svcId, status: 'pending', agent: { version: '2.0.0' } });
    expect(v2.body.manifest_id).not.toBe(v1.manifestId);
    expect((await read(org, v1.manifestId)).body).toMatchObject({ status: 'active', agent: { version: '1.0.0' } });
    // A third one, while v2 is still pending, is refused.
    const v3 = await register(org, versionOf(svcId, '3.0.0'));
    expect(v3.status).toBe(409);
    expect(v3.body.error.code).toBe('CONFLICT');
  });

  test('the same agent id may be registered again once the previous manifest is rejected or revoked', async () => {
    const rejected = await manifestIn(org, 'rejected');
    const again = await register(org, versionOf(rejected.svcId, '1.0.1'));
    expect(again.status).toBe(201);
    expect(again.body.status).toBe('pending');
    const revoked = await manifestIn(org, 'revoked');
    expect((await register(org, versionOf(revoked.svcId, '1.0.1'))).status).toBe(201);
  });
});

// ---------------------------------------------------------------------------------------------

describe('validate', () => {
  let org: OrgFixture;
  beforeAll(async () => {
    org = await signUp(t, 'val');
  });

  /** Valid and without warnings: both limits given. */
  const valid = (svcId = `agent-${unique()}`): Json => ({
    version: '1.0',
    agent: { id: svcId, name: 'Valid agent', version: '1.0.0', team: 'platform' },
    capabilities: { requested: ['billing:read', 'billing:write', 'email:send'] },
    constraints: { max_actions_per_hour: 10, max_actions_per_day: 100, require_human_approval: [] },
    metadata: { contact: 'ops@example.com', documentation: 'https://docs.example.com' },
  });

  test('a valid payload: 200 {valid: true, manifest_hash, warnings}', async () => {
    const payload = valid();
    payload.constraints.require_human_approval = ['billing:write', 'email:send'];
    const response = await validate(org, payload);
    expect(response.status).toBe(200);
    expect(response.body).toEqual({
      valid: true,
      manifest_hash: independentHash(payload),
      warnings: [],
      errors: [],
    });
  });

  test('an invalid payload: 200 {valid: false, errors, warnings}', async () => {
    const response = await validate(org, { version: '1.0', agent: { id: 'x_y', name: 'A', version: '1' } });
    expect(response.status).toBe(200);
    expect(response.body).toEqual({
      valid: false,
      manifest_hash: null,
      errors: [
        { field: 'agent.id', message: expect.any(String) },
        { field: 'capabilities', message: expect.any(String) },
      ],
      warnings: [{ field: 'constraints', message: expect.any(String) }],
    });
  });

  test('registers nothing, valid or not', async () => {
    const fresh = await signUp(t, 'val-empty');
    const before = await list(fresh);
    expect(before.body.total).toBe(0);
    expect((await validate(fresh, valid())).body.valid).toBe(true);
    expect((await validate(fresh, minimal())).body.valid).toBe(true);
    expect((await validate(fresh, { version: '1.0' })).body.valid).toBe(false);
    const after = await list(fresh);
    expect(after.status).toBe(200);
    expect(after.body).toEqual({ items: [], total: 0 });
    const rows = await dbRows('SELECT id FROM manifests WHERE org_id = $1', [fresh.orgId]);
    expect(rows).toHaveLength(0);
    const events = await dbRows('SELECT id FROM manifest_events WHERE org_id = $1', [fresh.orgId]);
    expect(events).toHaveLength(0);
  });

  describe('warnings', () => {
    test('no constraints: a warning naming the defaults 100 and 1000', async () => {
      const response = await validate(org, minimal());
      expect(response.body.valid).toBe(true);
      expect(response.body.warnings).toEqual([{ field: 'constraints', message: expect.any(String) }]);
      expect(response.body.warnings[0].message).toMatch(/\b100\b/);
      expect(response.body.warnings[0].message).toMatch(/\b1000\b/);
    });

    test('only the hourly limit: a warning that the daily default 1000 applies', async () => {
      const payload = { ...minimal(), constraints: { max_actions_per_hour: 10 } };
      const response = await validate(org, payload);
      expect(response.body.valid).toBe(true);
      expect(response.body.warnings).toEqual([
        { field: 'constraints.max_actions_per_day', message: expect.stringMatching(/\b1000\b/) },
      ]);
    });

    test('only the daily limit: a warning that the hourly default 100 applies', async () => {
      const payload = { ...minimal(), constraints: { max_actions_per_day: 500 } };
      const response = await validate(org, payload);
      expect(response.body.valid).toBe(true);
      expect(response.body.warnings).toEqual([
        { field: 'constraints.max_actions_per_hour', message: expect.stringMatching(/\b100\b/) },
      ]);
    });

    test('unknown top-level and nested fields are warnings, the payload stays valid, and they are stored', async () => {
      const payload = valid();
      payload.extra = true;
      payload.agent.color = 'blue';
      payload.capabilities.wishlist = ['x:y'];
      payload.constraints.burst = 3;
      payload.metadata.slack = '#ops';
      const response = await validate(org, payload);
      expect(response.status).toBe(200);
      expect(response.body.valid).toBe(true);
      expect(response.body.manifest_hash).toBe(independentHash(payload));
      expect(fields(response.body.warnings).sort()).toEqual(
        ['extra', 'agent.color', 'capabilities.wishlist', 'constraints.burst', 'metadata.slack'].sort(),
      );
      const created = await register(org, payload);
      expect(created.status).toBe(201);
      const [row] = await dbRows<{ document: unknown }>('SELECT document FROM manifests WHERE id = $1', [
        created.body.manifest_id,
      ]);
      expect(asObject(row.document)).toMatchObject({ extra: true, agent: { color: 'blue' } });
    });
  });

  /** Each rule alone: the payload breaks exactly one rule and the one error names exactly this field. */
  const invalid: [string, (p: Json) => void, string][] = [
    ['agent.id with uppercase', (p) => (p.agent.id = 'Billing-agent'), 'agent.id'],
    ['agent.id with an underscore', (p) => (p.agent.id = 'billing_agent'), 'agent.id'],
    ['agent.id with a leading hyphen', (p) => (p.agent.id = '-billing'), 'agent.id'],
    ['agent.id with a trailing hyphen', (p) => (p.agent.id = 'billing-'), 'agent.id'],
    ['agent.id of 2 characters', (p) => (p.agent.id = 'ab'), 'agent.id'],
    ['agent.id of 65 characters', (p) => (p.agent.id = 'a'.repeat(65)), 'agent.id'],
    ['agent.id with a space', (p) => (p.agent.id = 'billing agent'), 'agent.id'],
    ['agent.id empty', (p) => (p.agent.id = ''), 'agent.id'],
    ['agent.id not a string', (p) => (p.agent.id = 42), 'agent.id'],
    ['agent.id missing', (p) => delete p.agent.id, 'agent.id'],
    ['agent.name missing', (p) => delete p.agent.name, 'agent.name'],
    ['agent.name blank', (p) => (p.agent.name = '   '), 'agent.name'],
    ['agent.version missing', (p) => delete p.agent.version, 'agent.version'],
    ['agent.team not a string', (p) => (p.agent.team = 5), 'agent.team'],
    ['agent not an object', (p) => (p.agent = 'billing'), 'agent'],
    ['agent missing', (p) => delete p.agent, 'agent'],
    ['version missing', (p) => delete p.version, 'version'],
    ['version not a string', (p) => (p.version = 1), 'version'],
    ['capabilities missing', (p) => delete p.capabilities, 'capabilities'],
    ['capabilities.requested missing', (p) => delete p.capabilities.requested, 'capabilities.requested'],
    ['capabilities.requested empty', (p) => (p.capabilities.requested = []), 'capabilities.requested'],
    [
      'capabilities.requested not an array',
      (p) => (p.capabilities.requested = 'billing:read'),
      'capabilities.requested',
    ],
    [
      'a capability without an action ("billing")',
      (p) => (p.capabilities.requested[0] = 'billing'),
      'capabilities.requested[0]',
    ],
    [
      'a capability in uppercase ("Billing:read")',
      (p) => (p.capabilities.requested[1] = 'Billing:read'),
      'capabilities.requested[1]',
    ],
    [
      'a capability with three parts ("a:b:c")',
      (p) => (p.capabilities.requested[2] = 'a:b:c'),
      'capabilities.requested[2]',
    ],
    ['a capability that is not a string', (p) => (p.capabilities.requested[2] = 7), 'capabilities.requested[2]'],
    [
      'a duplicate capability',
      (p) => (p.capabilities.requested = ['billing:read', 'billing:read']),
      'capabilities.requested[1]',
    ],
    [
      'capabilities.approved non-empty at registration',
      (p) => (p.capabilities.approved = ['billing:read']),
      'capabilities.approved',
    ],
    [
      'require_human_approval not a subset of requested',
      (p) => (p.constraints.require_human_approval = ['payments:refund']),
      'constraints.require_human_approval[0]',
    ],
    [
      'require_human_approval with a malformed capability',
      (p) => (p.constraints.require_human_approval = ['billing:write', 'nope']),
      'constraints.require_human_approval[1]',
    ],
    ['max_actions_per_hour 0', (p) => (p.constraints.max_actions_per_hour = 0), 'constraints.max_actions_per_hour'],
    ['max_actions_per_hour -1', (p) => (p.constraints.max_actions_per_hour = -1), 'constraints.max_actions_per_hour'],
    ['max_actions_per_hour 1.5', (p) => (p.constraints.max_actions_per_hour = 1.5), 'constraints.max_actions_per_hour'],
    [
      'max_actions_per_hour "10"',
      (p) => (p.constraints.max_actions_per_hour = '10'),
      'constraints.max_actions_per_hour',
    ],
    ['max_actions_per_day 0', (p) => (p.constraints.max_actions_per_day = 0), 'constraints.max_actions_per_day'],
    ['max_actions_per_day -1', (p) => (p.constraints.max_actions_per_day = -1), 'constraints.max_actions_per_day'],
    ['max_actions_per_day 1.5', (p) => (p.constraints.max_actions_per_day = 100.5), 'constraints.max_actions_per_day'],
    ['max_actions_per_day "10"', (p) => (p.constraints.max_actions_per_day = '100'), 'constraints.max_actions_per_day'],
    [
      'hourly above daily (50 > 10)',
      (p) => {
        p.constraints.max_actions_per_hour = 50;
        p.constraints.max_actions_per_day = 10;
      },
      'constraints.max_actions_per_hour',
    ],
    ['constraints not an object', (p) => (p.constraints = [1]), 'constraints'],
    ['metadata not an object', (p) => (p.metadata = 'ops'), 'metadata'],
    ['metadata.contact not a string', (p) => (p.metadata.contact = 5), 'metadata.contact'],
  ];

  test.each(invalid)('%s: validate reports it and register refuses it', async (_name, breakIt, field) => {
    const payload = valid();
    breakIt(payload);
    const checked = await validate(org, payload);
    expect(checked.status).toBe(200);
    expect(checked.body).toEqual({
      valid: false,
      manifest_hash: null,
      errors: expect.arrayContaining([{ field, message: expect.any(String) }]),
      warnings: expect.any(Array),
    });
    // Only this field is named (an empty agent.id gets two messages, both on agent.id).
    expect([...new Set(fields(checked.body.errors))]).toEqual([field]);
    const refused = await register(org, payload);
    expect(refused.status).toBe(422);
    expect(refused.body.error.code).toBe('VALIDATION_ERROR');
    expect(refused.body.error.details.errors).toEqual(checked.body.errors);
  });

  test.each([
    ['a', 'one character'],
    ['a1', 'two characters'],
    ['a-b', 'three characters with a hyphen'],
    ['0agent-9', 'digits at both ends'],
    ['a'.repeat(64), '64 characters'],
  ])('agent.id %j (%s)', async (id, _what) => {
    const payload = valid(id);
    const checked = await validate(org, payload);
    if (id.length === 2) {
      // The decided pattern ^[a-z0-9]([a-z0-9-]{1,62}[a-z0-9])?$ allows 1 or 3..64 characters.
      expect(checked.body.valid).toBe(false);
      expect(fields(checked.body.errors)).toEqual(['agent.id']);
      return;
    }
    expect(checked.body).toMatchObject({ valid: true, errors: [] });
    const created = await register(org, payload);
    expect(created.status).toBe(201);
    expect(created.body.svc_id).toBe(id);
  });

  test.each([['[]'], ['"a manifest"'], ['42'], ['null'], ['true']])(
    'a body that is not an object (%s) is 422 naming `body`',
    async (raw) => {
      expectValidationError(await validate(org, raw), ['body']);
      expectValidationError(await register(org, raw), ['body']);
    },
  );

  test('an empty body is 422 naming `body`, a body that is not JSON is 400 BAD_REQUEST', async () => {
    expectValidationError(await validate(org, ' '), ['body']);
    const broken = await validate(org, '{"version": ');
    expect(broken.status).toBe(400);
    expect(broken.body.error.code).toBe('BAD_REQUEST');
  });

  test('several problems at once are all reported', async () => {
    const payload = valid('Nope');
    payload.capabilities.requested = ['billing:read', 'billing:read', 'x'];
    payload.constraints = { max_actions_per_hour: 50, max_actions_per_day: 10, require_human_approval: ['email:send'] };
    const checked = await validate(org, payload);
    expect(checked.body.valid).toBe(false);
    expect(fields(checked.body.errors).sort()).toEqual(
      [
        'agent.id',
        'capabilities.requested[1]',
        'capabilities.requested[2]',
        'constraints.max_actions_per_hour',
        'constraints.require_human_approval[0]',
      ].sort(),
    );
  });
});

// ---------------------------------------------------------------------------------------------

describe('manifest hash', () => {
  let orgA: OrgFixture;
  let orgB: OrgFixture;
  beforeAll(async () => {
    orgA = await signUp(t, 'hash-a');
    orgB = await signUp(t, 'hash-b');
  });

  const svcId = `hash-${unique()}`;
  const compact = JSON.stringify({
    version: '1.0',
    agent: { id: svcId, name: 'Hash agent', version: '1.0.0', team: 'platform' },
    capabilities: { requested: ['billing:read', 'email:send'] },
    constraints: { max_actions_per_hour: 10, max_actions_per_day: 100 },
  });
  // Same content: keys in another order, other whitespace, an escaped character, 1e1 for 10.
  const reordered = `{
    "constraints" : { "max_actions_per_day" : 100 ,
                      "max_actions_per_hour" : 1e1 },
    "capabilities": {"requested": [ "billing:read",  "email:send" ]},
    "agent": {  "team": "platform", "version": "1.0.0", "name": "H\\u0061sh agent", "id": "${svcId}" },
    "version": "1.0"
  }`;

  test('key order and whitespace do not change the hash; it is sha256 of the RFC 8785 form', async () => {
    expect(JSON.parse(reordered)).toEqual(JSON.parse(compact));
    const expected = independentHash(JSON.parse(compact));
    const a = await validate(orgA, compact);
    const b = await validate(orgA, reordered);
    expect(a.status).toBe(200);
    expect(b.status).toBe(200);
    expect(a.body.valid).toBe(true);
    expect(a.body.manifest_hash).toBe(expected);
    expect(b.body.manifest_hash).toBe(expected);

    const registeredA = await register(orgA, compact);
    const registeredB = await register(orgB, reordered);
    expect(registeredA.status).toBe(201);
    expect(registeredB.status).toBe(201);
    expect(registeredA.body.manifest_hash).toBe(expected);
    expect(registeredB.body.manifest_hash).toBe(expected);
    const [row] = await dbRows<{ manifest_hash: string }>('SELECT manifest_hash FROM manifests WHERE id = $1', [
      registeredB.body.manifest_id,
    ]);
    expect(row.manifest_hash).toBe(expected);
  });

  test('a changed value changes the hash', async () => {
    const original = JSON.parse(compact);
    const changed = clone(original);
    changed.agent.version = '1.0.1';
    const limits = clone(original);
    limits.constraints.max_actions_per_day = 101;
    const hashes = await Promise.all(
      [original, changed, limits].map(async (p) => (await validate(orgA, p)).body.manifest_hash),
    );
    expect(new Set(hashes).size).toBe(3);
    expect(hashes[1]).toBe(independentHash(changed));
    expect(hashes[2]).toBe(independentHash(limits));
  });
});

// ---------------------------------------------------------------------------------------------

describe('read and list', () => {
  let org: OrgFixture;
  beforeAll(async () => {
    org = await signUp(t, 'read');
  });

  test('GET one returns the full manifest, with approval and then suspension details', async () => {
    const svcId = `agent-${unique()}`;
    const payload = versionOf(svcId, '1.4.0', {
      metadata: { contact: 'ops@example.com', documentation: 'https://docs.example.com/agent' },
    });
    payload.agent = { ...payload.agent, description: 'Reads invoices', organization: 'Acme' } as typeof payload.agent;
    const created = await ok(register(org, payload), 201);
    const id = created.manifest_id;

    const pending = await read(org, id);
    expect(pending.status).toBe(200);
    expect(pending.body).toMatchObject({
      manifest_id: id,
      svc_id: svcId,
      version: '1.0',
      status: 'pending',
      manifest_hash: created.manifest_hash,
      agent: payload.agent,
      capabilities: { requested: payload.capabilities.requested, approved: [] },
      constraints: { max_actions_per_hour: 10, max_actions_per_day: 100 },
      metadata: payload.metadata,
      approved_by: null,
      approved_at: null,
      suspended_by: null,
      suspended_at: null,
      reason: null,
      created_at: expect.stringMatching(ISO),
    });

    await ok(act(org, id, 'approve', { approved_capabilities: ['billing:read', 'email:send'], notes: 'looks fine' }));
    const active = (await read(org, id)).body;
    expect(active).toMatchObject({
      status: 'active',
      capabilities: { requested: payload.capabilities.requested, approved: ['billing:read', 'email:send'] },
      approved_by: org.adminEmail,
      approved_at: expect.stringMatching(ISO),
      notes: 'looks fine',
      suspended_by: null,
    });
    expect(Date.parse(active.approved_at)).toBeGreaterThanOrEqual(Date.parse(active.created_at));

    await ok(act(org, id, 'suspend', { reason: 'incident 42' }));
    const suspended = (await read(org, id)).body;
    expect(suspended).toMatchObject({
      status: 'suspended',
      approved_by: org.adminEmail,
      approved_at: active.approved_at,
      suspended_by: org.adminEmail,
      suspended_at: expect.stringMatching(ISO),
      reason: 'incident 42',
      capabilities: { approved: ['billing:read', 'email:send'] },
    });
  });

  test('an unknown manifest id is 404 NOT_FOUND, a non-UUID id too (not 500)', async () => {
    for (const id of [randomUUID(), 'not-a-uuid', '12345', "x'; DROP TABLE manifests; --"]) {
      for (const response of [
        await read(org, encodeURIComponent(id)),
        await history(org, encodeURIComponent(id)),
        await act(org, encodeURIComponent(id), 'approve', {}),
      ]) {
        expect(response.status).toBe(404);
        expect(response.body).toEqual({ error: { code: 'NOT_FOUND', message: expect.any(String), details: {} } });
      }
    }
  });

  test('list items have exactly the summary keys; newest first; total', async () => {
    const fresh = await signUp(t, 'list-shape');
    const first = await createManifest(t, fresh, 'active', manifestPayload({ capabilities: ['a:b', 'c:d'] }));
    await sleep(5);
    const second = await createManifest(t, fresh, 'pending');
    await sleep(5);
    const third = await createManifest(t, fresh, 'pending', minimal());
    const response = await list(fresh);
    expect(response.status).toBe(200);
    expect(response.body.total).toBe(3);
    expect(response.body.items.map((i: Json) => i.manifest_id)).toEqual([
      third.manifestId,
      second.manifestId,
      first.manifestId,
    ]);
    for (const item of response.body.items) {
      expect(Object.keys(item).sort()).toEqual(
        ['manifest_id', 'svc_id', 'status', 'agent', 'capabilities_count', 'created_at', 'approved_at'].sort(),
      );
      expect(Object.keys(item.agent)).toEqual(expect.arrayContaining(['name', 'version', 'team']));
      expect(item.created_at).toMatch(ISO);
    }
    const [newest, middle, oldest] = response.body.items;
    expect(newest).toMatchObject({ svc_id: third.svcId, status: 'pending', capabilities_count: 1, approved_at: null });
    expect(newest.agent).toMatchObject({ name: 'Minimal agent', version: '0.1.0', team: null });
    expect(middle).toMatchObject({ status: 'pending', capabilities_count: 3, agent: { team: 'platform' } });
    expect(oldest).toMatchObject({
      svc_id: first.svcId,
      status: 'active',
      capabilities_count: 2,
      approved_at: expect.stringMatching(ISO),
      agent: { name: 'Test agent', version: '1.0.0', team: 'platform' },
    });
  });

  test('filters: status, team, both; total counts the filtered set', async () => {
    const fresh = await signUp(t, 'list-filter');
    const withTeam = (team: string | undefined) => {
      const p = manifestPayload();
      if (team) p.agent.team = team;
      else delete (p.agent as Partial<typeof p.agent>).team;
      return p;
    };
    const alphaActive = await createManifest(t, fresh, 'active', withTeam('alpha'));
    const alphaPending = await createManifest(t, fresh, 'pending', withTeam('alpha'));
    const betaPending = await createManifest(t, fresh, 'pending', withTeam('beta'));
    const betaSuspended = await createManifest(t, fresh, 'suspended', withTeam('beta'));
    const noTeam = await createManifest(t, fresh, 'pending', withTeam(undefined));
    const rejected = await createManifest(t, fresh, 'pending', withTeam('beta'));
    await ok(act(fresh, rejected.manifestId, 'reject', { reason: 'no' }));

    const ids = async (query: string) => {
      const response = await list(fresh, query);
      expect(response.status).toBe(200);
      expect(response.body.total).toBe(response.body.items.length);
      return (response.body.items as Json[]).map((i) => i.manifest_id).sort();
    };
    const sorted = (...xs: { manifestId: string }[]) => xs.map((x) => x.manifestId).sort();
    expect(await ids('')).toEqual(sorted(alphaActive, alphaPending, betaPending, betaSuspended, noTeam, rejected));
    expect(await ids('status=pending')).toEqual(sorted(alphaPending, betaPending, noTeam));
    expect(await ids('status=active')).toEqual(sorted(alphaActive));
    expect(await ids('status=suspended')).toEqual(sorted(betaSuspended));
    expect(await ids('status=rejected')).toEqual(sorted(rejected));
    expect(await ids('status=revoked')).toEqual([]);
    expect(await ids('team=alpha')).toEqual(sorted(alphaActive, alphaPending));
    expect(await ids('team=beta')).toEqual(sorted(betaPending, betaSuspended, rejected));
    expect(await ids('status=pending&team=beta')).toEqual(sorted(betaPending));
    expect(await ids('team=nobody')).toEqual([]);
    for (const item of (await list(fresh, 'team=beta')).body.items) expect(item.agent.team).toBe('beta');

    const bogus = await list(fresh, 'status=bogus');
    expect(bogus.status).toBe(422);
    expect(bogus.body.error.code).toBe('VALIDATION_ERROR');
    expect(fields(bogus.body.error.details.errors)).toEqual(['status']);
  });

  describe('pagination', () => {
    let paged: OrgFixture;
    let all: Json[];
    const registered: Json[] = [];
    const COUNT = 55;
    beforeAll(async () => {
      paged = await signUp(t, 'paged');
      for (let i = 0; i < COUNT; i++) {
        const svcId = `paged-${String(i).padStart(2, '0')}-${unique()}`;
        const response = await register(paged, minimal(svcId));
        if (response.status !== 201) throw new Error(`register ${i}: ${response.status} ${response.text}`);
        registered.push(response.body);
      }
      const response = await list(paged, 'limit=200');
      expect(response.status).toBe(200);
      all = response.body.items;
    });

    test('limit=200 is accepted and returns all of them, newest first', () => {
      expect(all).toHaveLength(COUNT);
      expect(new Set(all.map((i) => i.svc_id)).size).toBe(COUNT);
      for (let i = 1; i < all.length; i++) {
        expect(Date.parse(all[i - 1].created_at)).toBeGreaterThanOrEqual(Date.parse(all[i].created_at));
      }
      // Registered one after the other: the list is the registration order reversed (up to
      // registrations within the same millisecond, which compare equal).
      expect(all.map((i) => i.created_at)).toEqual([...registered].reverse().map((r) => r.created_at));
      expect(new Set(all.map((i) => i.manifest_id))).toEqual(new Set(registered.map((r) => r.manifest_id)));
      if (registered[COUNT - 1].created_at !== registered[COUNT - 2].created_at) {
        expect(all[0].manifest_id).toBe(registered[COUNT - 1].manifest_id);
      }
    });

    test('the default limit is 50, with the total of all', async () => {
      const response = await list(paged);
      expect(response.status).toBe(200);
      expect(response.body.total).toBe(COUNT);
      expect(response.body.items).toHaveLength(50);
      expect(response.body.items).toEqual(all.slice(0, 50));
    });

    test('limit=2&offset=2 gives items 3 and 4 of the newest-first order', async () => {
      const response = await list(paged, 'limit=2&offset=2');
      expect(response.status).toBe(200);
      expect(response.body).toEqual({ items: all.slice(2, 4), total: COUNT });
    });

    test('the last page is short; an offset beyond the total gives no items and the right total', async () => {
      expect((await list(paged, 'limit=50&offset=50')).body).toEqual({ items: all.slice(50), total: COUNT });
      expect((await list(paged, 'offset=55')).body).toEqual({ items: [], total: COUNT });
      expect((await list(paged, 'offset=1000')).body).toEqual({ items: [], total: COUNT });
    });

    test.each([
      ['limit=201', 'limit'],
      ['limit=0', 'limit'],
      ['limit=-1', 'limit'],
      ['offset=-1', 'offset'],
    ])('%s is 422 naming %s', async (query, field) => {
      expectValidationError(await list(paged, query), [field]);
    });

    test.each([['limit=abc'], ['offset=abc'], ['limit=1.5']])(
      '%s (not an integer) is 422 VALIDATION_ERROR',
      async (query) => {
        const response = await list(paged, query);
        expect(response.status).toBe(422);
        expect(response.body.error.code).toBe('VALIDATION_ERROR');
      },
    );

    // A query-string parameter that is not an integer must be named like every other bad field.
    test.each([
      ['limit=abc', 'limit'],
      ['offset=abc', 'offset'],
      ['limit=1.5', 'limit'],
    ])('%s names the field %s (not `body`)', async (query, field) => {
      expectValidationError(await list(paged, query), [field]);
    });
  });
});

// ---------------------------------------------------------------------------------------------

describe('by-svc', () => {
  let org: OrgFixture;
  beforeAll(async () => {
    org = await signUp(t, 'bysvc');
  });

  test('the active manifest wins over a newer pending one', async () => {
    const svcId = `agent-${unique()}`;
    const active = await createManifest(t, org, 'active', versionOf(svcId, '1.0.0'));
    const pending = await ok(register(org, versionOf(svcId, '2.0.0')), 201);
    const response = await bySvc(org, svcId);
    expect(response.status).toBe(200);
    expect(response.body).toMatchObject({ manifest_id: active.manifestId, svc_id: svcId, status: 'active' });
    expect(response.body.manifest_id).not.toBe(pending.manifest_id);
    expect(response.body).toEqual((await read(org, active.manifestId)).body);
  });

  test('a suspended manifest wins over a newer pending one', async () => {
    const svcId = `agent-${unique()}`;
    const suspended = await createManifest(t, org, 'suspended', versionOf(svcId, '1.0.0'));
    await ok(register(org, versionOf(svcId, '2.0.0')), 201);
    const response = await bySvc(org, svcId);
    expect(response.status).toBe(200);
    expect(response.body).toMatchObject({ manifest_id: suspended.manifestId, status: 'suspended', reason: 'fixture' });
  });

  test('without an active or suspended one, the newest of any status (a revoked and a newer pending → the pending)', async () => {
    const svcId = `agent-${unique()}`;
    const old = await createManifest(t, org, 'pending', versionOf(svcId, '1.0.0'));
    await ok(act(org, old.manifestId, 'revoke', { reason: 'retired' }));
    expect((await bySvc(org, svcId)).body).toMatchObject({ manifest_id: old.manifestId, status: 'revoked' });
    await sleep(5);
    const newer = await ok(register(org, versionOf(svcId, '2.0.0')), 201);
    const response = await bySvc(org, svcId);
    expect(response.status).toBe(200);
    expect(response.body).toMatchObject({
      manifest_id: newer.manifest_id,
      status: 'pending',
      agent: { version: '2.0.0' },
    });
  });

  test('after a new version is approved, by-svc returns it, not the superseded one', async () => {
    const { svcId, id: supersededId } = await manifestIn(org, 'superseded');
    const response = await bySvc(org, svcId);
    expect(response.status).toBe(200);
    expect(response.body.status).toBe('active');
    expect(response.body.manifest_id).not.toBe(supersededId);
    expect(response.body.agent.version).toBe('2.0.0');
  });

  test('an unknown agent id is 404 NOT_FOUND', async () => {
    for (const svcId of [`nobody-${unique()}`, 'UPPER']) {
      const response = await bySvc(org, svcId);
      expect(response.status).toBe(404);
      expect(response.body).toEqual({ error: { code: 'NOT_FOUND', message: expect.any(String), details: {} } });
    }
  });
});

// ---------------------------------------------------------------------------------------------

describe('lifecycle', () => {
  let org: OrgFixture;
  beforeAll(async () => {
    org = await signUp(t, 'life');
  });

  const states: State[] = ['pending', 'active', 'suspended', 'revoked', 'rejected', 'superseded'];
  const actions: Action[] = ['approve', 'reject', 'suspend', 'reactivate', 'revoke'];
  const allowed: Record<Action, { from: State[]; to: State }> = {
    approve: { from: ['pending'], to: 'active' },
    reject: { from: ['pending'], to: 'rejected' },
    suspend: { from: ['active'], to: 'suspended' },
    reactivate: { from: ['suspended'], to: 'active' },
    revoke: { from: ['pending', 'active', 'suspended'], to: 'revoked' },
  };
  const table = states.flatMap((from) =>
    actions.map((action) => {
      const ok = allowed[action].from.includes(from);
      return { from, action, to: allowed[action].to, ok, label: ok ? `200 ${allowed[action].to}` : '409' };
    }),
  );

  test('the table covers all 30 pairs, 7 of them allowed', () => {
    expect(table).toHaveLength(30);
    expect(table.filter((row) => row.ok)).toHaveLength(7);
  });

  test.each(table)('$from + $action → $label', async ({ from, action, to, ok: isAllowed }) => {
    const { id } = await manifestIn(org, from);
    expect((await read(org, id)).body.status).toBe(from);
    const historyBefore = (await history(org, id)).body.items as Json[];
    const body = action === 'approve' || action === 'reactivate' ? {} : { reason: `because ${action}` };
    const response = await act(org, id, action, body);

    if (isAllowed) {
      expect(response.status).toBe(200);
      expect(response.body).toMatchObject({ manifest_id: id, status: to });
      expect((await read(org, id)).body.status).toBe(to);
      const historyAfter = (await history(org, id)).body.items as Json[];
      expect(historyAfter).toHaveLength(historyBefore.length + 1);
      expect(historyAfter[0]).toMatchObject({ manifest_id: id, status: to, changed_by: org.adminEmail });
      if (action === 'reject') {
        expect(response.body).toMatchObject({
          rejected_by: org.adminEmail,
          rejected_at: expect.stringMatching(ISO),
          reason: 'because reject',
        });
      }
      if (action === 'revoke') {
        expect(response.body).toMatchObject({
          revoked_by: org.adminEmail,
          revoked_at: expect.stringMatching(ISO),
          reason: 'because revoke',
        });
      }
      if (action === 'suspend') {
        expect(response.body).toMatchObject({
          suspended_by: org.adminEmail,
          suspended_at: expect.stringMatching(ISO),
          reason: 'because suspend',
        });
      }
      if (action === 'approve')
        expect(response.body.capabilities.approved).toEqual(response.body.capabilities.requested);
    } else {
      expect(response.status).toBe(409);
      expect(response.body).toEqual({
        error: { code: 'INVALID_STATE_TRANSITION', message: expect.any(String), details: { from, to } },
      });
      expect((await read(org, id)).body.status).toBe(from);
      expect((await history(org, id)).body.items).toEqual(historyBefore);
    }
  });

  test('approving a new version supersedes the active one', async () => {
    const svcId = `agent-${unique()}`;
    const v1 = await createManifest(t, org, 'active', versionOf(svcId, '1.0.0'));
    const v2 = await ok(register(org, versionOf(svcId, '2.0.0')), 201);
    expect((await read(org, v1.manifestId)).body.status).toBe('active');
    const approved = await act(org, v2.manifest_id, 'approve', {});
    expect(approved.status).toBe(200);
    expect(approved.body.status).toBe('active');
    const old = (await read(org, v1.manifestId)).body;
    expect(old.status).toBe('superseded');
    // What v1 was approved for is kept as a record.
    expect(old.capabilities.approved).toEqual(old.capabilities.requested);
    const actives = await dbRows('SELECT id FROM manifests WHERE org_id = $1 AND svc_id = $2 AND status = $3', [
      org.orgId,
      svcId,
      'active',
    ]);
    expect(actives).toEqual([{ id: v2.manifest_id }]);
  });

  test('a refused approval of the new version leaves the active one active', async () => {
    const svcId = `agent-${unique()}`;
    const v1 = await createManifest(t, org, 'active', versionOf(svcId, '1.0.0'));
    const v2 = await ok(register(org, versionOf(svcId, '2.0.0')), 201);
    expectValidationError(await act(org, v2.manifest_id, 'approve', { approved_capabilities: ['nope:nope'] }), [
      'approved_capabilities[0]',
    ]);
    expect((await read(org, v1.manifestId)).body.status).toBe('active');
    expect((await read(org, v2.manifest_id)).body.status).toBe('pending');
    // Rejecting the new version does not touch the active one either.
    await ok(act(org, v2.manifest_id, 'reject', { reason: 'not yet' }));
    expect((await read(org, v1.manifestId)).body.status).toBe('active');
    expect((await bySvc(org, svcId)).body.manifest_id).toBe(v1.manifestId);
  });

  test('approving a new version also supersedes a suspended one', async () => {
    const svcId = `agent-${unique()}`;
    const v1 = await createManifest(t, org, 'suspended', versionOf(svcId, '1.0.0'));
    const v2 = await ok(register(org, versionOf(svcId, '2.0.0')), 201);
    await ok(act(org, v2.manifest_id, 'approve', {}));
    expect((await read(org, v1.manifestId)).body.status).toBe('superseded');
    expect((await bySvc(org, svcId)).body.manifest_id).toBe(v2.manifest_id);
  });

  test.each([
    ['reject', 'pending'],
    ['suspend', 'active'],
    ['revoke', 'active'],
  ] as [Action, State][])('%s without a reason is 422 naming reason', async (action, state) => {
    const { id } = await manifestIn(org, state);
    expectValidationError(await act(org, id, action, {}), ['reason']);
    expectValidationError(await act(org, id, action, { notes: 'only notes' }), ['reason']);
    expectValidationError(await act(org, id, action, { reason: '   ' }), ['reason']);
    expectValidationError(await act(org, id, action), ['reason']);
    expect((await read(org, id)).body.status).toBe(state);
  });

  test('reactivate needs no reason, not even a body', async () => {
    const { id } = await manifestIn(org, 'suspended');
    const response = await act(org, id, 'reactivate');
    expect(response.status).toBe(200);
    expect(response.body).toMatchObject({ manifest_id: id, status: 'active' });
    const { id: other } = await manifestIn(org, 'suspended');
    const withNotes = await act(org, other, 'reactivate', { notes: 'incident closed' });
    expect(withNotes.status).toBe(200);
    expect(withNotes.body).toMatchObject({ status: 'active', notes: 'incident closed' });
  });

  describe('approve', () => {
    test('approved_capabilities omitted: all requested are approved; approved_by/at and notes are set', async () => {
      const { id } = await manifestIn(org, 'pending');
      const response = await act(org, id, 'approve', { notes: 'all good' });
      expect(response.status).toBe(200);
      expect(response.body).toMatchObject({
        manifest_id: id,
        svc_id: expect.any(String),
        status: 'active',
        capabilities: {
          requested: ['billing:read', 'billing:write', 'email:send'],
          approved: ['billing:read', 'billing:write', 'email:send'],
        },
        approved_by: org.adminEmail,
        approved_at: expect.stringMatching(ISO),
        notes: 'all good',
      });
    });

    test('a subset is approved as given', async () => {
      const { id } = await manifestIn(org, 'pending');
      const response = await act(org, id, 'approve', { approved_capabilities: ['email:send', 'billing:read'] });
      expect(response.status).toBe(200);
      expect(response.body.capabilities).toEqual({
        requested: ['billing:read', 'billing:write', 'email:send'],
        approved: ['email:send', 'billing:read'],
      });
      expect((await read(org, id)).body.capabilities.approved).toEqual(['email:send', 'billing:read']);
    });

    test('an operator may approve; approved_by is the operator', async () => {
      const operator = await addUser(t, org, 'operator');
      const { id } = await manifestIn(org, 'pending');
      const response = await act(org, id, 'approve', {}, { token: operator.token });
      expect(response.status).toBe(200);
      expect(response.body.approved_by).toBe(operator.email);
    });

    test.each([
      [{ approved_capabilities: ['billing:read', 'payments:refund'] }, ['approved_capabilities[1]']],
      [
        { approved_capabilities: ['nope:nope', 'billing:read', 'x:y'] },
        ['approved_capabilities[0]', 'approved_capabilities[2]'],
      ],
      [{ approved_capabilities: [] }, ['approved_capabilities']],
      [{ approved_capabilities: ['billing:read', 'billing:read'] }, ['approved_capabilities']],
    ])('%j is 422 naming %j and the manifest stays pending', async (body, expectedFields) => {
      const { id } = await manifestIn(org, 'pending');
      expectValidationError(await act(org, id, 'approve', body), expectedFields);
      const after = (await read(org, id)).body;
      expect(after.status).toBe('pending');
      expect(after.capabilities.approved).toEqual([]);
    });

    test('approved_capabilities of the wrong type is 422', async () => {
      const { id } = await manifestIn(org, 'pending');
      const response = await act(org, id, 'approve', { approved_capabilities: [1, 2] });
      expect(response.status).toBe(422);
      expect(response.body.error.code).toBe('VALIDATION_ERROR');
      expect(fields(response.body.error.details.errors)[0]).toMatch(/^approved_capabilities/);
    });
  });

  test('suspend sets suspended_by (the admin), suspended_at and reason', async () => {
    const { id, svcId } = await manifestIn(org, 'active');
    const before = Date.now();
    const response = await act(org, id, 'suspend', { reason: 'anomalous traffic', notes: 'paged on-call' });
    expect(response.status).toBe(200);
    expect(response.body).toMatchObject({
      manifest_id: id,
      svc_id: svcId,
      status: 'suspended',
      suspended_by: org.adminEmail,
      suspended_at: expect.stringMatching(ISO),
      reason: 'anomalous traffic',
      notes: 'paged on-call',
    });
    expect(Date.parse(response.body.suspended_at)).toBeGreaterThanOrEqual(before - 1000);
    expect(Date.parse(response.body.suspended_at)).toBeLessThanOrEqual(Date.now() + 1000);
  });
});

// ---------------------------------------------------------------------------------------------

describe('history', () => {
  let org: OrgFixture;
  beforeAll(async () => {
    org = await signUp(t, 'hist');
  });

  const entryKeys = [
    'version',
    'agent_version',
    'manifest_id',
    'manifest_hash',
    'status',
    'changed_at',
    'changed_by',
    'changes',
  ];

  test('v1 registered, 2 of 3 approved, v2 registered and approved: every step, newest first, from either id', async () => {
    const svcId = `agent-${unique()}`;
    const v1 = await ok(register(org, versionOf(svcId, '1.0.0')), 201);
    await ok(act(org, v1.manifest_id, 'approve', { approved_capabilities: ['billing:read', 'billing:write'] }));
    const v2 = await ok(register(org, versionOf(svcId, '2.0.0')), 201);
    await ok(act(org, v2.manifest_id, 'approve', {}));

    const fromV1 = await history(org, v1.manifest_id);
    const fromV2 = await history(org, v2.manifest_id);
    expect(fromV1.status).toBe(200);
    expect(fromV2.status).toBe(200);
    expect(fromV2.body).toEqual(fromV1.body);
    const items = fromV1.body.items as Json[];

    for (const item of items) {
      expect(Object.keys(item).sort()).toEqual([...entryKeys].sort());
      expect(item.version).toBe('1.0');
      expect(item.changed_at).toMatch(ISO);
      expect(item.changed_by).toBe(org.adminEmail);
      expect(Array.isArray(item.changes)).toBe(true);
    }
    for (let i = 1; i < items.length; i++) {
      expect(Date.parse(items[i - 1].changed_at)).toBeGreaterThanOrEqual(Date.parse(items[i].changed_at));
    }

    expect(items.map((i) => [i.manifest_id, i.agent_version, i.status])).toEqual([
      [v2.manifest_id, '2.0.0', 'active'],
      [v1.manifest_id, '1.0.0', 'superseded'],
      [v2.manifest_id, '2.0.0', 'pending'],
      [v1.manifest_id, '1.0.0', 'active'],
      [v1.manifest_id, '1.0.0', 'pending'],
    ]);
    const hashOf = { [v1.manifest_id]: v1.manifest_hash, [v2.manifest_id]: v2.manifest_hash };
    for (const item of items) expect(item.manifest_hash).toBe(hashOf[item.manifest_id]);
    expect(v1.manifest_hash).not.toBe(v2.manifest_hash);

    const [v2Active, v1Superseded, v2Pending, v1Active, v1Pending] = items;
    expect(v2Active.changes).toContain('approved 3 of 3 capabilities');
    expect(v2Active.changes.some((c: string) => c.startsWith('not approved'))).toBe(false);
    expect(v1Superseded.changes.join(' ')).toContain('2.0.0');
    expect(v2Pending.changes.join(' ')).toMatch(/2\.0\.0/);
    expect(v1Active.changes).toContain('approved 2 of 3 capabilities');
    expect(v1Active.changes).toContain('not approved: email:send');
    expect(v1Pending.changes.join(' ')).toMatch(/1\.0\.0/);
  });

  test('reason-bearing transitions record their reason in the changes', async () => {
    const { id } = await manifestIn(org, 'active');
    await ok(act(org, id, 'suspend', { reason: 'leaked key' }));
    await ok(act(org, id, 'reactivate', {}));
    await ok(act(org, id, 'revoke', { reason: 'retired' }));
    const items = (await history(org, id)).body.items as Json[];
    expect(items.map((i) => i.status)).toEqual(['revoked', 'active', 'suspended', 'active', 'pending']);
    expect(items[0].changes.join(' ')).toContain('retired');
    expect(items[2].changes.join(' ')).toContain('leaked key');
  });

  test('changed_by is the API key id when a key with manifests:write registered it', async () => {
    const { key, keyId } = await createKey(t, org, ['manifests:write']);
    expect(keyId).toMatch(/^key_/);
    const created = await register(org, minimal(), { apiKey: key });
    expect(created.status).toBe(201);
    expect(created.body.created_by).toBe(keyId);
    await ok(act(org, created.body.manifest_id, 'approve', {}));
    const items = (await history(org, created.body.manifest_id)).body.items as Json[];
    expect(items.map((i) => [i.status, i.changed_by])).toEqual([
      ['active', org.adminEmail],
      ['pending', keyId],
    ]);
  });

  test('a refused transition adds no history entry', async () => {
    const { id } = await manifestIn(org, 'pending');
    const before = (await history(org, id)).body.items;
    expect((await act(org, id, 'reactivate', {})).status).toBe(409);
    expect((await history(org, id)).body.items).toEqual(before);
  });
});

// ---------------------------------------------------------------------------------------------

describe('org isolation', () => {
  let orgA: OrgFixture;
  let orgB: OrgFixture;
  let manifestA: { id: string; svcId: string };
  beforeAll(async () => {
    orgA = await signUp(t, 'iso-a');
    orgB = await signUp(t, 'iso-b');
    manifestA = await manifestIn(orgA, 'pending');
  });

  const notFound = (response: TestResponse) => {
    expect(response.status).toBe(404);
    expect(response.body).toEqual({ error: { code: 'NOT_FOUND', message: expect.any(String), details: {} } });
  };

  test("org B's admin gets 404 for org A's manifest on org A's paths (GET, history, approve, by-svc, list)", async () => {
    const asB = { token: orgB.adminToken };
    notFound(await read(orgA, manifestA.id, asB));
    notFound(await history(orgA, manifestA.id, asB));
    notFound(await act(orgA, manifestA.id, 'approve', {}, asB));
    notFound(await act(orgA, manifestA.id, 'revoke', { reason: 'x' }, asB));
    notFound(await bySvc(orgA, manifestA.svcId, asB));
    notFound(await list(orgA, '', asB));
    notFound(await register(orgA, minimal(), asB));
    expect((await read(orgA, manifestA.id)).body.status).toBe('pending');
  });

  test("org A's manifest id on org B's path is 404 and org B's list does not include it", async () => {
    notFound(await read(orgB, manifestA.id));
    notFound(await history(orgB, manifestA.id));
    notFound(await act(orgB, manifestA.id, 'approve', {}));
    notFound(await act(orgB, manifestA.id, 'reject', { reason: 'x' }));
    notFound(await bySvc(orgB, manifestA.svcId));
    await createManifest(t, orgB, 'pending');
    const listB = await list(orgB);
    expect(listB.status).toBe(200);
    expect(listB.body.total).toBe(1);
    expect(listB.body.items.map((i: Json) => i.manifest_id)).not.toContain(manifestA.id);
    expect((await read(orgA, manifestA.id)).body.status).toBe('pending');
  });

  test("org B's API key gets 404 on org A's manifests", async () => {
    const { key } = await createKey(t, orgB, ['manifests:read', 'manifests:write']);
    notFound(await read(orgA, manifestA.id, { apiKey: key }));
    notFound(await list(orgA, '', { apiKey: key }));
  });

  test('history of an agent id in org B does not show org A events for the same agent id', async () => {
    const svcId = `shared-${unique()}`;
    await createManifest(t, orgA, 'active', versionOf(svcId, '1.0.0'));
    const inB = await createManifest(t, orgB, 'pending', versionOf(svcId, '9.0.0'));
    const items = (await history(orgB, inB.manifestId)).body.items as Json[];
    expect(items.map((i) => [i.manifest_id, i.status])).toEqual([[inB.manifestId, 'pending']]);
    // And the pending in B did not conflict with A's.
    expect((await bySvc(orgB, svcId)).body.manifest_id).toBe(inB.manifestId);
  });
});

// ---------------------------------------------------------------------------------------------

describe('audit trail', () => {
  test('register, approve, suspend, reactivate, revoke: one audit row each, with before/after and reason', async () => {
    const org = await signUp(t, 'audit');
    const created = await ok(register(org, manifestPayload()), 201);
    const id = created.manifest_id;
    await ok(act(org, id, 'approve', { approved_capabilities: ['billing:read'] }));
    await ok(act(org, id, 'suspend', { reason: 'suspicious spend' }));
    // A refused transition leaves no trace.
    expect((await act(org, id, 'approve', {})).status).toBe(409);
    await ok(act(org, id, 'reactivate', {}));
    await ok(act(org, id, 'revoke', { reason: 'decommissioned' }));

    const rows = await dbRows<Json>(
      `SELECT action, target_type, target_id, before, after, reason, actor_type, actor_label
         FROM audit_logs WHERE org_id = $1 AND target_type = 'manifest' ORDER BY created_at, id`,
      [org.orgId],
    );
    const normalized: Json[] = rows.map((r) => ({
      ...r,
      before: r.before == null ? null : asObject(r.before),
      after: r.after == null ? null : asObject(r.after),
    }));
    expect(normalized.map((r) => r.action)).toEqual([
      'manifest.registered',
      'manifest.approved',
      'manifest.suspended',
      'manifest.reactivated',
      'manifest.revoked',
    ]);
    for (const row of normalized) {
      expect(row).toMatchObject({
        target_type: 'manifest',
        target_id: id,
        actor_type: 'user',
        actor_label: org.adminEmail,
      });
    }
    const [registered, approved, suspended, reactivated, revoked] = normalized;
    expect(registered.after).toMatchObject({
      status: 'pending',
      svc_id: created.svc_id,
      manifest_hash: created.manifest_hash,
    });
    expect(registered.reason).toBeNull();
    expect(approved.before).toEqual({ status: 'pending' });
    expect(approved.after).toMatchObject({ status: 'active', approved_capabilities: ['billing:read'] });
    expect(suspended.before).toEqual({ status: 'active' });
    expect(suspended.after).toMatchObject({ status: 'suspended' });
    expect(suspended.reason).toBe('suspicious spend');
    expect(reactivated.before).toEqual({ status: 'suspended' });
    expect(reactivated.after).toMatchObject({ status: 'active' });
    expect(revoked.before).toEqual({ status: 'active' });
    expect(revoked.after).toMatchObject({ status: 'revoked' });
    expect(revoked.reason).toBe('decommissioned');
  });

  test('superseding is audited against the old manifest', async () => {
    const org = await signUp(t, 'audit-sup');
    const { id: oldId } = await manifestIn(org, 'superseded');
    const rows = await dbRows<Json>(
      `SELECT action, before, after FROM audit_logs WHERE org_id = $1 AND target_id = $2 ORDER BY created_at, id`,
      [org.orgId, oldId],
    );
    expect(rows.map((r) => r.action)).toEqual(['manifest.registered', 'manifest.approved', 'manifest.superseded']);
    expect(asObject(rows[2].before)).toEqual({ status: 'active' });
    expect(asObject(rows[2].after)).toMatchObject({ status: 'superseded' });
  });

  test('an API key registration is audited with the key as actor', async () => {
    const org = await signUp(t, 'audit-key');
    const { key, keyId } = await createKey(t, org, ['manifests:write']);
    const created = await ok(register(org, minimal(), { apiKey: key }), 201);
    const rows = await dbRows<Json>(
      `SELECT action, actor_type, actor_id, actor_label FROM audit_logs WHERE org_id = $1 AND target_id = $2`,
      [org.orgId, created.manifest_id],
    );
    expect(rows).toHaveLength(1);
    expect(rows[0].action).toBe('manifest.registered');
    expect([rows[0].actor_id, rows[0].actor_label]).toContain(keyId);
  });
});

// ---------------------------------------------------------------------------------------------

describe('database constraints', () => {
  let org: OrgFixture;
  beforeAll(async () => {
    org = await signUp(t, 'db');
  });

  const insert = (svcId: string, status: string) =>
    dbRows(
      `INSERT INTO manifests (id, org_id, svc_id, version, status, manifest_hash, document,
                              requested_capabilities, approved_capabilities, created_by, updated_at)
       VALUES ($1, $2, $3, '1.0', $4::"ManifestStatus", $5, $6::jsonb, ARRAY['billing:read'], ARRAY[]::text[], 'sql-test', now())
       RETURNING id`,
      [randomUUID(), org.orgId, svcId, status, `sha256:${'0'.repeat(64)}`, JSON.stringify(minimal(svcId))],
    );

  async function expectUniqueViolation(work: Promise<unknown>, index: string) {
    let failure: unknown;
    try {
      await work;
    } catch (error) {
      failure = error;
    }
    expect(failure).toBeDefined();
    const e = failure as { code?: string; message?: string; cause?: { code?: string } };
    expect(e.code ?? e.cause?.code).toBe('23505');
    expect(String(e.message)).toContain(index);
  }

  test('a second active (or suspended) manifest for the same agent id is refused by the database', async () => {
    const { svcId } = await manifestIn(org, 'active');
    await expectUniqueViolation(insert(svcId, 'active'), 'manifests_one_current_per_svc');
    await expectUniqueViolation(insert(svcId, 'suspended'), 'manifests_one_current_per_svc');
    const current = await dbRows('SELECT id FROM manifests WHERE org_id = $1 AND svc_id = $2', [org.orgId, svcId]);
    expect(current).toHaveLength(1);
  });

  test('a second pending manifest for the same agent id is refused by the database', async () => {
    const { svcId } = await manifestIn(org, 'pending');
    await expectUniqueViolation(insert(svcId, 'pending'), 'manifests_one_pending_per_svc');
  });

  test('the indexes are partial: other statuses, other agent ids and other orgs are not limited', async () => {
    const { svcId } = await manifestIn(org, 'active');
    await expect(insert(svcId, 'pending')).resolves.toHaveLength(1);
    await expect(insert(svcId, 'revoked')).resolves.toHaveLength(1);
    await expect(insert(svcId, 'revoked')).resolves.toHaveLength(1);
    await expect(insert(svcId, 'superseded')).resolves.toHaveLength(1);
    await expect(insert(svcId, 'rejected')).resolves.toHaveLength(1);
    await expect(insert(`other-${unique()}`, 'active')).resolves.toHaveLength(1);
  });
});

// ---------------------------------------------------------------------------------------------

describe('authorization', () => {
  let org: OrgFixture;
  beforeAll(async () => {
    org = await signUp(t, 'authz');
  });

  const forbidden = (response: TestResponse) => {
    expect(response.status).toBe(403);
    expect(response.body).toEqual({ detail: { code: 'FORBIDDEN', message: expect.any(String) } });
  };

  test('an API key with manifests:write registers and validates, but cannot approve or change state', async () => {
    const { key } = await createKey(t, org, ['manifests:write']);
    const checked = await validate(org, minimal(), { apiKey: key });
    expect(checked.status).toBe(200);
    expect(checked.body.valid).toBe(true);
    const created = await register(org, minimal(), { apiKey: key });
    expect(created.status).toBe(201);
    expect(created.body.status).toBe('pending');
    const id = created.body.manifest_id;
    forbidden(await act(org, id, 'approve', {}, { apiKey: key }));
    forbidden(await act(org, id, 'reject', { reason: 'x' }, { apiKey: key }));
    forbidden(await act(org, id, 'revoke', { reason: 'x' }, { apiKey: key }));
    expect((await read(org, id)).body.status).toBe('pending');
  });

  test('even an API key with every manifest scope cannot approve', async () => {
    const { key } = await createKey(t, org, ['manifests:read', 'manifests:write']);
    const { id } = await manifestIn(org, 'pending');
    forbidden(await act(org, id, 'approve', {}, { apiKey: key }));
    const { id: active } = await manifestIn(org, 'active');
    forbidden(await act(org, active, 'suspend', { reason: 'x' }, { apiKey: key }));
  });

  test('an API key with only manifests:read reads but cannot register or validate', async () => {
    const { key } = await createKey(t, org, ['manifests:read']);
    const { id, svcId } = await manifestIn(org, 'pending');
    expect((await read(org, id, { apiKey: key })).status).toBe(200);
    expect((await list(org, '', { apiKey: key })).status).toBe(200);
    expect((await bySvc(org, svcId, { apiKey: key })).status).toBe(200);
    expect((await history(org, id, { apiKey: key })).status).toBe(200);
    forbidden(await register(org, minimal(), { apiKey: key }));
    forbidden(await validate(org, minimal(), { apiKey: key }));
  });

  test('a viewer reads everything but cannot register, validate or change state', async () => {
    const viewer = await addUser(t, org, 'viewer');
    const asViewer = { token: viewer.token };
    const { id, svcId } = await manifestIn(org, 'pending');
    const one = await read(org, id, asViewer);
    expect(one.status).toBe(200);
    expect(one.body.manifest_id).toBe(id);
    const all = await list(org, '', asViewer);
    expect(all.status).toBe(200);
    expect(all.body.items.map((i: Json) => i.manifest_id)).toContain(id);
    expect((await bySvc(org, svcId, asViewer)).body.manifest_id).toBe(id);
    expect((await history(org, id, asViewer)).body.items).toHaveLength(1);

    forbidden(await register(org, minimal(), asViewer));
    forbidden(await validate(org, minimal(), asViewer));
    forbidden(await act(org, id, 'approve', {}, asViewer));
    forbidden(await act(org, id, 'reject', { reason: 'x' }, asViewer));
    expect((await read(org, id)).body.status).toBe('pending');
  });

  test('an operator registers and approves', async () => {
    const operator = await addUser(t, org, 'operator');
    const created = await register(org, minimal(), { token: operator.token });
    expect(created.status).toBe(201);
    expect(created.body.created_by).toBe(operator.email);
    const approved = await act(org, created.body.manifest_id, 'approve', {}, { token: operator.token });
    expect(approved.status).toBe(200);
    expect(approved.body).toMatchObject({ status: 'active', approved_by: operator.email });
  });

  test('without credentials: 401 AUTHENTICATION_REQUIRED before any validation', async () => {
    const response = await t.request('POST', base(org), { body: [] });
    expect(response.status).toBe(401);
    expect(response.body).toEqual({ detail: { code: 'AUTHENTICATION_REQUIRED', message: expect.any(String) } });
  });
});

describe('API keys limited to agent ids (svc_ids)', () => {
  test('see and register only their own agents', async () => {
    const org = await signUp(t);
    const mine = await createManifest(t, org, 'active', manifestPayload({ svcId: `mine-${unique()}` }));
    const theirs = await createManifest(t, org, 'active', manifestPayload({ svcId: `theirs-${unique()}` }));
    const { key } = await createKey(t, org, ['manifests:read', 'manifests:write'], { svc_ids: [mine.svcId] });

    const list = await t.request('GET', base(org), { apiKey: key });
    expect(list.status).toBe(200);
    expect(list.body.items.map((m: { svc_id: string }) => m.svc_id)).toEqual([mine.svcId]);
    expect(list.body.total).toBe(1);
    expect((await read(org, mine.manifestId, { apiKey: key })).status).toBe(200);
    expect((await read(org, theirs.manifestId, { apiKey: key })).status).toBe(404);
    expect((await history(org, theirs.manifestId, { apiKey: key })).status).toBe(404);
    expect((await t.request('GET', `${base(org)}/by-svc/${theirs.svcId}`, { apiKey: key })).status).toBe(404);

    const other = await register(org, manifestPayload({ svcId: `new-${unique()}` }), { apiKey: key });
    expect(other.status).toBe(403);
    expect(other.body.detail.code).toBe('FORBIDDEN');
    const own = manifestPayload({ svcId: mine.svcId });
    (own.agent as { version: string }).version = '2.0.0';
    expect((await register(org, own, { apiKey: key })).status).toBe(201);
  });
});

test('a daily limit alone is valid: the hourly default does not make it an error', async () => {
  const org = await signUp(t);
  const payload = manifestPayload();
  payload.constraints = { max_actions_per_day: 50 } as never;
  const response = await validate(org, payload);
  expect(response.status).toBe(200);
  expect(response.body.valid).toBe(true);
  expect(response.body.warnings).toContainEqual({
    field: 'constraints.max_actions_per_hour',
    message: expect.stringContaining('100'),
  });
});
