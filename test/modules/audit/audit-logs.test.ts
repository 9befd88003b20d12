import type { AuditEntry as Item } from '../../../src/modules/audit/audit-export.js';
import { AuditDashboardDocument } from '../../generated/graphql.js';
import { startTestApp, type TestApp } from '../../support/app.js';
import { parseCsv } from '../../support/csv.js';
import {
  addUser,
  createKey,
  createManifest,
  manifestPayload,
  signUp,
  type OrgFixture,
} from '../../support/fixtures.js';
import { runOperation, StatementCounter } from '../../support/statements.js';

const statements = new StatementCounter();
let t: TestApp;
let org: OrgFixture;
let other: OrgFixture;
let operator: Awaited<ReturnType<typeof addUser>>;
let writerKey: { keyId: string; key: string };
let rejectedId: string;
const awkwardReason = 'she said "no", twice,\r\nthen left; also a, comma';

beforeAll(async () => {
  t = await startTestApp({}, { onQuery: statements.observe });
  org = await signUp(t, 'audit');
  other = await signUp(t, 'audit-other');
  operator = await addUser(t, org, 'operator');
  await addUser(t, org, 'viewer');
  writerKey = await createKey(t, org, ['manifests:write']);
  // Entries by the admin, the operator and an API key, on several targets.
  await createManifest(t, org, 'active');
  const byKey = await t.request('POST', `/api/v1/orgs/${org.orgId}/manifests`, {
    apiKey: writerKey.key,
    body: manifestPayload(),
  });
  expect(byKey.status).toBe(201);
  const rejected = await t.request('POST', `/api/v1/orgs/${org.orgId}/manifests/${byKey.body.manifest_id}/reject`, {
    token: operator.token,
    body: { reason: awkwardReason },
  });
  expect(rejected.status).toBe(200);
  rejectedId = byKey.body.manifest_id;
  await createManifest(t, other, 'active');
});
afterAll(() => t.close());

const base = () => `/api/v1/orgs/${org.orgId}/audit-logs`;
const list = (query = '', token = org.adminToken) => t.request('GET', `${base()}${query}`, { token });

async function all(query = ''): Promise<Item[]> {
  const response = await list(`?limit=1000${query}`);
  expect(response.status).toBe(200);
  expect(response.body.items).toHaveLength(response.body.total);
  return response.body.items;
}

describe('GET /orgs/{org_id}/audit-logs', () => {
  test('lists the org’s entries newest first in the documented shape', async () => {
    const items = await all();
    const oldestFirst = items.map((i) => i.action).reverse();
    // Sign-up writes both in one transaction (one timestamp; their order is by id).
    expect(oldestFirst.slice(0, 2).sort()).toEqual(['org.created', 'user.created']);
    expect(oldestFirst.slice(2)).toEqual([
      'user.created',
      'user.created',
      'api_key.created',
      // Registering the first manifest of an agent id creates the agent, in the same transaction.
      'agent.created',
      'manifest.registered',
      'manifest.approved',
      'agent.created',
      'manifest.registered',
      'manifest.rejected',
    ]);
    for (const item of items) {
      expect(Object.keys(item).sort()).toEqual(
        [
          'action',
          'actor',
          'after',
          'audit_id',
          'before',
          'created_at',
          'org_id',
          'reason',
          'request_id',
          'target',
        ].sort(),
      );
      expect(item.org_id).toBe(org.orgId);
      expect(item.audit_id).toMatch(/^aud_/);
      expect(item.request_id).toMatch(/\S/);
      expect(item).not.toHaveProperty('actor_user');
    }
    const times = items.map((i) => i.created_at);
    expect([...times].sort().reverse()).toEqual(times);
    // Exactly as written: the rejection carries its reason.
    const rejection = items.find((i) => i.action === 'manifest.rejected')!;
    expect(rejection).toMatchObject({
      actor: { type: 'user', id: operator.userId, label: operator.email },
      target: { type: 'manifest', id: rejectedId },
      before: { status: 'pending' },
      after: { status: 'rejected' },
      reason: awkwardReason,
    });
    const registeredByKey = items.find((i) => i.action === 'manifest.registered' && i.actor.type === 'api_key')!;
    expect(registeredByKey.actor).toEqual({ type: 'api_key', id: writerKey.keyId, label: writerKey.key.slice(0, 12) });
  });

  test('default page is 50; limit and offset page through without overlap', async () => {
    const everything = await all();
    const first = await list('?limit=4');
    const second = await list('?limit=4&offset=4');
    expect(first.body.total).toBe(everything.length);
    expect([...first.body.items, ...second.body.items].map((i: Item) => i.audit_id)).toEqual(
      everything.slice(0, 8).map((i) => i.audit_id),
    );
    const defaultPage = await list();
    expect(defaultPage.body.items).toHaveLength(Math.min(50, everything.length));
  });

  test('actor matches a user id, an email in any case, or an API key id', async () => {
    const everything = await all();
    const byOperator = everything.filter((i) => i.actor.id === operator.userId);
    expect(byOperator.length).toBeGreaterThan(0);
    expect(await all(`&actor=${operator.userId}`)).toEqual(byOperator);
    expect(await all(`&actor=${encodeURIComponent(operator.email.toUpperCase())}`)).toEqual(byOperator);
    const byKey = await all(`&actor=${writerKey.keyId}`);
    expect(byKey.map((i) => i.action)).toEqual(['manifest.registered', 'agent.created']);
    expect(await all(`&actor=nobody@example.com`)).toEqual([]);
  });

  test('action matches exactly or by family; target by type and id', async () => {
    const everything = await all();
    expect(await all('&action=manifest.approved')).toEqual(everything.filter((i) => i.action === 'manifest.approved'));
    const family = await all('&action=manifest');
    expect(family).toEqual(everything.filter((i) => i.action.startsWith('manifest.')));
    expect(new Set(family.map((i) => i.action))).toEqual(
      new Set(['manifest.registered', 'manifest.approved', 'manifest.rejected']),
    );
    expect(await all('&action=manifest.approve')).toEqual([]);
    const onRejected = await all(`&target_type=manifest&target_id=${rejectedId}`);
    expect(onRejected.map((i) => i.action)).toEqual(['manifest.rejected', 'manifest.registered']);
    expect(await all('&target_type=user')).toEqual(everything.filter((i) => i.target.type === 'user'));
  });

  test('from is inclusive and to exclusive', async () => {
    const everything = await all();
    const pivot = everything[Math.floor(everything.length / 2)].created_at;
    const from = await all(`&from=${encodeURIComponent(pivot)}`);
    const to = await all(`&to=${encodeURIComponent(pivot)}`);
    expect(from).toEqual(everything.filter((i) => i.created_at >= pivot));
    expect(to).toEqual(everything.filter((i) => i.created_at < pivot));
    expect(from.length + to.length).toBe(everything.length);
  });

  test("never shows another org's entries, and another org's id is 404", async () => {
    const otherItems = await t.request('GET', `/api/v1/orgs/${other.orgId}/audit-logs?limit=1000`, {
      token: other.adminToken,
    });
    const ids = new Set(otherItems.body.items.map((i: Item) => i.audit_id));
    expect(ids.size).toBeGreaterThan(0);
    for (const item of await all()) expect(ids.has(item.audit_id)).toBe(false);
    const foreign = await t.request('GET', `/api/v1/orgs/${other.orgId}/audit-logs`, { token: org.adminToken });
    expect(foreign.status).toBe(404);
  });

  test.each([
    ['limit=0', 'limit'],
    ['limit=1001', 'limit'],
    ['limit=ten', 'limit'],
    ['offset=-1', 'offset'],
    ['from=yesterday', 'from'],
    ['to=2026-02-30T00:00:00Z', 'to'],
    ['from=2026-01-02T00:00:00Z&to=2026-01-01T00:00:00Z', 'to'],
    ['action=Manifest%20Approved', 'action'],
    ['target_type=a%20b', 'target_type'],
    [`actor=${'x'.repeat(321)}`, 'actor'],
  ])('%s → 422 naming %s', async (query, field) => {
    const response = await list(`?${query}`);
    expect(response.status).toBe(422);
    expect(response.body.error.code).toBe('VALIDATION_ERROR');
    expect(response.body.error.details.errors.map((e: { field: string }) => e.field)).toEqual([field]);
  });
});

describe('GET /orgs/{org_id}/audit-logs/export', () => {
  const exportOf = (query: string, token = org.adminToken) => t.request('GET', `${base()}/export${query}`, { token });

  test('JSON Lines: every entry, oldest first, each line the shape of a list item', async () => {
    const response = await exportOf('');
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toBe('application/x-ndjson; charset=utf-8');
    expect(response.headers.get('content-disposition')).toMatch(
      new RegExp(`^attachment; filename="audit-logs-${org.orgId}-\\d{8}T\\d{6}Z\\.jsonl"$`),
    );
    expect(response.headers.get('x-ratelimit-limit')).toBe('1000');
    expect(response.headers.get('x-request-id')).toMatch(/\S/);
    expect(response.text.endsWith('\n')).toBe(true);
    const lines = response.text
      .trimEnd()
      .split('\n')
      .map((line) => JSON.parse(line));
    expect(lines).toEqual([...(await all())].reverse());
  });

  test('format=jsonl is the default; the filters of the list apply', async () => {
    const explicit = await exportOf('?format=jsonl&action=manifest&actor=' + operator.userId);
    const lines = explicit.text
      .trimEnd()
      .split('\n')
      .map((line) => JSON.parse(line));
    expect(lines).toEqual([...(await all(`&action=manifest&actor=${operator.userId}`))].reverse());
    expect(lines.length).toBeGreaterThan(0);
    const none = await exportOf('?actor=nobody');
    expect(none.status).toBe(200);
    expect(none.text).toBe('');
  });

  test('CSV: RFC 4180 with a header row, quotes and line breaks escaped, JSON columns as JSON text', async () => {
    const response = await exportOf('?format=csv');
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toBe('text/csv; charset=utf-8; header=present');
    expect(response.headers.get('content-disposition')).toMatch(/filename="audit-logs-[^"]+\.csv"$/);
    const [header, ...rows] = parseCsv(response.text);
    expect(header).toEqual([
      'audit_id',
      'org_id',
      'actor_type',
      'actor_id',
      'actor_label',
      'action',
      'target_type',
      'target_id',
      'before',
      'after',
      'reason',
      'request_id',
      'created_at',
    ]);
    const expected = [...(await all())]
      .reverse()
      .map((i) => [
        i.audit_id,
        i.org_id,
        i.actor.type,
        i.actor.id ?? '',
        i.actor.label ?? '',
        i.action,
        i.target.type,
        i.target.id,
        i.before === null ? '' : JSON.stringify(i.before),
        i.after === null ? '' : JSON.stringify(i.after),
        i.reason ?? '',
        i.request_id ?? '',
        i.created_at,
      ]);
    expect(rows).toEqual(expected);
    // The awkward reason arrived intact, so its quotes, comma and CRLF were escaped.
    expect(rows.filter((r) => r[10] === awkwardReason)).toHaveLength(1);
    expect(response.text).toContain(`"${awkwardReason.replace(/"/g, '""')}"`);
  });

  test.each([
    ['format=xml', 'format'],
    ['format=csv&format=jsonl', 'format'],
    ['from=soon', 'from'],
    ['from=2026-01-02T00:00:00Z&to=2026-01-01T00:00:00Z', 'to'],
    ['action=NOT%20AN%20ACTION', 'action'],
  ])('%s → 422 naming %s, before any byte of export', async (query, field) => {
    const response = await exportOf(`?${query}`);
    expect(response.status).toBe(422);
    expect(response.headers.get('content-type')).toMatch(/^application\/json/);
    expect(response.body.error.details.errors.map((e: { field: string }) => e.field)).toEqual([field]);
  });

  test('entries written while the export streams are not in it: it is the log as of its start', async () => {
    const busy = await signUp(t, 'audit-busy');
    // Ten pages, older than the sign-up's own entries.
    await t.database.db.sql.query(
      `INSERT INTO audit_logs (id, org_id, actor_type, actor_id, actor_label, action, target_type, target_id, after, created_at)
       SELECT 'aud_page_' || lpad(i::text, 4, '0'), $1::uuid, 'user', $2, 'x', 'manifest.approved', 'manifest', 'm-' || i,
              '{}'::jsonb, timestamptz '2025-01-01T00:00:00Z' + i * interval '1 second'
       FROM generate_series(1, 1000) AS i`,
      [busy.orgId, busy.adminUserId],
    );
    const response = await t.app.yoga.fetch(
      `http://localhost/api/v1/orgs/${busy.orgId}/audit-logs/export`,
      { headers: { authorization: `Bearer ${busy.adminToken}` } },
      { clientAddress: '192.0.2.1' } as never,
    );
    const reader = response.body!.getReader();
    const decoder = new TextDecoder();
    let received = decoder.decode((await reader.read()).value, { stream: true });
    // The first page has left; now an audited change.
    const { keyId } = await createKey(t, busy, ['logs:read']);
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      received += decoder.decode(value, { stream: true });
    }
    const targets = received
      .trimEnd()
      .split('\n')
      .map((line) => JSON.parse(line).target.id);
    // The thousand and the sign-up's two.
    expect(targets).toHaveLength(1002);
    expect(targets).not.toContain(keyId);
    const later = await t.request('GET', `/api/v1/orgs/${busy.orgId}/audit-logs?target_id=${keyId}`, {
      token: busy.adminToken,
    });
    expect(later.body.items).toHaveLength(1);
  });

  test('a failure half-way errors the stream: the download never looks complete', async () => {
    const audit = t.app.services.audit;
    const original = audit.exportBatches;
    audit.exportBatches = async (orgId, filter) => {
      const real = await original(orgId, filter, 2);
      return (async function* () {
        let batches = 0;
        for await (const batch of real) {
          if (batches++ === 2) throw new Error('the database went away');
          yield batch;
        }
      })();
    };
    try {
      const response = await t.app.yoga.fetch(
        `http://localhost${base()}/export`,
        { headers: { authorization: `Bearer ${org.adminToken}` } },
        { clientAddress: '192.0.2.1' } as never,
      );
      expect(response.status).toBe(200);
      const reader = response.body!.getReader();
      let lines = 0;
      const outcome = (async () => {
        for (;;) {
          const { done, value } = await reader.read();
          if (done) return 'ended cleanly';
          lines += new TextDecoder().decode(value).split('\n').length - 1;
        }
      })();
      await expect(outcome).rejects.toThrow();
      expect(lines).toBe(4);
    } finally {
      audit.exportBatches = original;
    }
  });

  test('a viewer may read but not export; the route answers 405 to other methods', async () => {
    const viewer = await addUser(t, org, 'viewer');
    expect((await list('', viewer.token)).status).toBe(200);
    const refused = await exportOf('', viewer.token);
    expect(refused.status).toBe(403);
    expect(refused.body).toEqual({ detail: { code: 'FORBIDDEN', message: expect.any(String) } });
    const posted = await t.request('POST', `${base()}/export`, { token: org.adminToken, body: {} });
    expect(posted.status).toBe(405);
    expect(posted.headers.get('allow')).toBe('GET');
  });
});

describe('GraphQL dashboard', () => {
  async function countStatements(limit: number) {
    const { result: data, count } = await statements.count(() =>
      runOperation(t, AuditDashboardDocument, { orgId: org.orgId, limit }, org.adminToken),
    );
    return { data, count };
  }

  test('audit entries with their acting users cost the same statements for 5 items as for 60', async () => {
    // Entries by more users, so the list names many distinct actors.
    for (let i = 0; i < 15; i++) {
      const user = await addUser(t, org, 'operator');
      await t.request('POST', `/api/v1/orgs/${org.orgId}/manifests`, { token: user.token, body: manifestPayload() });
    }
    const small = await countStatements(5);
    const large = await countStatements(60);
    const items = large.data.organization.audit_logs.items;
    expect(items.length).toBeGreaterThanOrEqual(30);
    expect(new Set(items.filter((i) => i.actor.type === 'user').map((i) => i.actor.id)).size).toBeGreaterThanOrEqual(8);
    for (const item of items) {
      if (item.actor.type === 'user')
        expect(item.actor_user).toMatchObject({ user_id: item.actor.id, email: item.actor.label });
      else expect(item.actor_user).toBeNull();
    }
    expect(items.some((i) => i.actor.type === 'api_key')).toBe(true);
    expect(small.data.organization.audit_logs.items.some((i) => i.actor_user !== null)).toBe(true);
    // organization + list + count + users (one query for every actor).
    expect(large.count).toBe(small.count);
    expect(large.count).toBeLessThanOrEqual(4);
  });
});

test('a malformed org id in the export path is 404, not a failure', async () => {
  const response = await t.request('GET', '/api/v1/orgs/%E0%A4%A/audit-logs/export', { token: org.adminToken });
  expect(response.status).toBe(404);
  expect(response.body.error.code).toBe('NOT_FOUND');
});
