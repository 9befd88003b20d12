import { restRoutes, streamRoutes } from '../src/http/schema.js';
import { readFileSync } from 'node:fs';
import { renderContracts } from '../src/contracts.js';
import { startTestApp, type TestApp } from './support/app.js';
import { signUp } from './support/fixtures.js';
import { readyAgent } from './support/gateway.js';
import { OpenApiResponseChecker } from './support/openapi-validator.js';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

test('schema/schema.graphql and schema/openapi.json are what the code generates (run `npm run schema:print`)', () => {
  for (const [name, content] of Object.entries(renderContracts())) {
    const committed = readFileSync(new URL(`../schema/${name}`, import.meta.url), 'utf8');
    expect({ name, content: committed }).toEqual({ name, content });
  }
});

/** The unprefixed operations (docs/decisions/0021-templates-and-marketplace.md), mounted at the root. */
const unprefixedRoutes = [
  'POST /auth/login',
  'POST /auth/refresh',
  'GET /manifests',
  'POST /manifests',
  'GET /manifests/{id}',
  'POST /manifests/{id}/archive',
  'POST /manifests/{id}/publish',
  'GET /marketplace/manifests',
  'POST /marketplace/purchase',
  'GET /marketplace/transactions',
  'POST /marketplace/transactions/{transaction_id}/confirm',
];

/** The REST surface: exactly the operations the API documents (/openapi.json, docs/reference/), and no other. */
const expectedRoutes = [
  'POST /orgs',
  'GET /signup',
  'GET /orgs/{org_id}',
  'PATCH /orgs/{org_id}',
  'GET /orgs/{org_id}/users',
  'POST /orgs/{org_id}/users',
  'PATCH /orgs/{org_id}/users/{user_id}',
  'DELETE /orgs/{org_id}/users/{user_id}',
  'GET /orgs/{org_id}/sso',
  'PUT /orgs/{org_id}/sso',
  'DELETE /orgs/{org_id}/sso',
  'POST /auth/login',
  'POST /auth/refresh',
  'POST /auth/logout',
  'POST /auth/sso/exchange',
  'GET /orgs/{org_id}/api-keys',
  'POST /orgs/{org_id}/api-keys',
  'DELETE /orgs/{org_id}/api-keys/{key_id}',
  'GET /orgs/{org_id}/manifests',
  'POST /orgs/{org_id}/manifests',
  'POST /orgs/{org_id}/manifests/validate',
  'GET /orgs/{org_id}/manifests/by-svc/{svc_id}',
  'GET /orgs/{org_id}/manifests/{manifest_id}',
  'GET /orgs/{org_id}/manifests/{manifest_id}/history',
  'POST /orgs/{org_id}/manifests/{manifest_id}/approve',
  'POST /orgs/{org_id}/manifests/{manifest_id}/reject',
  'POST /orgs/{org_id}/manifests/{manifest_id}/suspend',
  'POST /orgs/{org_id}/manifests/{manifest_id}/reactivate',
  'POST /orgs/{org_id}/manifests/{manifest_id}/revoke',
  'GET /orgs/{org_id}/tools',
  'POST /orgs/{org_id}/tools',
  'GET /orgs/{org_id}/tools/{tool_id}',
  'PATCH /orgs/{org_id}/tools/{tool_id}',
  'DELETE /orgs/{org_id}/tools/{tool_id}',
  'POST /orgs/{org_id}/tools/{tool_id}/refresh',
  'POST /orgs/{org_id}/tools/{tool_id}/accept-definitions',
  'GET /orgs/{org_id}/tools/{tool_id}/connections',
  'POST /orgs/{org_id}/tools/{tool_id}/connections',
  'GET /orgs/{org_id}/tools/{tool_id}/connections/{connection_id}',
  'DELETE /orgs/{org_id}/tools/{tool_id}/connections/{connection_id}',
  'GET /orgs/{org_id}/webhooks',
  'POST /orgs/{org_id}/webhooks',
  'GET /orgs/{org_id}/webhooks/{webhook_id}',
  'PATCH /orgs/{org_id}/webhooks/{webhook_id}',
  'DELETE /orgs/{org_id}/webhooks/{webhook_id}',
  'GET /orgs/{org_id}/webhooks/{webhook_id}/deliveries',
  'POST /orgs/{org_id}/capability-tokens',
  'GET /orgs/{org_id}/capability-tokens',
  'POST /orgs/{org_id}/capability-tokens/{token_id}/revoke',
  'GET /orgs/{org_id}/audit-logs',
  'GET /orgs/{org_id}/audit-logs/export',
  'GET /records',
  'GET /records/export',
  'GET /records/checkpoint',
  'GET /records/checkpoint/verifier',
  'GET /records/consistency',
  'GET /records/{record_id}/proof',
  'GET /records/{record_id}',
  'GET /records/{record_id}/verify',
  'POST /gateway/execute',
  'POST /gateway/evaluate',
  'GET /gateway/approvals/{approval_id}',
  'GET /orgs/{org_id}/approvals',
  'GET /orgs/{org_id}/approvals/{approval_id}',
  'POST /orgs/{org_id}/approvals/{approval_id}/approve',
  'POST /orgs/{org_id}/approvals/{approval_id}/deny',
  'GET /policies',
  'POST /policies',
  'GET /policies/{policy_id}',
  'PUT /policies/{policy_id}',
  'DELETE /policies/{policy_id}',
  'GET /agents',
  'POST /agents',
  'GET /agents/{agent_id}',
  'DELETE /agents/{agent_id}',
  'POST /agents/{agent_id}/reactivate',
  'GET /agents/{agent_id}/grants',
  'DELETE /agents/{agent_id}/grants/{grant_id}',
];

describe('OpenAPI document', () => {
  let doc: any;
  beforeAll(async () => {
    const response = await t.request('GET', '/openapi.json');
    expect(response.status).toBe(200);
    doc = response.body;
  });

  const operations = () =>
    Object.entries<any>(doc.paths).flatMap(([path, methods]) =>
      Object.entries<any>(methods).map(([method, operation]) => ({
        key: `${method.toUpperCase()} ${path}`,
        operation,
      })),
    );

  test('is the committed schema/openapi.json, with this service as its server (what every test response is checked against)', () => {
    const committed = JSON.parse(readFileSync(new URL('../schema/openapi.json', import.meta.url), 'utf8'));
    expect({ ...doc, servers: undefined }).toEqual({ ...committed, servers: undefined });
  });

  test('lists exactly the named routes, with absolute paths from the root server', () => {
    expect(doc.openapi).toMatch(/^3\./);
    // The served document names the service's own address (PUBLIC_URL), so a generated client works as is.
    expect(doc.servers).toEqual([{ url: 'http://localhost:8000', description: expect.any(String) }]);
    // expectedRoutes name the versioned routes relative to /api/v1.
    const versioned = operations()
      .map((o) => o.key)
      .filter((key) => key.includes(' /api/v1/'))
      .map((key) => key.replace(' /api/v1/', ' /'));
    expect(versioned.sort()).toEqual([...expectedRoutes].sort());
    expect(
      operations()
        .filter((o) => !o.key.includes(' /api/v1/'))
        .map((o) => o.key),
    ).toEqual(
      [
        'GET /.well-known/jwks.json',
        'GET /.well-known/oauth-authorization-server',
        'GET /.well-known/oauth-protected-resource/mcp/{svc_id}',
        ...unprefixedRoutes.slice(0, 2),
        'GET /auth/sso/callback',
        'GET /auth/sso/{org_slug}',
        'GET /healthz',
        ...unprefixedRoutes.slice(2, -3),
        ...unprefixedRoutes.slice(-3),
        'GET /oauth/authorize',
        'POST /oauth/register',
        'POST /oauth/revoke',
        'POST /oauth/token',
        'GET /oauth/upstream-client.json',
        'GET /oauth/upstream/callback',
        'GET /oauth/upstream/start',
        'GET /readyz',
      ].sort((a, b) => a.slice(a.indexOf(' ')).localeCompare(b.slice(b.indexOf(' ')))),
    );
  });

  test('describes every tag and every operation', () => {
    expect(doc.tags.filter((tag: any) => !tag.description).map((tag: any) => tag.name)).toEqual([]);
    expect(
      operations()
        .filter((o) => !o.operation.summary || !o.operation.description)
        .map((o) => o.key),
    ).toEqual([]);
    const tags = new Set(doc.tags.map((tag: any) => tag.name));
    expect(
      operations()
        .filter((o) => !o.operation.tags?.every((tag: string) => tags.has(tag)))
        .map((o) => o.key),
    ).toEqual([]);
  });

  test('closed sets of values are enums, nullable ones with null among them', () => {
    const schemas = doc.components.schemas;
    expect(schemas.GatewayDecision.properties.decision.enum).toEqual(['allow', 'deny']);
    expect(schemas.GatewayReason.properties.code.enum).toEqual(
      expect.arrayContaining(['POLICY_DENIED', 'APPROVAL_REQUIRED', 'EXECUTION_INTERRUPTED']),
    );
    expect(schemas.ApprovalReason.properties.code.enum).toEqual(schemas.GatewayReason.properties.code.enum);
    expect(schemas.ToolError.properties.code.enum).toEqual(expect.arrayContaining(['TOOL_TIMEOUT', 'TOOL_MCP_ERROR']));
    expect(schemas.Tool.properties.connector.enum.sort()).toEqual(['http', 'mcp', 'mock']);
    expect(schemas.ApiKey.properties.scopes.items.enum).toContain('gateway:execute');
    expect(schemas.MatchedPolicy.properties.effect.enum.sort()).toEqual([
      'deny',
      'deny_result',
      'label',
      'rate_limit',
      'redact',
      'require_approval',
      'require_confirmation',
    ]);
    expect(schemas.InteractionRecord.properties.channel).toMatchObject({
      nullable: true,
      enum: ['rest', 'graphql', 'mcp', null],
    });
    expect(schemas.AuditLogEntry.properties.action.enum).toEqual(
      expect.arrayContaining(['org.created', 'manifest.superseded', 'marketplace.payment_confirmed']),
    );
    expect(schemas.AuditTarget.properties.type.enum).toEqual(
      expect.arrayContaining(['organization', 'manifest_template', 'marketplace_transaction']),
    );
  });

  test('a record names the connection of its call by id and user, nothing else (no field could hold a token)', () => {
    const schemas = doc.components.schemas;
    expect(schemas.InteractionRecord.properties.connection.oneOf).toEqual([
      { $ref: '#/components/schemas/RecordedConnection' },
      expect.objectContaining({ nullable: true, enum: [null] }),
    ]);
    expect(schemas.InteractionRecord.properties.connection.description).toMatch(
      /signed into the record; never a token/,
    );
    expect(Object.keys(schemas.RecordedConnection.properties)).toEqual(['connection_id', 'user_id']);
    expect(schemas.RecordedConnection.required).toEqual(['connection_id']);
    expect(schemas.RecordedConnection.properties.user_id).toMatchObject({ type: 'string', nullable: true });
  });

  test("a tool's config is typed per connector: each kind as read validates, a mix of kinds does not", async () => {
    const checker = await OpenApiResponseChecker.load(t);
    const org = await signUp(t, 'typed-config');
    const client = checker.validating(t);
    const configs = {
      http: {
        url: 'https://tools.example.com/refund',
        headers: { authorization: 'Bearer s3cr3t-value' },
        secret: 'a-secret-of-16-chars',
      },
      mcp: {
        url: 'https://mcp.example.com/mcp',
        tool: 'lookup',
        description: 'Look up',
        input_schema: { type: 'object' },
      },
      mock: { response: { ok: true } },
    };
    for (const [connector, config] of Object.entries(configs)) {
      const created = await client.request('POST', `/api/v1/orgs/${org.orgId}/tools`, {
        token: org.adminToken,
        body: { action_type: `t-${connector}`, connector, config },
      });
      expect(created.status).toBe(201);
    }
    const listed = await client.request('GET', `/api/v1/orgs/${org.orgId}/tools`, { token: org.adminToken });
    expect(listed.body.items.map((tool: any) => tool.connector).sort()).toEqual(['http', 'mcp', 'mock']);
    const http = listed.body.items.find((tool: any) => tool.connector === 'http');
    const mixed = { ...listed, body: { ...http, config: { ...http.config, tool: 'lookup' } } };
    expect(checker.check('GET', `/api/v1/orgs/${org.orgId}/tools/${http.tool_id}`, mixed)).toContainEqual(
      expect.objectContaining({ problem: 'body.config: must match exactly one schema in oneOf' }),
    );
  });

  test('declares Retry-After and the X-RateLimit headers on every 429 (OAuth endpoints and the SSO start: Retry-After, their own throttle)', () => {
    const limited = operations().filter((o) => o.operation.responses['429']);
    expect(limited.length).toBeGreaterThan(40);
    for (const { operation } of limited) {
      const expected =
        operation.tags.includes('OAuth') || operation.operationId === 'sso_start'
          ? ['Retry-After']
          : ['Retry-After', 'X-RateLimit-Limit', 'X-RateLimit-Remaining', 'X-RateLimit-Reset'];
      expect(Object.keys(operation.responses['429'].headers).sort()).toEqual(expected);
    }
  });

  test('gives every route a unique operationId named after its GraphQL field', () => {
    const ids = operations().map((o) => o.operation.operationId);
    expect(new Set(ids).size).toBe(ids.length);
    expect(ids.sort()).toEqual(
      [
        ...[...restRoutes.keys()].map((f) => f.split('.')[1]),
        ...streamRoutes.map((r) => r.operationId),
        'healthz',
        'readyz',
        'jwks',
        'oauth_authorization_server_metadata',
        'oauth_protected_resource_metadata',
        'oauth_register_client',
        'oauth_authorize',
        'oauth_token',
        'oauth_revoke',
        'sso_start',
        'sso_callback',
        'tool_connection_start',
        'tool_connection_callback',
        'upstream_client_metadata_document',
      ].sort(),
    );
  });

  test('documents streamed routes with their query parameters, media types and errors', () => {
    const auditExport = doc.paths['/api/v1/orgs/{org_id}/audit-logs/export'].get;
    expect(auditExport.security).toEqual([{ bearerAuth: [] }, { apiKeyAuth: [] }]);
    expect(auditExport.parameters.map((p: any) => `${p.in}:${p.name}`)).toEqual([
      'path:org_id',
      'query:format',
      'query:actor',
      'query:action',
      'query:target_type',
      'query:target_id',
      'query:from',
      'query:to',
    ]);
    expect(auditExport.parameters.find((p: any) => p.name === 'format').schema).toEqual({
      type: 'string',
      enum: ['jsonl', 'csv'],
    });
    expect(auditExport.parameters.find((p: any) => p.name === 'from').schema).toMatchObject({
      type: 'string',
      format: 'date-time',
    });
    expect(Object.keys(auditExport.responses['200'].content)).toEqual(['application/x-ndjson', 'text/csv']);
    expect(auditExport.responses['200'].headers).toHaveProperty('Content-Disposition');
    expect(Object.keys(auditExport.responses).sort()).toEqual(['200', '401', '403', '404', '422', '429', '500', '503']);
    const recordsExport = doc.paths['/api/v1/records/export'].get;
    expect(recordsExport.parameters.map((p: any) => p.name)).toEqual(['from', 'to']);
    expect(Object.keys(recordsExport.responses['200'].content)).toEqual(['application/x-ndjson']);
    expect(Object.keys(recordsExport.responses).sort()).toEqual(['200', '401', '403', '422', '429', '500', '503']);
    expect(doc.tags.map((tag: { name: string }) => tag.name)).toContain('Audit logs');
  });

  test('no optional parameter carries an example ("Try it out" would send it as a filter); date-times say their format instead', () => {
    // A schema as a reader sees it: through $ref and allOf.
    const resolved = (schema: any): any[] => {
      if (!schema || typeof schema !== 'object') return [];
      const target = schema.$ref ? doc.components.schemas[schema.$ref.replace('#/components/schemas/', '')] : undefined;
      return [
        schema,
        ...resolved(target),
        ...(schema.allOf ?? []).flatMap(resolved),
        ...(schema.oneOf ?? []).flatMap(resolved),
      ];
    };
    const withExamples: string[] = [];
    const optional: Array<{ key: string; parameter: any }> = [];
    for (const { key, operation } of operations()) {
      for (const parameter of operation.parameters ?? []) {
        if (parameter.required) continue;
        optional.push({ key, parameter });
        const carriers = [parameter, ...resolved(parameter.schema)].filter(
          (node) => 'example' in node || 'examples' in node,
        );
        if (carriers.length) withExamples.push(`${key} ${parameter.in}:${parameter.name}`);
      }
    }
    expect(optional.length).toBeGreaterThan(20);
    expect(withExamples).toEqual([]);
    // The 8 time filters of records, audit logs and their exports.
    const dateTimes = optional.filter(({ parameter }) => parameter.schema?.format === 'date-time');
    expect(dateTimes.map(({ key, parameter }) => `${key} ${parameter.name}`).sort()).toEqual(
      [
        '/api/v1/orgs/{org_id}/audit-logs',
        '/api/v1/orgs/{org_id}/audit-logs/export',
        '/api/v1/records',
        '/api/v1/records/export',
      ]
        .flatMap((path) => [`GET ${path} from`, `GET ${path} to`])
        .sort(),
    );
    for (const { parameter } of dateTimes) expect(parameter.description).toMatch(/ISO 8601 date-time with a time zone/);
    expect(doc.paths['/api/v1/records/export'].get.parameters[0].description).toMatch(/^Inclusive: .* ISO 8601/);
    // Responses keep theirs: an example there is only shown.
    expect(doc.components.schemas.InteractionRecord.properties.created_at.example).toBe('2026-01-01T00:00:00.000Z');
  });

  test('does not repeat bodies as query parameters nor path parameters in bodies', () => {
    for (const { key, operation } of operations()) {
      const body = operation.requestBody?.content?.['application/json']?.schema;
      if (!body) continue;
      const query = (operation.parameters ?? []).filter((p: any) => p.in === 'query');
      expect({ key, query }).toEqual({ key, query: [] });
      const pathParams = (operation.parameters ?? []).filter((p: any) => p.in === 'path').map((p: any) => p.name);
      for (const name of pathParams)
        expect({ key, inBody: name in (body.properties ?? {}) }).toEqual({ key, inBody: false });
    }
  });

  test('documents how webhook deliveries are signed and verified on the create route', () => {
    const create = doc.paths['/api/v1/orgs/{org_id}/webhooks'].post;
    expect(create.summary).toMatch(/secret/);
    for (const term of [
      'X-Webhook-Signature: sha256=',
      'HMAC-SHA256',
      '<X-Webhook-Timestamp>.<raw request body>',
      'constant time',
    ]) {
      expect(create.description).toContain(term);
    }
    // Other operations say what their GraphQL field says.
    expect(doc.paths['/api/v1/orgs/{org_id}/webhooks'].get.description).not.toContain('HMAC-SHA256');
  });

  test('documents both security schemes and the error envelopes', () => {
    expect(doc.components.securitySchemes.bearerAuth).toMatchObject({ type: 'http', scheme: 'bearer' });
    expect(doc.components.securitySchemes.apiKeyAuth).toMatchObject({
      type: 'apiKey',
      in: 'header',
      name: 'X-API-Key',
    });
    expect(doc.components.schemas.AuthError.properties.detail.properties.code.enum).toEqual([
      'AUTHENTICATION_REQUIRED',
      'INVALID_TOKEN',
      'FORBIDDEN',
    ]);
    expect(doc.components.schemas.Error.properties.error.required).toEqual(['code', 'message', 'details']);
    const login = doc.paths['/api/v1/auth/login'].post;
    expect(login.security).toEqual([]);
    expect(login.responses['401'].content['application/json'].schema.$ref).toBe('#/components/schemas/AuthError');
    expect(login.responses['422'].content['application/json'].schema.$ref).toBe('#/components/schemas/Error');
    const org = doc.paths['/api/v1/orgs/{org_id}'].get;
    expect(org.security).toEqual([{ bearerAuth: [] }]);
    expect(Object.keys(org.responses).sort()).toEqual(['200', '401', '403', '404', '422', '429', '500', '503']);
    const deleted = doc.paths['/api/v1/orgs/{org_id}/api-keys/{key_id}'].delete.responses['204'];
    expect(deleted.description).toBe('No content');
    expect(deleted.content).toBeUndefined();
    expect(Object.keys(deleted.headers)).toEqual(['X-RateLimit-Limit', 'X-RateLimit-Remaining', 'X-RateLimit-Reset']);
  });
});

describe('REST surface', () => {
  test.each([
    ['POST', '/api/v1/webhook'],
    ['GET', '/api/v1/openapi.json'],
    ['GET', '/api/v1/users'],
    ['POST', '/api/v1/create-organization'],
    ['GET', '/api/v1/nothing-here'],
    ['POST', '/api/v1/auth/login/'],
    // Where SOFA answers each field inside the service, and where the OpenAPI document's SOFA puts root routes.
    ['GET', '/api/v1/~field/Query.organization'],
    ['POST', '/api/v1/~field/Mutation.login'],
    ['POST', '/api/v1/~root/auth/login'],
  ])('%s %s is not a route', async (method, path) => {
    const response = await t.request(method, path, { body: method === 'POST' ? {} : undefined });
    expect(response.status).toBe(404);
    expect(response.body).toEqual({ error: { code: 'NOT_FOUND', message: 'No such endpoint', details: {} } });
  });

  test("a path parameter is the path's, whatever the query string or the body name the same", async () => {
    const mine = await signUp(t, 'path-mine');
    const other = await signUp(t, 'path-other');
    const read = await t.request('GET', `/api/v1/orgs/${mine.orgId}?org_id=${other.orgId}`, { token: mine.adminToken });
    expect(read.status).toBe(200);
    expect(read.body.org_id).toBe(mine.orgId);
    const elsewhere = await t.request('GET', `/api/v1/orgs/${other.orgId}?org_id=${mine.orgId}`, {
      token: mine.adminToken,
    });
    expect(elsewhere.status).toBe(404);
    const renamed = await t.request('PATCH', `/api/v1/orgs/${mine.orgId}?org_id=${other.orgId}`, {
      token: mine.adminToken,
      body: { org_id: other.orgId, name: 'Renamed by path' },
    });
    expect(renamed.status).toBe(200);
    expect(renamed.body).toMatchObject({ org_id: mine.orgId, name: 'Renamed by path' });
    const untouched = await t.request('GET', `/api/v1/orgs/${other.orgId}`, { token: other.adminToken });
    expect(untouched.body.name).not.toBe('Renamed by path');
  });

  test('a path parameter is decoded once, as sent', async () => {
    const org = await signUp(t, 'path-decoded');
    const agent = await readyAgent(t, org);
    const encoded = [...agent.svcId].map((c) => `%${c.charCodeAt(0).toString(16).padStart(2, '0')}`).join('');
    const read = await t.request('GET', `/api/v1/agents/${encoded}`, { token: org.adminToken });
    expect(read.status).toBe(200);
    expect(read.body.agent_id).toBe(agent.svcId);
    // A plus sign in a path is a plus sign, not a space; a stray escape names nothing.
    for (const odd of [`${agent.svcId}+x`, `${agent.svcId}%2`, `${agent.svcId}%20x`]) {
      const missing = await t.request('GET', `/api/v1/agents/${odd}`, { token: org.adminToken });
      expect({ odd, status: missing.status }).toEqual({ odd, status: 404 });
    }
  });

  test('a known path with another method answers 405 with Allow', async () => {
    const response = await t.request('PUT', '/api/v1/orgs');
    expect(response.status).toBe(405);
    expect(response.headers.get('allow')).toBe('POST');
    expect(response.body.error.code).toBe('METHOD_NOT_ALLOWED');
  });
});

describe('interactive documentation served without a CDN', () => {
  test('Swagger UI at /docs loads its assets from this server', async () => {
    const page = await t.request('GET', '/docs');
    expect(page.status).toBe(200);
    expect(page.headers.get('content-type')).toMatch(/text\/html/);
    const scripts = [...page.text.matchAll(/(?:src|href)="([^"]+)"/g)].map((m) => m[1]);
    expect(scripts.length).toBeGreaterThanOrEqual(3);
    for (const src of scripts) {
      expect(src.startsWith('/')).toBe(true);
      const asset = await t.request('GET', src);
      expect({ src, status: asset.status }).toEqual({ src, status: 200 });
      expect(asset.text.length).toBeGreaterThan(100);
    }
    expect(page.text).toContain("url: '/openapi.json'");
    // Not sent to validator.swagger.io for its badge (it skips that on localhost only: the browser
    // test, on 127.0.0.1, would not see the request).
    expect(page.text).toMatch(/^\s*validatorUrl: null,$/m);
    expect(page.text).toContain('<link rel="icon" type="image/svg+xml" href="/favicon.ico">');
  });

  test('ReDoc at /redoc loads its bundle from this server', async () => {
    const page = await t.request('GET', '/redoc');
    expect(page.status).toBe(200);
    expect(page.text).toContain('spec-url="/openapi.json"');
    const bundle = await t.request('GET', '/redoc/redoc.standalone.js');
    expect(bundle.status).toBe(200);
    expect(bundle.headers.get('content-type')).toMatch(/javascript/);
    expect(bundle.text).toContain('Redoc');
    // The Redocly logo beside "API docs by Redocly" came from cdn.redoc.ly; no image source elsewhere is left.
    expect(bundle.text).toContain('API docs by Redocly');
    expect(bundle.text).not.toContain('cdn.redoc.ly');
    expect(bundle.text.match(/\bsrc:\s*["'`]https?:/g)).toBeNull();
    expect(page.text).toContain('<link rel="icon" type="image/svg+xml" href="/favicon.ico">');
  });

  test('/favicon.ico is the service icon (console/icon.svg), cacheable', async () => {
    const icon = await t.request('GET', '/favicon.ico');
    expect(icon.status).toBe(200);
    expect(icon.headers.get('content-type')).toBe('image/svg+xml');
    expect(icon.headers.get('cache-control')).toMatch(/^public, max-age=\d+/);
    expect(icon.text).toBe(readFileSync(new URL('../console/icon.svg', import.meta.url), 'utf8'));
  });

  test('GraphiQL at /graphql renders from the bundled package', async () => {
    const page = await t.request('GET', '/graphql', { headers: { accept: 'text/html' } });
    expect(page.status).toBe(200);
    expect(page.text).toContain('Agent Gateway GraphiQL');
    expect(page.text).not.toMatch(/unpkg\.com|cdn\.jsdelivr/);
    expect(page.text).toContain('<link rel="icon" href="/favicon.ico" />');
  });
});
