import { randomUUID } from 'node:crypto';
import { publicPath } from '../src/api/rest-routes.js';
import { restRoutes } from '../src/http/schema.js';
import { startTestApp, type TestApp } from './support/app.js';
import { createManifest, signUp, type OrgFixture } from './support/fixtures.js';

/**
 * REST validation errors (issue 14, client fidelity 4): every problem of a request in one 422,
 * each naming its field, in the facade's words; GraphQL's wording (`of required type "String!"`,
 * `Int cannot represent …`, `Variable "$reason"`) never reaches a REST client.
 */

let t: TestApp;
let org: OrgFixture;
beforeAll(async () => {
  t = await startTestApp();
  org = await signUp(t, 'wording');
});
afterAll(() => t.close());

const graphqlWording =
  /String!|Int!|Boolean!|"\$|Variable |of required type|cannot represent|does not exist in|not defined by type|non-nullable|Expected type/;
const problems = (body: { error: { details: { errors: { field: string; message: string }[] } } }) =>
  body.error.details.errors.map((e) => `${e.field}: ${e.message}`);

test('missing, mistyped, null and unknown fields are all listed at once, in plain words', async () => {
  const created = await t.request('POST', '/api/v1/orgs', { body: { name: 42, slug: true, admin_email: null } });
  expect(created.status).toBe(422);
  expect(problems(created.body)).toEqual([
    'name: must be a string',
    'slug: must be a string',
    'admin_email: must not be null',
    'admin_password: required',
  ]);
  const policy = await t.request('POST', '/api/v1/policies', {
    token: org.adminToken,
    body: { name: 'p', effect: 'forbid', target: { bogus: 1 }, rate_limit: { limit: 'a' } },
  });
  expect(problems(policy.body)).toEqual([
    'effect: must be one of deny, deny_result, label, rate_limit, redact, require_approval, require_confirmation',
    'target.bogus: is not a known field',
    'rate_limit.limit: must be an integer from -2147483648 to 2147483647',
    'rate_limit.per: required',
    'rate_limit.window_seconds: required',
  ]);
  const manifest = await createManifest(t, org);
  const rejected = await t.request('POST', `/api/v1/orgs/${org.orgId}/manifests/${manifest.manifestId}/reject`, {
    token: org.adminToken,
    body: {},
  });
  expect(rejected.body).toEqual({
    error: {
      code: 'VALIDATION_ERROR',
      message: 'The request body is invalid',
      details: { errors: [{ field: 'reason', message: 'required' }] },
    },
  });
});

describe('no route speaks GraphQL to a REST client', () => {
  const routes = [...restRoutes.values()].filter((route) => !route.bodyArg);
  test.each(routes.map((route) => ({ label: `${route.method} ${publicPath(route)}`, route })))(
    '$label',
    async ({ route }) => {
      const path = publicPath(route)
        .replace(':org_id', org.orgId)
        .replace(/:[a-z_]+/g, () => randomUUID());
      // Every argument of the wrong shape at once: objects where scalars go, and nothing where one is required.
      for (const body of [
        {},
        { name: { x: 1 }, limit: 'many', reason: 7, events: 5, scopes: {}, connector: [], config: 'x', enabled: 'yes' },
      ]) {
        const response = await t.request(route.method, route.method === 'GET' ? `${path}?limit=x` : path, {
          token: org.adminToken,
          body: route.method === 'GET' ? undefined : body,
        });
        expect(response.status).toBeLessThan(500);
        expect(response.text).not.toMatch(graphqlWording);
      }
    },
  );
});
