/**
 * Manifest templates and the marketplace at the unprefixed paths
 * (docs/decisions/0021-templates-and-marketplace.md): drafts, publish and archive, exact decimal
 * prices and ISO 4217 currencies, page/limit pagination, browsing every org's published templates
 * with price and category filters, and tenant isolation.
 */
import { canonicalHash } from '../../../src/lib/canonical-json.js';
import { purchaseRequestHash } from '../../../src/modules/marketplace/purchase.service.js';
import { startTestApp, type TestApp } from '../../support/app.js';
import { backend } from '../../support/database.js';
import { addUser, login, signUp, type OrgFixture } from '../../support/fixtures.js';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

const template = (overrides: Record<string, unknown> = {}) => ({
  name: 'Refund assistant',
  description: 'Reads invoices and refunds them',
  category: 'billing',
  operations: ['billing:read', { capability: 'billing:refund', description: 'Refund an invoice' }],
  price: '12.50',
  currency: 'EUR',
  ...overrides,
});

async function create(org: OrgFixture, body: Record<string, unknown> = template()) {
  const created = await t.request('POST', '/manifests', { token: org.adminToken, body });
  if (created.status !== 201) throw new Error(`template failed: ${created.status} ${created.text}`);
  return created.body.id as string;
}

async function publish(org: OrgFixture, id: string) {
  const published = await t.request('POST', `/manifests/${id}/publish`, { token: org.adminToken, body: {} });
  expect(published.status).toBe(200);
  return published.body;
}

/** Polls `done` until it holds; a generous deadline only bounds a hang. */
async function waitFor(done: () => Promise<boolean>, what: string, deadlineMs = 15_000): Promise<void> {
  const until = Date.now() + deadlineMs;
  while (!(await done())) {
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

const fields = (body: { error: { details: { errors: { field: string }[] } } }) =>
  body.error.details.errors.map((e) => e.field);

describe('templates of the caller’s org', () => {
  test('create → draft; read with operations and metadata; publish; archive', async () => {
    const org = await signUp(t);
    const created = await t.request('POST', '/manifests', {
      token: org.adminToken,
      body: template({ constraints: { max_actions_per_hour: 10 } }),
    });
    expect(created.status).toBe(201);
    expect(created.body).toEqual({
      id: expect.stringMatching(/^[0-9a-f-]{36}$/),
      status: 'draft',
      created_at: expect.any(String),
    });

    const read = await t.request('GET', `/manifests/${created.body.id}`, { token: org.adminToken });
    expect(read.status).toBe(200);
    const operations = [
      { capability: 'billing:read', description: '' },
      { capability: 'billing:refund', description: 'Refund an invoice' },
    ];
    const contentHash = canonicalHash({
      name: 'Refund assistant',
      description: 'Reads invoices and refunds them',
      category: 'billing',
      operations,
      constraints: { max_actions_per_hour: 10 },
    });
    expect(read.body).toEqual({
      manifest: {
        id: created.body.id,
        name: 'Refund assistant',
        description: 'Reads invoices and refunds them',
        category: 'billing',
        constraints: { max_actions_per_hour: 10 },
        price: '12.50',
        currency: 'EUR',
        status: 'draft',
        version: 1,
        publisher: { org_id: org.orgId, name: expect.any(String) },
        content_hash: contentHash,
        created_at: created.body.created_at,
        updated_at: expect.any(String),
        published_at: null,
      },
      operations,
      metadata: { version: 1, constraints: { max_actions_per_hour: 10 }, content_hash: contentHash, purchases: 0 },
    });

    const published = await publish(org, created.body.id);
    expect(published).toMatchObject({
      status: 'published',
      published_at: expect.any(String),
      operations,
      content_hash: contentHash,
    });
    const again = await t.request('POST', `/manifests/${created.body.id}/publish`, { token: org.adminToken, body: {} });
    expect(again.status).toBe(409);
    expect(again.body.error).toMatchObject({
      code: 'INVALID_STATE_TRANSITION',
      details: { from: 'published', to: 'published' },
    });
    const archived = await t.request('POST', `/manifests/${created.body.id}/archive`, {
      token: org.adminToken,
      body: {},
    });
    expect(archived.body.status).toBe('archived');

    const audit = await t.request('GET', `/api/v1/orgs/${org.orgId}/audit-logs?target_type=manifest_template`, {
      token: org.adminToken,
    });
    expect(audit.body.items.map((i: { action: string }) => i.action)).toEqual([
      'template.archived',
      'template.published',
      'template.created',
    ]);
  });

  test.each([
    [{ name: '' }, ['name']],
    [{ category: 'Billing Tools' }, ['category']],
    [{ operations: [] }, ['operations']],
    [{ operations: ['billing'] }, ['operations[0]']],
    [{ operations: ['billing:read', 'billing:read'] }, ['operations[1]']],
    [{ operations: Array.from({ length: 101 }, (_, i) => `d:a${i}`) }, ['operations']],
    [{ price: '12.505' }, ['price']],
    [{ price: -1 }, ['price']],
    [{ price: '1e3' }, ['price']],
    [{ price: 0.1 + 0.2 }, ['price']],
    [{ currency: 'eur' }, ['currency']],
    [{ currency: 'XYZ' }, ['currency']],
    [{ constraints: { max_actions_per_hour: 0 } }, ['constraints.max_actions_per_hour']],
    [{ constraints: { require_human_approval: ['email:send'] } }, ['constraints.require_human_approval[0]']],
  ])('422 for %j naming %j', async (overrides, expected) => {
    const org = await signUp(t);
    const response = await t.request('POST', '/manifests', { token: org.adminToken, body: template(overrides) });
    expect(response.status).toBe(422);
    expect(fields(response.body)).toEqual(expected);
  });

  test('prices are exact: numbers and strings with up to two places, stored and shown with two', async () => {
    const org = await signUp(t);
    for (const [price, shown] of [
      [19.99, '19.99'],
      ['7', '7.00'],
      ['0.5', '0.50'],
      [0, '0.00'],
      ['9999999999.99', '9999999999.99'],
    ] as const) {
      const id = await create(org, template({ price }));
      expect((await t.request('GET', `/manifests/${id}`, { token: org.adminToken })).body.manifest.price).toBe(shown);
    }
    const free = await create(org, template({ price: undefined, currency: undefined }));
    expect((await t.request('GET', `/manifests/${free}`, { token: org.adminToken })).body.manifest).toMatchObject({
      price: '0.00',
      currency: 'USD',
    });
  });

  test('list: page and limit with totals, status filter, newest first; bad paging is 422', async () => {
    const org = await signUp(t);
    const ids = [];
    for (let i = 0; i < 5; i += 1) ids.push(await create(org, template({ name: `T${i}` })));
    await publish(org, ids[0]);
    const page2 = await t.request('GET', '/manifests?page=2&limit=2', { token: org.adminToken });
    expect(page2.body.pagination).toEqual({ page: 2, limit: 2, total: 5, pages: 3 });
    expect(page2.body.manifests.map((m: { name: string }) => m.name)).toEqual(['T2', 'T1']);
    expect(Object.keys(page2.body.manifests[0]).sort()).toEqual(
      ['category', 'created_at', 'currency', 'description', 'id', 'name', 'operations_count', 'price', 'status'].sort(),
    );
    const past = await t.request('GET', '/manifests?page=9&limit=2', { token: org.adminToken });
    expect(past.body).toEqual({ manifests: [], pagination: { page: 9, limit: 2, total: 5, pages: 3 } });
    const published = await t.request('GET', '/manifests?status=published', { token: org.adminToken });
    expect(published.body.manifests.map((m: { id: string }) => m.id)).toEqual([ids[0]]);
    expect((await t.request('GET', '/manifests', { token: org.adminToken })).body.pagination).toEqual({
      page: 1,
      limit: 20,
      total: 5,
      pages: 1,
    });
    for (const query of ['page=0', 'limit=0', 'limit=101', 'status=gone']) {
      expect((await t.request('GET', `/manifests?${query}`, { token: org.adminToken })).status).toBe(422);
    }
  });

  test('a viewer reads but cannot create, publish or archive', async () => {
    const org = await signUp(t);
    const viewer = await addUser(t, org, 'viewer');
    const token = await login(t, viewer.email);
    const id = await create(org);
    expect((await t.request('GET', `/manifests/${id}`, { token })).status).toBe(200);
    expect((await t.request('POST', '/manifests', { token, body: template() })).status).toBe(403);
    expect((await t.request('POST', `/manifests/${id}/publish`, { token, body: {} })).status).toBe(403);
  });
});

describe('the marketplace', () => {
  test('another org sees published templates only: drafts and archived ones are 404 and absent', async () => {
    const publisher = await signUp(t);
    const buyer = await signUp(t);
    const draft = await create(publisher, template({ category: `isolation-${Date.now()}` }));
    const shown = await create(publisher, template({ category: `isolation-${Date.now()}` }));
    const gone = await create(publisher, template({ category: `isolation-${Date.now()}` }));
    await publish(publisher, shown);
    await publish(publisher, gone);
    await t.request('POST', `/manifests/${gone}/archive`, { token: publisher.adminToken, body: {} });

    expect((await t.request('GET', `/manifests/${draft}`, { token: buyer.adminToken })).status).toBe(404);
    expect((await t.request('GET', `/manifests/${gone}`, { token: buyer.adminToken })).status).toBe(404);
    const visible = await t.request('GET', `/manifests/${shown}`, { token: buyer.adminToken });
    expect(visible.body.manifest).toMatchObject({ id: shown, publisher: { org_id: publisher.orgId } });
    // The buyer's own list holds only its own templates; it cannot publish the other's.
    expect((await t.request('GET', '/manifests', { token: buyer.adminToken })).body.pagination.total).toBe(0);
    expect((await t.request('POST', `/manifests/${draft}/publish`, { token: buyer.adminToken, body: {} })).status).toBe(
      404,
    );

    const market = await t.request(
      'GET',
      `/marketplace/manifests?limit=100&q=${encodeURIComponent('Refund assistant')}`,
      { token: buyer.adminToken },
    );
    const ids = market.body.manifests.map((m: { id: string }) => m.id);
    expect(ids).toContain(shown);
    expect(ids).not.toContain(draft);
    expect(ids).not.toContain(gone);
  });

  test('price filters are exact decimals and inclusive; categories with counts; min above max is 422', async () => {
    const org = await signUp(t);
    const category = `prices-${Date.now()}`;
    const other = `${category}-other`;
    for (const [price, cat] of [
      ['9.99', category],
      ['10.00', category],
      ['10.01', category],
      ['10.00', other],
    ] as const) {
      await publish(org, await create(org, template({ price, category: cat, name: `Priced ${category}` })));
    }
    const browse = async (query: string) => {
      const response = await t.request(
        'GET',
        `/marketplace/manifests?q=${encodeURIComponent(`Priced ${category}`)}&${query}`,
        { token: org.adminToken },
      );
      expect(response.status).toBe(200);
      return response.body;
    };
    const exact = await browse(`category=${category}&min_price=10&max_price=10.00`);
    expect(exact.manifests.map((m: { price: string }) => m.price)).toEqual(['10.00']);
    expect(exact.filters).toEqual({
      category,
      min_price: '10.00',
      max_price: '10.00',
      categories: [
        { category, count: 1 },
        { category: other, count: 1 },
      ],
    });
    const above = await browse(`category=${category}&min_price=10.01`);
    expect(above.manifests.map((m: { price: string }) => m.price)).toEqual(['10.01']);
    const all = await browse('');
    expect(all.pagination.total).toBe(4);
    expect(all.filters.categories).toEqual([
      { category, count: 3 },
      { category: other, count: 1 },
    ]);

    const bad = await t.request('GET', '/marketplace/manifests?min_price=11&max_price=10.99', {
      token: org.adminToken,
    });
    expect(bad.status).toBe(422);
    expect(fields(bad.body)).toEqual(['min_price']);
    for (const query of ['min_price=abc', 'max_price=-1', 'min_price=1.001']) {
      expect((await t.request('GET', `/marketplace/manifests?${query}`, { token: org.adminToken })).status).toBe(422);
    }
  });

  test('q matches words of the name or description, and LIKE wildcards match themselves', async () => {
    const org = await signUp(t);
    const marker = `zq${Date.now()}`;
    await publish(
      org,
      await create(org, template({ name: `Invoice helper ${marker}`, description: '100% automatic' })),
    );
    const search = async (q: string) =>
      (await t.request('GET', `/marketplace/manifests?q=${encodeURIComponent(q)}`, { token: org.adminToken })).body
        .manifests.length;
    expect(await search(marker.toUpperCase())).toBe(1);
    expect(await search(`${marker.slice(0, 4)}_`)).toBe(0);
    expect(await search('100% automatic')).toBeGreaterThanOrEqual(1);
  });
});

describe('purchases', () => {
  async function published(org: OrgFixture, overrides: Record<string, unknown> = {}) {
    const id = await create(org, template(overrides));
    await publish(org, id);
    return id;
  }
  const buy = (org: OrgFixture, body: Record<string, unknown>, headers: Record<string, string> = {}) =>
    t.request('POST', '/marketplace/purchase', { token: org.adminToken, body, headers });
  /** The transaction ids of the org's purchases (not its sales), from the API. */
  const purchasesOf = async (org: OrgFixture): Promise<string[]> => {
    const listed = await t.request('GET', '/marketplace/transactions', { token: org.adminToken });
    expect(listed.status).toBe(200);
    return listed.body.items
      .filter((x: { buyer_org_id: string }) => x.buyer_org_id === org.orgId)
      .map((x: { transaction_id: string }) => x.transaction_id);
  };

  test('free: completes at once and registers a pending manifest that needs an operator before the gateway allows anything', async () => {
    const publisher = await signUp(t);
    const buyer = await signUp(t);
    const id = await published(publisher, {
      price: '0',
      constraints: { max_actions_per_hour: 5, max_actions_per_day: 50 },
    });
    const bought = await buy(buyer, { manifest_id: id, payment_method: 'free', agent_id: 'bought-refunds' });
    expect(bought.status).toBe(201);
    expect(bought.body).toMatchObject({
      transaction_id: expect.stringMatching(/^txn_/),
      status: 'completed',
      manifest: {
        status: 'pending',
        svc_id: 'bought-refunds',
        capabilities: { requested: ['billing:read', 'billing:refund'], approved: [] },
        constraints: { max_actions_per_hour: 5, max_actions_per_day: 50 },
      },
    });
    const manifestId = bought.body.manifest.manifest_id;
    const agent = await t.request('GET', '/api/v1/agents/bought-refunds', { token: buyer.adminToken });
    expect(agent.body).toMatchObject({
      status: 'active',
      current_manifest: { manifest_id: manifestId, status: 'pending' },
    });

    // Nothing runs until an operator approves.
    await t.request('POST', `/api/v1/orgs/${buyer.orgId}/tools`, {
      token: buyer.adminToken,
      body: { action_type: 'billing', connector: 'mock', config: { response: { ok: true } } },
    });
    const key = await t.request('POST', `/api/v1/orgs/${buyer.orgId}/api-keys`, {
      token: buyer.adminToken,
      body: { name: 'k', scopes: ['gateway:execute'] },
    });
    const act = () =>
      t.request('POST', '/api/v1/gateway/execute', {
        apiKey: key.body.key,
        body: {
          svc_id: 'bought-refunds',
          agent_id: 'bought-refunds',
          action: { type: 'billing', tool: 'read', params: {} },
        },
      });
    expect((await act()).body.reasons.map((r: { code: string }) => r.code)).toContain('MANIFEST_NOT_ACTIVE');
    const approved = await t.request('POST', `/api/v1/orgs/${buyer.orgId}/manifests/${manifestId}/approve`, {
      token: buyer.adminToken,
      body: {},
    });
    expect(approved.status).toBe(200);
    expect((await act()).body.decision).toBe('allow');

    // The publisher sees one completed purchase; the buyer sees no count of another org's template.
    expect((await t.request('GET', `/manifests/${id}`, { token: publisher.adminToken })).body.metadata.purchases).toBe(
      1,
    );
    expect(
      (await t.request('GET', `/manifests/${id}`, { token: buyer.adminToken })).body.metadata.purchases,
    ).toBeNull();
  });

  test('payment methods: free only at price 0, unknown ones listed, drafts not for sale', async () => {
    const publisher = await signUp(t);
    const buyer = await signUp(t);
    const priced = await published(publisher, { price: '12.50' });
    const free = await buy(buyer, { manifest_id: priced, payment_method: 'free' });
    expect(free.status).toBe(422);
    expect(free.body.error.details.errors).toEqual([
      { field: 'payment_method', message: expect.stringMatching(/only for templates priced 0.*12\.50 EUR/) },
    ]);
    const card = await buy(buyer, { manifest_id: priced, payment_method: 'card' });
    expect(card.status).toBe(422);
    expect(card.body.error.message).toMatch(/free .*invoice/);
    const draft = await create(publisher);
    expect((await buy(buyer, { manifest_id: draft, payment_method: 'invoice' })).status).toBe(404);
    const ownDraft = await create(buyer);
    expect((await buy(buyer, { manifest_id: ownDraft, payment_method: 'invoice' })).status).toBe(409);
    expect((await buy(buyer, { manifest_id: priced, payment_method: 'invoice', agent_id: 'Bad Id' })).status).toBe(422);
  });

  test('invoice: pending until the publisher’s admin confirms; the price is the server’s; buyers cannot confirm', async () => {
    const publisher = await signUp(t);
    const buyer = await signUp(t);
    const id = await published(publisher, { price: '12.50', name: 'Invoice Me' });
    const bought = await buy(buyer, { manifest_id: id, payment_method: 'invoice', price: '0.01' });
    expect(bought.status).toBe(201);
    expect(bought.body).toEqual({ transaction_id: expect.any(String), status: 'pending', manifest: null });
    const txn = bought.body.transaction_id;
    const confirmPath = `/marketplace/transactions/${txn}/confirm`;
    expect((await t.request('POST', confirmPath, { token: buyer.adminToken, body: {} })).status).toBe(404);
    const operator = await addUser(t, publisher, 'operator');
    expect((await t.request('POST', confirmPath, { token: await login(t, operator.email), body: {} })).status).toBe(
      403,
    );

    const confirmed = await t.request('POST', confirmPath, { token: publisher.adminToken, body: {} });
    expect(confirmed.status).toBe(200);
    expect(confirmed.body).toMatchObject({
      transaction_id: txn,
      status: 'completed',
      amount: '12.50',
      currency: 'EUR',
      payment_method: 'invoice',
      agent_id: 'invoice-me',
      registered_manifest_id: expect.any(String),
      buyer_org_id: buyer.orgId,
      publisher_org_id: publisher.orgId,
      confirmed_by: publisher.adminEmail,
    });
    const again = await t.request('POST', confirmPath, { token: publisher.adminToken, body: {} });
    expect(again.status).toBe(409);
    expect(again.body.error).toMatchObject({
      code: 'INVALID_STATE_TRANSITION',
      details: { from: 'completed', to: 'completed' },
    });
    const manifest = await t.request(
      'GET',
      `/api/v1/orgs/${buyer.orgId}/manifests/${confirmed.body.registered_manifest_id}`,
      { token: buyer.adminToken },
    );
    expect(manifest.body).toMatchObject({ status: 'pending', svc_id: 'invoice-me' });

    for (const org of [buyer, publisher]) {
      const listed = await t.request('GET', '/marketplace/transactions', { token: org.adminToken });
      expect(listed.body.items.map((x: { transaction_id: string }) => x.transaction_id)).toEqual([txn]);
    }
  });

  test('one Idempotency-Key: concurrent purchases make one transaction and one manifest; a retry after it completed answers it', async () => {
    const publisher = await signUp(t);
    const buyer = await signUp(t);
    const id = await published(publisher, { price: '0' });
    const body = { manifest_id: id, payment_method: 'free', agent_id: 'idempotent-agent' };
    const key = { 'Idempotency-Key': `purchase-${Date.now()}` };
    const results = await Promise.all(Array.from({ length: 5 }, () => buy(buyer, body, key)));
    // The one that ran answers 201; the others found it running (409) or completed (its transaction).
    expect(results.every((r) => r.status === 201 || (r.status === 409 && r.body.error.code === 'CONFLICT'))).toBe(true);
    const created = results.filter((r) => r.status === 201);
    expect(created.length).toBeGreaterThanOrEqual(1);
    expect(new Set(created.map((r) => r.body.transaction_id)).size).toBe(1);
    const retry = await buy(buyer, body, key);
    expect(retry.status).toBe(201);
    expect(retry.body).toEqual(created[0].body);
    expect(await purchasesOf(buyer)).toEqual([created[0].body.transaction_id]);
    const manifests = await t.request('GET', `/api/v1/orgs/${buyer.orgId}/manifests`, { token: buyer.adminToken });
    expect(manifests.body.items.map((m: { svc_id: string }) => m.svc_id)).toEqual(['idempotent-agent']);
    // Without a key, a second purchase for the same agent meets the one-pending-manifest rule.
    const second = await buy(buyer, body);
    expect(second.status).toBe(409);
    expect(second.body.error.message).toMatch(/already has a pending manifest/);
  });

  test('an Idempotency-Key sent with a different purchase is 422 IDEMPOTENCY_KEY_REUSED, and the other purchase is not made', async () => {
    const publisher = await signUp(t);
    const buyer = await signUp(t);
    const first = await published(publisher, { price: '0', name: 'First template' });
    const other = await published(publisher, { price: '0', name: 'Other template' });
    const key = { 'Idempotency-Key': `reuse-${Date.now()}` };
    const bought = await buy(buyer, { manifest_id: first, payment_method: 'free' }, key);
    expect(bought.status).toBe(201);

    for (const different of [
      { manifest_id: other, payment_method: 'free' },
      { manifest_id: first, payment_method: 'invoice' },
      { manifest_id: first, payment_method: 'free', agent_id: 'another-agent' },
      // The default agent id spelled out is still another request than the one sent.
      { manifest_id: first, payment_method: 'free', agent_id: 'first-template' },
    ]) {
      const reused = await buy(buyer, different, key);
      expect(reused.status).toBe(422);
      expect(reused.body).toEqual({
        error: { code: 'IDEMPOTENCY_KEY_REUSED', message: expect.stringMatching(/different purchase/), details: {} },
      });
    }
    const graphql = await t.graphql(
      'mutation ($id: ID!) { marketplace_purchase(manifest_id: $id, payment_method: "free") { transaction_id } }',
      { id: other },
      { token: buyer.adminToken, headers: key },
    );
    expect(graphql.body.data).toBeNull();
    expect(graphql.body.errors[0].extensions.code).toBe('IDEMPOTENCY_KEY_REUSED');

    // Nothing of the other template was bought: one transaction, no manifest for its agent.
    expect(await purchasesOf(buyer)).toEqual([bought.body.transaction_id]);
    const manifests = await t.request('GET', `/api/v1/orgs/${buyer.orgId}/manifests`, { token: buyer.adminToken });
    expect(manifests.body.items.map((m: { svc_id: string }) => m.svc_id)).toEqual(['first-template']);
    // The first request again still answers its transaction.
    const again = await buy(buyer, { manifest_id: first, payment_method: 'free' }, key);
    expect(again.status).toBe(201);
    expect(again.body.transaction_id).toBe(bought.body.transaction_id);
  });

  test('a key carried over from before request hashes were kept answers its transaction, whatever the request', async () => {
    const publisher = await signUp(t);
    const buyer = await signUp(t);
    const id = await published(publisher, { price: '0', name: 'Legacy template' });
    const key = { 'Idempotency-Key': `legacy-${Date.now()}` };
    const bought = await buy(buyer, { manifest_id: id, payment_method: 'free' }, key);
    expect(bought.status).toBe(201);
    // What the migration leaves for a key of an earlier purchase: completed, its request unknown.
    await t.database.db.sql.query('UPDATE purchase_idempotency_keys SET request_hash = NULL WHERE org_id = $1', [
      buyer.orgId,
    ]);
    const retried = await buy(buyer, { manifest_id: id, payment_method: 'invoice', agent_id: 'other-agent' }, key);
    expect(retried.status).toBe(201);
    expect(retried.body.transaction_id).toBe(bought.body.transaction_id);
    expect(await purchasesOf(buyer)).toEqual([bought.body.transaction_id]);
  });

  test('a key whose purchase is still running: the same request is 409 CONFLICT, another one 422; an abandoned claim is taken over', async () => {
    const publisher = await signUp(t);
    const buyer = await signUp(t);
    const id = await published(publisher, { price: '0' });
    const body = { manifest_id: id, payment_method: 'free', agent_id: 'running-agent' };
    const key = `running-${Date.now()}`;
    // What a request in flight (here or on another process) holds: the key claimed, no transaction yet.
    await t.database.db.sql.query(
      'INSERT INTO purchase_idempotency_keys (org_id, key, request_hash) VALUES ($1, $2, $3)',
      [buyer.orgId, key, purchaseRequestHash(body)],
    );
    const running = await buy(buyer, body, { 'Idempotency-Key': key });
    expect(running.status).toBe(409);
    expect(running.body.error).toMatchObject({ code: 'CONFLICT', message: expect.stringMatching(/still running/) });
    expect((await buy(buyer, { ...body, agent_id: 'another-agent' }, { 'Idempotency-Key': key })).body.error.code).toBe(
      'IDEMPOTENCY_KEY_REUSED',
    );
    expect(await purchasesOf(buyer)).toEqual([]);

    // The process that claimed it stopped a while ago: the claim lapses and the retry runs.
    await t.database.db.sql.query(
      "UPDATE purchase_idempotency_keys SET claimed_at = now() - interval '2 minutes' WHERE key = $1",
      [key],
    );
    const retried = await buy(buyer, body, { 'Idempotency-Key': key });
    expect(retried.status).toBe(201);
    expect(await purchasesOf(buyer)).toEqual([retried.body.transaction_id]);
  });

  (backend === 'postgresql' ? test : test.skip)(
    'while the first purchase is held mid-way, a second one with its key is 409 CONFLICT; the first then completes',
    async () => {
      // PostgreSQL only: the first purchase is held inside its database transaction, where it
      // registers the manifest, by a lock on the manifests taken on another connection; PGlite (one
      // connection) cannot hold one request while serving another.
      const publisher = await signUp(t);
      const buyer = await signUp(t);
      const id = await published(publisher, { price: '0' });
      const body = { manifest_id: id, payment_method: 'free', agent_id: 'held-agent' };
      const key = { 'Idempotency-Key': `held-${Date.now()}` };
      const [first, second] = await t.database.db.sql.transaction(async (tx) => {
        await tx.query('LOCK TABLE manifests IN EXCLUSIVE MODE');
        const firstPurchase = buy(buyer, body, key);
        await waitFor(async () => {
          const [row] = await t.database.db.sql.query<{ waiting: number }>(
            "SELECT count(*)::int AS waiting FROM pg_locks WHERE NOT granted AND relation = 'manifests'::regclass",
          );
          return row.waiting > 0;
        }, 'the first purchase to wait for the lock');
        // Bounded, so that a second purchase that waited for the first would end the lock and fail.
        const secondPurchase = await Promise.race([
          buy(buyer, body, key),
          new Promise<never>((_, reject) =>
            setTimeout(() => reject(new Error('the second purchase waited for the first')), 15_000).unref(),
          ),
        ]);
        return [firstPurchase, secondPurchase] as const;
      });
      expect(second.status).toBe(409);
      expect(second.body.error.code).toBe('CONFLICT');
      const completed = await first;
      expect(completed.status).toBe(201);
      expect(await purchasesOf(buyer)).toEqual([completed.body.transaction_id]);
      expect((await buy(buyer, body, key)).body.transaction_id).toBe(completed.body.transaction_id);
    },
  );

  test('a purchase that failed leaves its key unused: the retry, corrected or once the cause is gone, runs', async () => {
    const publisher = await signUp(t);
    const buyer = await signUp(t);
    const priced = await published(publisher, { price: '12.50', name: 'Priced template' });
    const key = { 'Idempotency-Key': `failed-${Date.now()}` };
    // 422: `free` is only for a price of 0. The corrected request with the same key is bought.
    expect((await buy(buyer, { manifest_id: priced, payment_method: 'free' }, key)).status).toBe(422);
    const corrected = await buy(buyer, { manifest_id: priced, payment_method: 'invoice' }, key);
    expect(corrected.status).toBe(201);
    expect(corrected.body.status).toBe('pending');

    // 409: a draft of the buyer's own. Once published, the same request with the same key runs.
    const draft = await create(buyer, template({ price: '0', name: 'Own draft' }));
    const draftKey = { 'Idempotency-Key': `draft-${Date.now()}` };
    expect((await buy(buyer, { manifest_id: draft, payment_method: 'free' }, draftKey)).status).toBe(409);
    await publish(buyer, draft);
    const later = await buy(buyer, { manifest_id: draft, payment_method: 'free' }, draftKey);
    expect(later.status).toBe(201);
    expect((await purchasesOf(buyer)).sort()).toEqual(
      [corrected.body.transaction_id, later.body.transaction_id].sort(),
    );
  });
});
