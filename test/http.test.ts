import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import type { Principal } from '../src/authz/authz.js';
import { openDatabase, type Database } from '../src/db/database.js';
import type { AppError } from '../src/errors.js';
import { createLogger } from '../src/logger.js';
import { backend, createTestDatabase, type TestDatabase } from './support/database.js';
import { startTestApp, type TestApp, type TestResponse } from './support/app.js';
import { PASSWORD, createKey, signUp } from './support/fixtures.js';

const logLines: Record<string, unknown>[] = [];
const sink = new Writable({
  write(chunk, _encoding, done) {
    for (const line of String(chunk).split('\n').filter(Boolean)) logLines.push(JSON.parse(line));
    done();
  },
});

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({}, { logger: createLogger('info', sink) });
});
afterAll(() => t.close());

describe('health', () => {
  test('liveness and readiness', async () => {
    const live = await t.request('GET', '/healthz');
    expect(live.status).toBe(200);
    expect(live.body).toEqual({ status: 'ok' });
    const ready = await t.request('GET', '/readyz');
    expect(ready.status).toBe(200);
    expect(ready.body).toEqual({ status: 'ok', checks: { database: true } });
  });

  test('readiness and requests are 503 SERVICE_UNAVAILABLE with Retry-After when the database is gone, logged as a warning', async () => {
    const broken = await startTestApp({}, { logger: createLogger('info', sink) });
    const org = await signUp(broken);
    await broken.database.db.close();
    try {
      const ready = await broken.request('GET', '/readyz');
      expect(ready.status).toBe(503);
      expect(ready.body).toEqual({ status: 'unavailable', checks: { database: false } });
      const failing = await broken.request('GET', `/api/v1/orgs/${org.orgId}`, { token: org.adminToken });
      expect(failing.status).toBe(503);
      expect(failing.headers.get('retry-after')).toBe('2');
      expect(failing.body.error.code).toBe('SERVICE_UNAVAILABLE');
      expect(failing.text).not.toMatch(/select|prisma|pglite|pg\b|stack|at \w+ \(/i);
      const requestId = failing.headers.get('x-request-id');
      // An outage is expected, not a bug: a warning with the reason, no stack.
      const logged = logLines.filter((l) => l.request_id === requestId);
      expect(
        logged.filter((l) => l.level === 40 && l.msg === 'database unavailable' && typeof l.reason === 'string').length,
      ).toBeGreaterThanOrEqual(1);
      expect(logged.filter((l) => Number(l.level) >= 50)).toEqual([]);
    } finally {
      await broken.app.stop();
      await broken.database.close().catch(() => undefined);
    }
  });

  test('a query that fails for any other reason is a bare 500 INTERNAL_ERROR, its cause logged with the request id', async () => {
    const broken = await startTestApp({}, { logger: createLogger('info', sink) });
    const org = await signUp(broken);
    // A schema the code does not expect: the query fails as a bug would, not as an outage.
    await broken.database.db.sql.exec('ALTER TABLE organizations RENAME TO organizations_moved');
    try {
      const failing = await broken.request('GET', `/api/v1/orgs/${org.orgId}`, { token: org.adminToken });
      expect(failing.status).toBe(500);
      expect(failing.body).toEqual({
        error: { code: 'INTERNAL_ERROR', message: 'An internal error occurred', details: {} },
      });
      expect(failing.text).not.toMatch(/select|prisma|pglite|pg\b|stack|at \w+ \(|organizations/i);
      const requestId = failing.headers.get('x-request-id');
      expect(requestId).toMatch(/^req_/);
      // The cause is logged, with the request id, for the operator rather than the caller.
      const logged = logLines.filter((l) => l.request_id === requestId && l.level === 50);
      expect(logged.length).toBeGreaterThanOrEqual(1);
      expect(logged[0].err).toBeDefined();
    } finally {
      await broken.app.stop();
      await broken.database.close().catch(() => undefined);
    }
  });
});

describe('request errors', () => {
  test('malformed JSON is 400 BAD_REQUEST', async () => {
    const response = await t.request('POST', '/api/v1/orgs', { body: '{"name": "x",' });
    expect(response.status).toBe(400);
    expect(response.body).toEqual({ error: { code: 'BAD_REQUEST', message: expect.any(String), details: {} } });
  });

  test('a JSON body that is not an object is 422', async () => {
    const response = await t.request('POST', '/api/v1/auth/login', { body: '["a"]' });
    expect(response.status).toBe(422);
    expect(response.body.error.details.errors).toEqual([{ field: 'body', message: 'must be a JSON object' }]);
  });

  test('a body over 1 MiB is 413, with or without Content-Length', async () => {
    const big = JSON.stringify({ name: 'x'.repeat(1024 * 1024), slug: 'big' });
    const declared = await t.request('POST', '/api/v1/orgs', { body: big });
    expect(declared.status).toBe(413);
    expect(declared.body.error.code).toBe('PAYLOAD_TOO_LARGE');
    const chunks = new TextEncoder().encode(big);
    const stream = new ReadableStream({
      start(controller) {
        for (let i = 0; i < chunks.length; i += 65536) controller.enqueue(chunks.slice(i, i + 65536));
        controller.close();
      },
    });
    const streamed = await t.app.yoga.fetch('http://localhost/api/v1/orgs', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: stream,
      duplex: 'half',
    } as RequestInit);
    expect(streamed.status).toBe(413);
    expect((await streamed.json()).error.code).toBe('PAYLOAD_TOO_LARGE');
  });

  test("/graphql: a body over 1 MiB is 413 too, with or without Content-Length (our limit, not yoga's)", async () => {
    const big = JSON.stringify({ query: `{ __typename }${' '.repeat(1024 * 1024)}` });
    const declared = await t.app.yoga.fetch('http://localhost/graphql', {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'content-length': String(big.length) },
      body: big,
    });
    expect(declared.status).toBe(413);
    expect((await declared.json()).error.code).toBe('PAYLOAD_TOO_LARGE');
    const chunks = new TextEncoder().encode(big);
    const streamed = await t.app.yoga.fetch('http://localhost/graphql', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: new ReadableStream({
        start(controller) {
          for (let i = 0; i < chunks.length; i += 65536) controller.enqueue(chunks.slice(i, i + 65536));
          controller.close();
        },
      }),
      duplex: 'half',
    } as RequestInit);
    expect(streamed.status).toBe(413);
    expect((await streamed.json()).error.code).toBe('PAYLOAD_TOO_LARGE');
    // Just under the limit is a GraphQL request like any other.
    const fits = await t.graphql(`{ __typename }${' '.repeat(1024 * 1024 - 200)}`);
    expect(fits.body.data).toEqual({ __typename: 'Query' });
  });

  test('credentials are checked before the body: an anonymous invalid body is 401, not 422', async () => {
    const org = await signUp(t);
    const missing = await t.request('POST', `/api/v1/orgs/${org.orgId}/users`, { body: {} });
    expect(missing.status).toBe(401);
    expect(missing.body.detail.code).toBe('AUTHENTICATION_REQUIRED');
    const garbage = await t.request('POST', `/api/v1/orgs/${org.orgId}/api-keys`, { body: '{not json', token: 'nope' });
    expect(garbage.status).toBe(401);
    expect(garbage.body.detail.code).toBe('INVALID_TOKEN');
  });

  test('query-string copies of body fields are ignored on POST', async () => {
    const response = await t.request(
      'POST',
      `/api/v1/orgs?name=Q&slug=from-query&admin_email=q@q.example&admin_password=${encodeURIComponent(PASSWORD)}`,
      { body: {} },
    );
    expect(response.status).toBe(422);
  });

  test('X-Request-Id is echoed when sane and generated otherwise', async () => {
    const echoed = await t.request('GET', '/healthz', { headers: { 'x-request-id': 'trace-123.abc' } });
    expect(echoed.headers.get('x-request-id')).toBe('trace-123.abc');
    const replaced = await t.request('GET', '/healthz', { headers: { 'x-request-id': 'bad id with spaces' } });
    expect(replaced.headers.get('x-request-id')).toMatch(/^req_[0-9a-f]{24}$/);
  });
});

describe('operator rate limit', () => {
  /**
   * Each request got a count of its own, without a gap or a repeat, and was refused exactly past
   * the limit. A minute boundary in the middle splits the requests over two windows: each is
   * checked alone.
   */
  function expectOneCountEach(responses: TestResponse[], limit: number) {
    const windows = new Map<string | null, TestResponse[]>();
    for (const response of responses) {
      const reset = response.headers.get('x-ratelimit-reset');
      windows.set(reset, [...(windows.get(reset) ?? []), response]);
    }
    for (const inWindow of windows.values()) {
      const counts = inWindow.map((r) =>
        r.status === 200 ? limit - Number(r.headers.get('x-ratelimit-remaining')) : r.body.error.details.current,
      );
      const sorted = [...counts].sort((a, b) => a - b);
      expect(sorted).toEqual(sorted.map((_, i) => sorted[0] + i));
      for (const [i, response] of inWindow.entries()) expect(response.status).toBe(counts[i] <= limit ? 200 : 429);
    }
  }

  test('the counts are kept in an unlogged table of their own, one row per org and minute (decision 0074)', async () => {
    const org = await signUp(t);
    for (let i = 0; i < 3; i++) {
      expect((await t.request('GET', `/api/v1/orgs/${org.orgId}`, { token: org.adminToken })).status).toBe(200);
    }
    const [table] = await t.database.db.sql.query<{ relpersistence: string }>(
      "SELECT relpersistence FROM pg_class WHERE relname = 'operator_rate_counters'",
    );
    // u: unlogged, p: permanent (logged).
    expect(table.relpersistence).toBe('u');
    const rows = await t.database.db.sql.query<{ count: number }>(
      'SELECT count FROM operator_rate_counters WHERE org_id = $1::uuid ORDER BY window_start',
      [org.orgId],
    );
    // The sign-up's own requests and these three, in this minute and maybe the one before.
    expect(rows.reduce((sum, row) => sum + row.count, 0)).toBeGreaterThanOrEqual(3);
    const logged = await t.database.db.sql.query("SELECT 1 FROM rate_counters WHERE bucket = 'operator:' || $1::text", [
      org.orgId,
    ]);
    expect(logged).toHaveLength(0);
  });

  test('a bearer token that checks out has its request counted; a refused one (logged out) counts nothing', async () => {
    const org = await signUp(t);
    const login = await t.request('POST', '/api/v1/auth/login', {
      body: { email: org.adminEmail, password: PASSWORD },
    });
    const loggedOut = login.body.access_token as string;
    expect((await t.request('POST', '/api/v1/auth/logout', { token: loggedOut })).status).toBe(204);
    // Summed over the windows: a minute boundary may pass between the requests.
    const counted = async () => {
      const [row] = await t.database.db.sql.query<{ total: number }>(
        'SELECT COALESCE(sum(count), 0)::int AS total FROM operator_rate_counters WHERE org_id = $1::uuid',
        [org.orgId],
      );
      return row.total;
    };
    const before = await counted();
    for (let i = 0; i < 3; i++) {
      const refused = await t.request('GET', `/api/v1/orgs/${org.orgId}`, { token: loggedOut });
      expect(refused.status).toBe(401);
      expect(refused.headers.get('x-ratelimit-limit')).toBeNull();
    }
    expect(await counted()).toBe(before);
    const answered = await t.request('GET', `/api/v1/orgs/${org.orgId}`, { token: org.adminToken });
    expect(answered.status).toBe(200);
    expect(answered.headers.get('x-ratelimit-limit')).toBe('1000');
    expect(Number(answered.headers.get('x-ratelimit-remaining'))).toBe(1000 - (await counted()));
    expect(await counted()).toBe(before + 1);
  });

  test('logged-out and valid tokens of one org checked together: only the valid ones count, each with a count of its own', async () => {
    const org = await signUp(t);
    const limit = 8;
    await t.request('PATCH', `/api/v1/orgs/${org.orgId}`, {
      token: org.adminToken,
      body: { operator_rate_limit_per_minute: limit },
    });
    const login = await t.request('POST', '/api/v1/auth/login', {
      body: { email: org.adminEmail, password: PASSWORD },
    });
    const loggedOut = login.body.access_token as string;
    expect((await t.request('POST', '/api/v1/auth/logout', { token: loggedOut })).status).toBe(204);
    // Interleaved, so that the bearer check's batches hold both kinds.
    const responses = await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        t.request('GET', `/api/v1/orgs/${org.orgId}`, { token: i % 2 ? loggedOut : org.adminToken }),
      ),
    );
    expect(responses.filter((_, i) => i % 2).map((r) => r.status)).toEqual(Array(20).fill(401));
    const valid = responses.filter((_, i) => i % 2 === 0);
    expectOneCountEach(valid, limit);
  });

  test('every authenticated response carries the X-RateLimit headers; over the limit is 429 with Retry-After', async () => {
    const org = await signUp(t);
    const limited = await t.request('PATCH', `/api/v1/orgs/${org.orgId}`, {
      token: org.adminToken,
      body: { operator_rate_limit_per_minute: 3 },
    });
    expect(limited.status).toBe(200);
    const seen: number[] = [];
    let last: TestResponse | undefined;
    for (let i = 0; i < 3; i++) {
      last = await t.request('GET', `/api/v1/orgs/${org.orgId}`, { token: org.adminToken });
      seen.push(last.status);
      if (last.status === 429) break;
    }
    // The PATCH itself was counted against the old limit; after it, windows may roll over at a minute
    // boundary, so read the counter rather than assume where it stands.
    expect(last!.headers.get('x-ratelimit-limit')).toBe('3');
    const reset = Number(last!.headers.get('x-ratelimit-reset'));
    expect(reset).toBeGreaterThan(Date.now() / 1000);
    expect(reset % 60).toBe(0);
    let over = last!;
    for (let i = 0; i < 5 && over.status !== 429; i++) {
      over = await t.request('GET', `/api/v1/orgs/${org.orgId}`, { token: org.adminToken });
    }
    expect(over.status).toBe(429);
    expect(over.body.error).toMatchObject({ code: 'POLICY_VIOLATION', details: { limit: 3, period: '1m' } });
    expect(over.body.error.details.current).toBeGreaterThan(3);
    expect(over.headers.get('x-ratelimit-remaining')).toBe('0');
    expect(Number(over.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect(Number(over.headers.get('retry-after'))).toBeLessThanOrEqual(60);
  });

  test('the count answers the quota as data; past the limit it throws 429 with Retry-After and the quota, which no body shows', async () => {
    const org = await signUp(t);
    await t.request('PATCH', `/api/v1/orgs/${org.orgId}`, {
      token: org.adminToken,
      body: { operator_rate_limit_per_minute: 3 },
    });
    // Only the org is read; a minute boundary may pass between the counts, so none assumes the count.
    const principal = { orgId: org.orgId } as Principal;
    const counted = await t.app.services.countOperatorRequests(principal);
    expect(counted).toEqual({ limit: 3, remaining: expect.any(Number), resetAt: expect.any(Number) });
    expect(counted.remaining).toBeLessThanOrEqual(2);
    expect(counted.resetAt % 60).toBe(0);
    const refused: AppError = await t.app.services.countOperatorRequests(principal, 10).then(
      () => {
        throw new Error('not refused');
      },
      (error: AppError) => error,
    );
    expect(refused).toMatchObject({
      code: 'POLICY_VIOLATION',
      message: 'Rate limit of 3 requests per minute exceeded',
    });
    expect(refused.quota).toEqual({ limit: 3, remaining: 0, resetAt: expect.any(Number) });
    expect(refused.extensions.http).toEqual({
      status: 429,
      headers: { 'Retry-After': expect.stringMatching(/^[1-9][0-9]*$/) },
    });
    expect(JSON.stringify(refused.toJSON())).not.toContain('quota');
  });

  test('API keys count against the org limit too; open routes carry no rate-limit headers', async () => {
    const org = await signUp(t);
    const { key } = await createKey(t, org, ['manifests:read']);
    const keyed = await t.request('GET', `/api/v1/orgs/${org.orgId}/users`, { apiKey: key });
    expect(keyed.status).toBe(403);
    expect(keyed.headers.get('x-ratelimit-limit')).toBe('1000');
    const open = await t.request('POST', '/api/v1/auth/login', { body: { email: org.adminEmail, password: PASSWORD } });
    expect(open.headers.get('x-ratelimit-limit')).toBeNull();
  });

  /** A second app instance on the test's database, as a second process would be. */
  async function secondInstance(): Promise<{ other: TestApp; close: () => Promise<void> }> {
    let second: Database | TestDatabase | undefined;
    let secondDb: Database;
    if (backend === 'postgresql') {
      // A second connection pool to the same database, as a second process would have.
      const url = (t.database as TestDatabase).url ?? undefined;
      const fresh = url ? undefined : await createTestDatabase();
      second = fresh;
      secondDb = url ? await openDatabase({ databaseUrl: url }) : fresh!.db;
      if (url) second = secondDb;
    } else {
      secondDb = t.database.db;
    }
    const other = await startTestApp({}, { db: secondDb });
    return {
      other,
      async close() {
        await other.app.stop();
        if (second && 'close' in second && backend === 'postgresql') await second.close();
      },
    };
  }

  test('two app instances on one database share the count', async () => {
    const { other, close } = await secondInstance();
    try {
      const org = await signUp(t);
      await t.request('PATCH', `/api/v1/orgs/${org.orgId}`, {
        token: org.adminToken,
        body: { operator_rate_limit_per_minute: 4 },
      });
      const statuses: number[] = [];
      for (let i = 0; i < 6; i++) {
        const via = i % 2 === 0 ? t : other;
        const response = await via.request('GET', `/api/v1/orgs/${org.orgId}`, { token: org.adminToken });
        statuses.push(response.status);
      }
      // Four allowed in a window across both instances (fewer if a minute boundary passed mid-test).
      expect(statuses.filter((s) => s === 200).length).toBeLessThanOrEqual(4 + 1);
      expect(statuses).toContain(429);
    } finally {
      await close();
    }
  });

  test('concurrent requests on two instances each get a count of their own: exactly the limit is admitted', async () => {
    // Each instance sends an org's concurrent requests in batches (one counter update for all that
    // arrive while one is in flight); the counts must still be one per request, without a gap.
    const { other, close } = await secondInstance();
    try {
      const org = await signUp(t);
      const limit = 25;
      await t.request('PATCH', `/api/v1/orgs/${org.orgId}`, {
        token: org.adminToken,
        body: { operator_rate_limit_per_minute: limit },
      });
      const responses = await Promise.all(
        Array.from({ length: 80 }, (_, i) =>
          (i % 2 ? other : t).request('GET', `/api/v1/orgs/${org.orgId}`, { token: org.adminToken }),
        ),
      );
      expectOneCountEach(responses, limit);
      expect(responses.filter((r) => r.status === 200).length).toBeLessThanOrEqual(2 * limit);
      expect(responses.filter((r) => r.status === 429).length).toBeGreaterThanOrEqual(80 - 2 * limit);
    } finally {
      await close();
    }
  });
});

describe('structured logs', () => {
  test('one JSON line per request with method, route, status, duration, request id and org id; no secrets', async () => {
    const org = await signUp(t);
    const { key } = await createKey(t, org, ['manifests:read']);
    logLines.length = 0;
    const response = await t.request('GET', `/api/v1/orgs/${org.orgId}/users`, {
      token: org.adminToken,
      headers: { 'x-request-id': 'log-test-1' },
    });
    expect(response.status).toBe(200);
    await t.request('POST', '/api/v1/auth/login', { body: { email: org.adminEmail, password: PASSWORD } });
    await t.request('GET', `/api/v1/orgs/${org.orgId}`, { apiKey: key });
    const requestLines = logLines.filter((l) => l.msg === 'request');
    expect(requestLines).toHaveLength(3);
    expect(requestLines[0]).toMatchObject({
      level: 30,
      request_id: 'log-test-1',
      method: 'GET',
      route: 'GET /api/v1/orgs/:org_id/users',
      status: 200,
      org_id: org.orgId,
      duration_ms: expect.any(Number),
    });
    const everything = JSON.stringify(logLines);
    expect(everything).not.toContain(PASSWORD);
    expect(everything).not.toContain(org.adminToken);
    expect(everything).not.toContain(key);
  });
});

describe('headers on the wire', () => {
  test('every error answer carries exactly one Content-Type (REST envelopes, the MCP endpoint)', async () => {
    const server = http.createServer(t.app.yoga);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as AddressInfo;
    const org = await signUp(t, 'wire');
    const contentTypes = (method: string, path: string, headers: Record<string, string> = {}, body?: string) =>
      new Promise<{ status: number; values: string[] }>((resolve, reject) => {
        const request = http.request({ host: '127.0.0.1', port, method, path, headers }, (response) => {
          const values = response.rawHeaders.filter((_, i, raw) => i % 2 === 1 && /^content-type$/i.test(raw[i - 1]));
          response.resume();
          response.on('end', () => resolve({ status: response.statusCode!, values }));
        });
        request.on('error', reject);
        request.end(body);
      });
    try {
      const json = { 'content-type': 'application/json' };
      const answers = [
        await contentTypes('GET', `/api/v1/orgs/${org.orgId}`),
        await contentTypes('GET', '/api/v1/nope'),
        await contentTypes('DELETE', '/api/v1/orgs', { authorization: `Bearer ${org.adminToken}` }),
        await contentTypes('POST', '/api/v1/orgs', json, '{"name": 42}'),
        await contentTypes('POST', '/api/v1/orgs', json, '{not json'),
        await contentTypes('POST', '/mcp/some-agent', json, '{}'),
      ];
      expect(answers.map((a) => a.status)).toEqual([401, 404, 405, 422, 400, 401]);
      for (const answer of answers) expect(answer.values).toHaveLength(1);
    } finally {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    }
  });
});
