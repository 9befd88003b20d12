/**
 * /graphql limits (issue 9, defects 2 and 8): depth, aliases, tokens and cost are refused with a
 * 4xx before anything executes, an operation counts its cost against the operator rate limit, and
 * malformed input (subscriptions, bad GET variables, deep literals, text PostgreSQL cannot store)
 * is a 4xx in the usual envelope, never a 500.
 */
import { getIntrospectionQuery } from 'graphql';
import { startTestApp, type RequestOptions, type TestApp, type TestResponse } from './support/app.js';
import { PASSWORD, signUp, type OrgFixture } from './support/fixtures.js';

interface GraphQlBody {
  data?: Record<string, any> | null;
  errors?: { message: string; extensions: { code: string; details?: any } }[];
}

let t: TestApp;
let org: OrgFixture;
beforeAll(async () => {
  t = await startTestApp();
  org = await signUp(t, 'limits');
});
afterAll(() => t.close());

const graphql = (query: string, variables?: Record<string, unknown>, options: RequestOptions = {}) =>
  t.graphql<GraphQlBody>(query, variables, options);
const asAdmin = (query: string, variables?: Record<string, unknown>) =>
  graphql(query, variables, { token: org.adminToken });

/** A 4xx in the usual GraphQL envelope: `errors[].extensions.code`, no data. */
function expectRefused(response: TestResponse<GraphQlBody>, status: number, code: string, message?: RegExp) {
  expect(response.status).toBe(status);
  expect(response.body.data ?? null).toBeNull();
  expect(response.body.errors?.[0].extensions.code).toBe(code);
  if (message) expect(response.body.errors?.[0].message).toMatch(message);
}

const aliased = (count: number, selection: (i: number) => string) =>
  `query($org: ID!) { ${Array.from({ length: count }, (_, i) => selection(i)).join(' ')} }`;

describe('document limits', () => {
  test('depth: more than 10 levels is 422, before any field is looked at', async () => {
    const deep = `{ ${'a { '.repeat(11)}b${' }'.repeat(11)} }`;
    const response = await asAdmin(deep);
    expectRefused(response, 422, 'VALIDATION_ERROR', /depth limit of 10 exceeded, found 12/);
    expect(response.body.errors?.[0].extensions.details.errors).toEqual([
      { field: 'query', message: expect.any(String) },
    ]);
  });

  test('aliases: 20 are allowed, 21 are 422', async () => {
    const twenty = await asAdmin(
      aliased(20, (i) => `o${i}: organization(org_id: $org) { name }`),
      { org: org.orgId },
    );
    expect(twenty.status).toBe(200);
    expect(Object.keys(twenty.body.data ?? {})).toHaveLength(20);
    const more = await asAdmin(
      aliased(21, (i) => `o${i}: organization(org_id: $org) { name }`),
      { org: org.orgId },
    );
    expectRefused(more, 422, 'VALIDATION_ERROR', /Aliases limit of 20 exceeded, found 21/);
  });

  test('tokens: a document of more than 2000 tokens is 422, whatever it asks for', async () => {
    const response = await asAdmin(`{ ${'__typename '.repeat(2001)}}`);
    expectRefused(response, 422, 'VALIDATION_ERROR', /Token limit of 2000 exceeded/);
  });

  test('cost: a list costs by its limit, literal or variable; over the limit is 422', async () => {
    const records = (limit: string) =>
      `query($org: ID!${limit.startsWith('$') ? ', $limit: Int' : ''}) { organization(org_id: $org) { records(limit: ${limit}) { total items { record_id manifest { history { status } } } } } }`;
    const small = await asAdmin(records('10'), { org: org.orgId });
    expect(small.status).toBe(200);
    expect(small.body.data?.organization.records.total).toBe(0);
    // 100 (root) + 1 + 1000 × (item + manifest + 10 history entries) = 12101 > 10000
    const large = await asAdmin(records('1000'), { org: org.orgId });
    expectRefused(large, 422, 'VALIDATION_ERROR', /estimated cost of 12101 exceeds the limit of 10000/);
    const byVariable = await asAdmin(records('$limit'), { org: org.orgId, limit: 1000 });
    expectRefused(byVariable, 422, 'VALIDATION_ERROR', /estimated cost of 12101/);
    const smallByVariable = await asAdmin(records('$limit'), { org: org.orgId, limit: 10 });
    expect(smallByVariable.status).toBe(200);
  });

  test('a variable that does not fit its type is 422 naming it', async () => {
    const response = await asAdmin(
      'query($org: ID!, $limit: Int) { organization(org_id: $org) { records(limit: $limit) { total } } }',
      { org: org.orgId, limit: 'ten' },
    );
    expectRefused(response, 422, 'VALIDATION_ERROR');
    expect(response.body.errors?.[0].extensions.details.errors[0].field).toBe('variables.limit');
  });

  test('anonymous callers have the smaller budget: sign-up and login, not three logins at once', async () => {
    const logins = aliased(
      3,
      (i) => `l${i}: login(email: "nobody@example.com", password: "${PASSWORD}") { access_token }`,
    ).replace('query($org: ID!)', 'mutation');
    const response = await graphql(logins);
    expectRefused(response, 422, 'VALIDATION_ERROR', /estimated cost of 300 exceeds the limit of 200/);
  });

  test('without credentials, anything but sign-up and login is 401 before its cost is looked at', async () => {
    const expensive = `query($org: ID!) { organization(org_id: $org) { records(limit: 1000) { items { record_id } } } }`;
    const anonymous = await graphql(expensive, { org: org.orgId });
    expectRefused(anonymous, 401, 'AUTHENTICATION_REQUIRED');
    const badToken = await graphql(expensive, { org: org.orgId }, { token: 'not-a-token' });
    expectRefused(badToken, 401, 'INVALID_TOKEN');
    const viaFragment = await graphql(
      'query($org: ID!) { ...F } fragment F on Query { organization(org_id: $org) { name } }',
      { org: org.orgId },
    );
    expectRefused(viaFragment, 401, 'AUTHENTICATION_REQUIRED');
  });

  test('anonymous sign-up and login still work over GraphQL', async () => {
    const slug = `gql-${Date.now().toString(36)}`;
    const email = `admin@${slug}.example`;
    const created = await graphql(
      'mutation($slug: String!, $email: String!, $password: String!) { create_organization(name: "GraphQL org", slug: $slug, admin_email: $email, admin_password: $password) { org_id admin_user { email } } }',
      { slug, email, password: PASSWORD },
    );
    expect(created.status).toBe(200);
    expect(created.body.data?.create_organization.admin_user.email).toBe(email);
    const login = await graphql(
      'mutation($email: String!, $password: String!) { login(email: $email, password: $password) { access_token } }',
      {
        email,
        password: PASSWORD,
      },
    );
    expect(login.status).toBe(200);
    expect(login.body.data?.login.access_token).toEqual(expect.any(String));
  });
});

describe('introspection', () => {
  const introspection = getIntrospectionQuery({
    descriptions: true,
    specifiedByUrl: true,
    directiveIsRepeatable: true,
    schemaDescription: true,
    inputValueDeprecation: true,
  });

  test("GraphiQL's introspection query passes every limit, with and without credentials", async () => {
    for (const options of [{ token: org.adminToken }, {}]) {
      const response = await graphql(introspection, undefined, options);
      expect(response.status).toBe(200);
      expect(response.body.errors).toBeUndefined();
      expect(response.body.data?.__schema.types.map((type: { name: string }) => type.name)).toContain('Organization');
    }
  });
});

describe('bad input is a 4xx, never a 500', () => {
  test('a subscription is 422: the schema has none', async () => {
    const response = await graphql('subscription { x }');
    expectRefused(response, 422, 'VALIDATION_ERROR', /subscription operations are not supported/);
  });

  test('GET with variables that are not JSON is 400', async () => {
    const response = await t.request<GraphQlBody>('GET', '/graphql?query=%7B__typename%7D&variables=%7Bnot-json', {
      headers: { accept: 'application/json' },
    });
    expectRefused(response, 400, 'BAD_REQUEST', /variables/);
  });

  test('a literal nested 10,000 deep is 422; one within the token limit but over 64 levels too', async () => {
    const literal = (depth: number) => `${'['.repeat(depth)}1${']'.repeat(depth)}`;
    const huge = await asAdmin(
      `query($org: ID!) { validate_manifest(org_id: $org, manifest: ${literal(10_000)}) { valid } }`,
      { org: org.orgId },
    );
    expectRefused(huge, 422, 'VALIDATION_ERROR', /Token limit/);
    const deep = await asAdmin(
      `query($org: ID!) { validate_manifest(org_id: $org, manifest: ${literal(100)}) { valid } }`,
      { org: org.orgId },
    );
    expectRefused(deep, 422, 'VALIDATION_ERROR');
    expect(deep.body.errors?.[0].extensions.details.errors[0]).toEqual({
      field: expect.stringMatching(/^manifest\[0\]/),
      message: expect.stringMatching(/64 levels/),
    });
  });

  test.each([
    ['NUL', 'a\u0000b'],
    ['a lone surrogate', 'a\ud800b'],
  ])('%s in a variable is 422 naming the variable', async (_name, text) => {
    const response = await graphql(
      'mutation($email: String!) { login(email: $email, password: "x") { access_token } }',
      { email: text },
    );
    expectRefused(response, 422, 'VALIDATION_ERROR');
    expect(response.body.errors?.[0].extensions.details.errors).toEqual([
      { field: 'variables.email', message: expect.stringMatching(/NUL/) },
    ]);
  });

  test('NUL in a literal is 422 VALIDATION_ERROR naming the argument; a lone surrogate escape is 400', async () => {
    const nul = await graphql('mutation { login(email: "a\\u0000b", password: "x") { access_token } }');
    expectRefused(nul, 422, 'VALIDATION_ERROR');
    expect(nul.body.errors?.[0].extensions.details.errors).toEqual([
      { field: 'email', message: expect.stringMatching(/NUL/) },
    ]);
    const surrogate = await graphql('mutation { login(email: "a\\ud800b", password: "x") { access_token } }');
    expectRefused(surrogate, 400, 'BAD_REQUEST', /Invalid Unicode escape sequence/);
  });

  test('syntax errors are 400 and unknown fields 422, with their locations', async () => {
    const syntax = await graphql('{ organization(');
    expectRefused(syntax, 400, 'BAD_REQUEST', /Syntax Error/);
    const unknown = await graphql('{ nothing_here }');
    expectRefused(unknown, 422, 'VALIDATION_ERROR', /Cannot query field "nothing_here"/);
    expect((unknown.body.errors![0] as { locations?: unknown }).locations).toEqual([{ line: 1, column: 3 }]);
  });

  test('several operations without operationName are 422', async () => {
    const response = await graphql('query A { __typename } query B { __typename }');
    expectRefused(response, 422, 'VALIDATION_ERROR', /operationName/);
  });
});

describe('the operator rate limit counts the cost', () => {
  async function limitedOrg(perMinute: number) {
    const limited = await signUp(t, 'rate');
    const patched = await t.request('PATCH', `/api/v1/orgs/${limited.orgId}`, {
      token: limited.adminToken,
      body: { operator_rate_limit_per_minute: perMinute },
    });
    expect(patched.status).toBe(200);
    return limited;
  }

  /** Requests until the first 429 (at most `max`), with the last response. */
  async function untilRefused(send: () => Promise<TestResponse<GraphQlBody>>, max: number) {
    let allowed = 0;
    let last: TestResponse<GraphQlBody> | undefined;
    for (let i = 0; i < max; i++) {
      last = await send();
      if (last.status === 429) break;
      expect(last.status).toBe(200);
      allowed += 1;
    }
    return { allowed, last: last! };
  }

  test('an expensive operation counts as many requests as its cost is worth', async () => {
    const cheapOrg = await limitedOrg(30);
    const expensiveOrg = await limitedOrg(30);
    const cheap = () =>
      graphql(
        'query($org: ID!) { organization(org_id: $org) { name } }',
        { org: cheapOrg.orgId },
        { token: cheapOrg.adminToken },
      );
    // cost 100 + 1 + 1000 = 1101: eleven requests' worth
    const expensive = () =>
      graphql(
        'query($org: ID!) { organization(org_id: $org) { records(limit: 1000) { items { record_id } } } }',
        { org: expensiveOrg.orgId },
        { token: expensiveOrg.adminToken },
      );

    const first = await expensive();
    expect(first.status).toBe(200);
    expect(Number(first.headers.get('x-ratelimit-remaining'))).toBeLessThanOrEqual(30 - 11);
    const expensiveRun = await untilRefused(expensive, 10);
    const cheapRun = await untilRefused(cheap, 40);
    // A minute boundary during a run can only add allowed requests, so these hold regardless.
    expect(expensiveRun.last.status).toBe(429);
    expect(expensiveRun.allowed).toBeLessThan(cheapRun.allowed);
    expect(cheapRun.allowed).toBeGreaterThanOrEqual(28);

    const refused = expensiveRun.last;
    expect(refused.body.errors?.[0].extensions).toMatchObject({
      code: 'POLICY_VIOLATION',
      details: { limit: 30, period: '1m' },
    });
    expect(refused.headers.get('x-ratelimit-remaining')).toBe('0');
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
  });

  test('twenty aliased reads count twenty requests; a REST call counts one', async () => {
    const limited = await limitedOrg(1000);
    const rest = await t.request('GET', `/api/v1/orgs/${limited.orgId}`, { token: limited.adminToken });
    const before = Number(rest.headers.get('x-ratelimit-remaining'));
    const reads = await graphql(
      aliased(20, (i) => `o${i}: organization(org_id: $org) { name }`),
      { org: limited.orgId },
      { token: limited.adminToken },
    );
    expect(reads.status).toBe(200);
    const after = Number(reads.headers.get('x-ratelimit-remaining'));
    // Counted in the same minute, unless the window turned in between (then it starts again).
    if (reads.headers.get('x-ratelimit-reset') === rest.headers.get('x-ratelimit-reset'))
      expect(before - after).toBe(20);
    else expect(after).toBe(1000 - 20);
    const again = await t.request('GET', `/api/v1/records?limit=1000`, { token: limited.adminToken });
    expect(again.status).toBe(200);
    if (again.headers.get('x-ratelimit-reset') === reads.headers.get('x-ratelimit-reset')) {
      expect(Number(again.headers.get('x-ratelimit-remaining'))).toBe(after - 1);
    }
  });
});
