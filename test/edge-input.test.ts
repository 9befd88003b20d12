/**
 * The edge rule for input the database cannot store (src/lib/storable-input.ts), over every REST
 * route: the cases are generated from the route table, so a new route is covered without a new
 * line here. NUL in a path parameter, a query value or a body string; an unpaired surrogate in a
 * body string; NUL in a body key; JSON nested 5,000 deep. Each is a 422 VALIDATION_ERROR naming the
 * field, never a 500, a reset connection or a hang.
 */
import { isNonNullType, type GraphQLSchema } from 'graphql';
import { restRoutes, streamRoutes, schema } from '../src/http/schema.js';
import { publicPath, type RestRoute } from '../src/api/rest-routes.js';
import { apiKeyScopes } from '../src/authz/authz.js';
import { startTestApp, type RequestOptions, type TestApp } from './support/app.js';
import { createKey, signUp, type OrgFixture } from './support/fixtures.js';

interface RouteCase {
  method: RestRoute['method'];
  path: string;
  auth: RestRoute['auth'];
  /** Arguments that may come from the query string (GET) or the JSON body (others). */
  args: string[];
  /** The whole body is one argument (manifest payloads). */
  wholeBody: boolean;
}

function routeCases(graphql: GraphQLSchema): RouteCase[] {
  const sofa = [...restRoutes].map(([fieldPath, route]) => {
    const [typeName, fieldName] = fieldPath.split('.');
    const type = typeName === 'Query' ? graphql.getQueryType() : graphql.getMutationType();
    const pathParams = [...route.path.matchAll(/:([a-z_]+)/g)].map((m) => m[1]);
    const args = type!.getFields()[fieldName].args.filter((a) => !pathParams.includes(a.name));
    // Required arguments first: the check must run before any "missing field" answer could.
    args.sort((a, b) => Number(isNonNullType(b.type)) - Number(isNonNullType(a.type)));
    return {
      method: route.method,
      path: publicPath(route),
      auth: route.auth,
      args: args.map((a) => a.name),
      wholeBody: Boolean(route.bodyArg),
    };
  });
  const streamed = streamRoutes.map((route) => ({
    method: route.method,
    path: `/api/v1${route.path}`,
    auth: route.auth,
    args: route.query.map((q) => q.name),
    wholeBody: false,
  }));
  return [...sofa, ...streamed];
}

const cases = routeCases(schema);
let t: TestApp;
let org: OrgFixture;
let key: string;

beforeAll(async () => {
  t = await startTestApp();
  org = await signUp(t, 'edge');
  await t.request('PATCH', `/api/v1/orgs/${org.orgId}`, {
    token: org.adminToken,
    body: { operator_rate_limit_per_minute: 100000 },
  });
  ({ key } = await createKey(t, org, [...apiKeyScopes]));
});
afterAll(() => t.close());

/** Credentials the route accepts; the edge check runs after authentication, before authorization. */
const credentials = (route: RouteCase): RequestOptions =>
  route.auth.includes('bearer') ? { token: org.adminToken } : route.auth.includes('apiKey') ? { apiKey: key } : {};

const pathOf = (route: RouteCase, poisoned?: string) =>
  route.path.replace(/:([a-z_]+)/g, (_, name: string) =>
    name === poisoned ? '%00' : name === 'org_id' ? org.orgId : 'x-1',
  );

function expectRefused(response: { status: number; body: any; text: string }, field: string | RegExp) {
  expect({ status: response.status, code: response.body?.error?.code }).toEqual({
    status: 422,
    code: 'VALIDATION_ERROR',
  });
  expect(response.body.error.details.errors[0].field).toEqual(
    typeof field === 'string' ? field : expect.stringMatching(field),
  );
}

const label = (r: RouteCase) => `${r.method} ${r.path}`;

describe.each(cases.map((r) => [label(r), r] as const))('%s', (_, route) => {
  const pathParams = [...route.path.matchAll(/:([a-z_]+)/g)].map((m) => m[1]);

  if (pathParams.length) {
    test.each(pathParams.map((p) => [p]))('NUL in the path parameter %s', async (param) => {
      expectRefused(
        await t.request(route.method, pathOf(route, param), {
          ...credentials(route),
          body: route.method === 'GET' ? undefined : {},
        }),
        param,
      );
    });
  }

  if (route.method === 'GET') {
    test.each((route.args.length ? route.args : ['q']).map((a) => [a]))(
      'NUL in the query parameter %s',
      async (arg) => {
        expectRefused(await t.request('GET', `${pathOf(route)}?${arg}=a%00b`, credentials(route)), arg);
      },
    );
    return;
  }

  const bodyFields = route.wholeBody || !route.args.length ? ['name'] : route.args;
  test.each(bodyFields.map((a) => [a]))('NUL and an unpaired surrogate in the body field %s', async (arg) => {
    for (const text of ['{"%s":"a\\u0000b"}', '{"%s":"x\\ud800"}', '{"%s":{"deep":["\\udc00"]}}']) {
      const body = text.replace('%s', arg);
      expectRefused(
        await t.request(route.method, pathOf(route), { ...credentials(route), body }),
        new RegExp(`^${arg}`),
      );
    }
  });

  test('NUL in a body key, and JSON nested 5,000 deep', async () => {
    expectRefused(
      await t.request(route.method, pathOf(route), { ...credentials(route), body: '{"a\\u0000":1}' }),
      'body',
    );
    const deep = `{"${bodyFields[0]}":${'['.repeat(5000)}${']'.repeat(5000)}}`;
    expectRefused(
      await t.request(route.method, pathOf(route), { ...credentials(route), body: deep }),
      new RegExp(`^${bodyFields[0]}`),
    );
  });
});

test('every declared route is covered', () => {
  expect(cases.length).toBe(restRoutes.size + streamRoutes.length);
  expect(cases.length).toBeGreaterThan(40);
});
