/**
 * Security matrix: every REST route that needs credentials × every way a caller can be wrong
 * (missing, malformed, expired, revoked, deleted credentials; wrong role; API key where none is
 * allowed; another org), each with the exact status and envelope of docs/reference/errors.md,
 * plus the positive case. A route is one row of `matrix`; a test below fails when a declared
 * route has no row, so a new route cannot ship without its security cases.
 */
import { restRoutes, streamRoutes } from '../src/http/schema.js';
import { randomBytes, randomUUID } from 'node:crypto';
import type { RestRoute } from '../src/api/rest-routes.js';
import { generateApiKey } from '../src/modules/api-key/api-key-format.js';
import { apiKeyScopes, userRoles, type ApiKeyScope, type UserRole } from '../src/authz/authz.js';
import type { SessionUser } from '../src/modules/auth/session.service.js';
import {
  LOOPBACK_UPSTREAMS,
  startTestApp,
  type RequestOptions,
  type TestApp,
  type TestResponse,
} from './support/app.js';
import {
  CookieJar,
  signInAtProvider,
  startIdentityProvider,
  type TestIdentityProvider,
} from './support/oidc-provider.js';
import { OpenApiResponseChecker } from './support/openapi-validator.js';
import {
  type ProtectedMcpServer,
  startAuthorizationServer,
  startProtectedMcpServer,
  type TestAuthorizationServer,
} from './support/oauth-upstream.js';
import {
  addUser,
  createKey,
  createManifest,
  manifestPayload,
  PASSWORD,
  signUp,
  type OrgFixture,
} from './support/fixtures.js';
import {
  authorizationParams,
  authorizeUrl,
  connectClient,
  decide,
  form,
  pkce,
  registerClient,
  tokenRequest,
} from './support/oauth.js';

/** Everything the rows need: two orgs, org A's users by role, org B's admin. */
interface World {
  t: TestApp;
  orgA: OrgFixture;
  orgB: OrgFixture;
  usersA: Record<UserRole, SessionUser>;
  adminB: SessionUser;
  /** An agent of org A with an active manifest, a mock tool for its actions, and one record. */
  agentA: string;
  recordA: string;
  /** An agent of org A whose refunds need a human, and a key it executes with. */
  humanAgentA: string;
  humanAgentKeyA: string;
  /** A published template of org A priced 0, bought with `free` by the purchase row. */
  freeTemplateA: string;
}

interface Row {
  method: RestRoute['method'];
  /** Exactly as declared with `restRoute(...)`, e.g. `/orgs/:org_id/api-keys/:key_id`. */
  /** Mounted at the root (`mount: 'root'`) rather than under /api/v1. */
  root?: true;
  route: string;
  /** Status of the positive case. */
  ok: 200 | 201 | 204;
  /** Bearer roles allowed (in the caller's own org). */
  roles: readonly UserRole[];
  /** API key scopes that allow the route, any one suffices; empty: never with an API key. */
  keyScopes: readonly ApiKeyScope[];
  /** Path parameters other than org_id. Called for every request, so consumed resources are fresh. */
  params?: (w: World) => Promise<Record<string, string>>;
  body?: (w: World) => unknown;
  /** Media type of a successful response when it is not JSON (streamed routes). */
  contentType?: string;
  /** A query string the positive case needs (without `?`). */
  query?: string;
  /** Extra checks on a successful response. */
  check?: (response: TestResponse, w: World) => void | Promise<void>;
}

const unique = () => randomBytes(4).toString('hex');
/** A real OpenID provider on a loopback port: saving a single sign-on configuration reads its discovery document. */
let idp: TestIdentityProvider;
const ssoBody = (w: World) => ({
  issuer: idp.issuer,
  client_id: idp.clientId,
  client_secret: idp.clientSecret,
  allowed_domains: [`${w.orgA.slug}.example`],
  allow_private_network: true,
});
/** Org A with single sign-on configured, for the rows that read or delete it. */
const withSso = async (w: World) => {
  const saved = await w.t.request('PUT', `/api/v1/orgs/${w.orgA.orgId}/sso`, {
    token: w.orgA.adminToken,
    body: ssoBody(w),
  });
  expect(saved.status).toBe(200);
  return {};
};
const admins = ['admin'] as const;
const managers = ['admin', 'operator'] as const;
const gatewayBody = (w: World) => ({
  svc_id: w.agentA,
  agent_id: w.agentA,
  action: { type: 'billing', tool: 'read', params: { invoice: unique() } },
});
const newTool = async (w: World) => {
  const created = await w.t.request('POST', `/api/v1/orgs/${w.orgA.orgId}/tools`, {
    token: w.orgA.adminToken,
    body: { action_type: `t-${unique()}`, connector: 'mock' },
  });
  return { tool_id: created.body.tool_id as string };
};
/** A fresh mcp tool of org A whose upstream refuses connections: its reads fail and are shown, nothing is pinned. */
const newMcpTool = async (w: World) => {
  const created = await w.t.request('POST', `/api/v1/orgs/${w.orgA.orgId}/tools`, {
    token: w.orgA.adminToken,
    body: {
      action_type: `t-${unique()}`,
      connector: 'mcp',
      config: { url: 'http://127.0.0.1:9/mcp', allow_private_network: true, timeout_ms: 1000 },
    },
  });
  return { tool_id: created.body.tool_id as string };
};
/** A fresh pending approval of org A, asked through the gateway. */
const newApproval = async (w: World) => {
  const asked = await w.t.request('POST', '/api/v1/gateway/execute', {
    apiKey: w.humanAgentKeyA,
    body: {
      svc_id: w.humanAgentA,
      agent_id: w.humanAgentA,
      action: { type: 'billing', tool: 'refund', params: { ref: unique() } },
    },
  });
  return { approval_id: asked.body.approval_id as string };
};
const newWebhook = async (w: World) => {
  const created = await w.t.request('POST', `/api/v1/orgs/${w.orgA.orgId}/webhooks`, {
    token: w.orgA.adminToken,
    body: { url: `https://hooks.example.com/${unique()}`, events: ['approval.decided'] },
  });
  return { webhook_id: created.body.webhook_id as string };
};
/** A fresh policy of org A (the caller's org: policy routes have no org in the path). */
const newPolicy = async (w: World) => {
  const created = await w.t.request('POST', '/api/v1/policies', {
    token: w.orgA.adminToken,
    body: { name: `policy ${unique()}`, effect: 'deny', target: { capabilities: ['nothing:matches'] } },
  });
  return { policy_id: created.body.policy_id as string };
};
/** A fresh draft template of org A (template routes have no org in the path). */
const newTemplate = async (w: World, price = '0') => {
  const created = await w.t.request('POST', '/manifests', {
    token: w.orgA.adminToken,
    body: { name: `Template ${unique()}`, category: 'matrix', operations: ['billing:read'], price },
  });
  expect(created.status).toBe(201);
  return { id: created.body.id as string };
};
/** A fresh agent of org A, registered by its admin (agent routes have no org in the path). */
const newAgent = async (w: World) => {
  const agent_id = `agent-${unique()}`;
  const created = await w.t.request('POST', '/api/v1/agents', {
    token: w.orgA.adminToken,
    body: { agent_id, name: 'Matrix agent' },
  });
  expect(created.status).toBe(201);
  return { agent_id };
};
let newestAgent = '';
/** A fresh deactivated agent of org A, for reactivate. */
const newDeactivatedAgent = async (w: World) => {
  const params = await newAgent(w);
  const deactivated = await w.t.request('DELETE', `/api/v1/agents/${params.agent_id}`, { token: w.orgA.adminToken });
  expect(deactivated.status).toBe(204);
  return params;
};
let matrixClient: string | undefined;
/** A fresh OAuth grant on org A's agent: one registered client (registrations are throttled), allowed again by org A's admin. */
const newGrant = async (w: World) => {
  matrixClient ??= await registerClient(w.t);
  const params = authorizationParams(w.t.app.env.publicUrl, matrixClient, w.agentA, pkce().challenge);
  const decided = await decide(w.t, w.orgA.adminToken, params, true);
  expect(decided.body.errors).toBeUndefined();
  // Newest first.
  const grants = await w.t.request('GET', `/api/v1/agents/${w.agentA}/grants`, { token: w.orgA.adminToken });
  return { agent_id: w.agentA, grant_id: grants.body.items[0].grant_id as string };
};
let newestViewer = '';
/** A fresh viewer of org A, created through the API (no login: the matrix sends its own tokens). */
const newViewer = async (w: World) => {
  const created = await w.t.request('POST', `/api/v1/orgs/${w.orgA.orgId}/users`, {
    token: w.orgA.adminToken,
    body: { email: `viewer-${unique()}@${w.orgA.slug}.example`, password: PASSWORD, role: 'viewer' },
  });
  expect(created.status).toBe(201);
  newestViewer = created.body.user_id;
  return { user_id: created.body.user_id as string };
};
/** An upstream that wants OAuth (an oidc-provider and an MCP server on loopback), for the connection rows. */
let upstreamAs: TestAuthorizationServer;
let protectedMcp: ProtectedMcpServer;
const oauthTools = new Map<'org' | 'user', Promise<string>>();
/** Org A's mcp tool on that upstream whose `config.auth` is an OAuth connection per org or per user (made once). */
const oauthTool = (w: World, connection: 'org' | 'user') => {
  if (!oauthTools.has(connection)) {
    const created = w.t.request('POST', `/api/v1/orgs/${w.orgA.orgId}/tools`, {
      token: w.orgA.adminToken,
      body: {
        action_type: `oauth-${connection}-${unique()}`,
        connector: 'mcp',
        config: { url: protectedMcp.url, allow_private_network: true, auth: { type: 'oauth', connection } },
      },
    });
    oauthTools.set(
      connection,
      created.then((r) => {
        expect(r.status).toBe(201);
        return r.body.tool_id as string;
      }),
    );
  }
  return oauthTools.get(connection)!;
};
/** Org A's connection of its "org" tool, started (pending) by its admin: others read and revoke it as managers only. */
const orgConnection = async (w: World) => {
  const tool_id = await oauthTool(w, 'org');
  const started = await w.t.request('POST', `/api/v1/orgs/${w.orgA.orgId}/tools/${tool_id}/connections`, {
    token: w.orgA.adminToken,
  });
  expect(started.status).toBe(201);
  return { tool_id, connection_id: started.body.connection_id as string };
};
const manifestIn = (state: 'pending' | 'active' | 'suspended') => async (w: World) => ({
  manifest_id: (await createManifest(w.t, w.orgA, state)).manifestId,
});

const matrix: Row[] = [
  {
    method: 'GET',
    route: '/orgs/:org_id',
    ok: 200,
    roles: userRoles,
    keyScopes: [],
    check: (r, w) => expect(r.body).toMatchObject({ org_id: w.orgA.orgId, slug: w.orgA.slug }),
  },
  {
    method: 'PATCH',
    route: '/orgs/:org_id',
    ok: 200,
    roles: admins,
    keyScopes: [],
    body: () => ({ name: `Renamed ${unique()}` }),
    check: (r, w) => expect(r.body).toMatchObject({ org_id: w.orgA.orgId, name: expect.stringMatching(/^Renamed /) }),
  },
  {
    method: 'GET',
    route: '/orgs/:org_id/users',
    ok: 200,
    roles: admins,
    keyScopes: [],
    check: (r, w) => expect(r.body.items.map((u: { user_id: string }) => u.user_id)).toContain(w.orgA.adminUserId),
  },
  {
    method: 'POST',
    route: '/orgs/:org_id/users',
    ok: 201,
    roles: admins,
    keyScopes: [],
    body: (w) => ({ email: `new-${unique()}@${w.orgA.slug}.example`, password: PASSWORD, role: 'viewer' }),
    check: (r, w) => expect(r.body).toMatchObject({ org_id: w.orgA.orgId, role: 'viewer' }),
  },
  {
    method: 'PATCH',
    route: '/orgs/:org_id/users/:user_id',
    ok: 200,
    roles: admins,
    keyScopes: [],
    params: newViewer,
    body: () => ({ role: 'operator' }),
    check: (r, w) => expect(r.body).toMatchObject({ org_id: w.orgA.orgId, role: 'operator' }),
  },
  {
    method: 'DELETE',
    route: '/orgs/:org_id/users/:user_id',
    ok: 204,
    roles: admins,
    keyScopes: [],
    params: newViewer,
    check: async (r, w) => {
      expect(r.text).toBe('');
      const users = await w.t.request('GET', `/api/v1/orgs/${w.orgA.orgId}/users`, { token: w.orgA.adminToken });
      expect(users.body.items.map((u: { user_id: string }) => u.user_id)).not.toContain(newestViewer);
    },
  },
  {
    method: 'GET',
    route: '/orgs/:org_id/sso',
    ok: 200,
    roles: admins,
    keyScopes: [],
    params: withSso,
    check: (r) => expect(r.body).toMatchObject({ client_id: idp.clientId, client_secret: '[redacted]' }),
  },
  {
    method: 'PUT',
    route: '/orgs/:org_id/sso',
    ok: 200,
    roles: admins,
    keyScopes: [],
    body: ssoBody,
    check: (r, w) => {
      expect(r.body).toMatchObject({ org_id: w.orgA.orgId, issuer: idp.issuer });
      expect(r.text).not.toContain(idp.clientSecret);
    },
  },
  {
    method: 'DELETE',
    route: '/orgs/:org_id/sso',
    ok: 204,
    roles: admins,
    keyScopes: [],
    params: withSso,
    check: (r) => expect(r.text).toBe(''),
  },
  {
    method: 'GET',
    route: '/orgs/:org_id/api-keys',
    ok: 200,
    roles: admins,
    keyScopes: [],
    check: (r) => {
      expect(r.body.items.length).toBeGreaterThan(0);
      for (const key of r.body.items) expect(key).not.toHaveProperty('key');
    },
  },
  {
    method: 'POST',
    route: '/orgs/:org_id/api-keys',
    ok: 201,
    roles: admins,
    keyScopes: [],
    body: () => ({ name: `key ${unique()}`, scopes: ['logs:read', 'manifests:read'], expires_in_days: 30 }),
    check: (r) =>
      expect(r.body).toMatchObject({ key: expect.stringMatching(/^agw_/), scopes: ['logs:read', 'manifests:read'] }),
  },
  {
    method: 'DELETE',
    route: '/orgs/:org_id/api-keys/:key_id',
    ok: 204,
    roles: admins,
    keyScopes: [],
    params: async (w) => ({ key_id: (await createKey(w.t, w.orgA, ['logs:read'])).keyId }),
    check: (r) => expect(r.text).toBe(''),
  },
  {
    method: 'GET',
    route: '/orgs/:org_id/manifests',
    ok: 200,
    roles: userRoles,
    keyScopes: ['manifests:read'],
    check: (r) => expect(r.body).toMatchObject({ items: expect.any(Array), total: expect.any(Number) }),
  },
  {
    method: 'POST',
    route: '/orgs/:org_id/manifests',
    ok: 201,
    roles: managers,
    keyScopes: ['manifests:write'],
    body: () => manifestPayload(),
    check: (r) => expect(r.body).toMatchObject({ status: 'pending', capabilities: { approved: [] } }),
  },
  {
    method: 'POST',
    route: '/orgs/:org_id/manifests/validate',
    ok: 200,
    roles: managers,
    keyScopes: ['manifests:write'],
    body: () => manifestPayload(),
    check: (r) => expect(r.body).toMatchObject({ valid: true, manifest_hash: expect.stringMatching(/^sha256:/) }),
  },
  {
    method: 'GET',
    route: '/orgs/:org_id/manifests/by-svc/:svc_id',
    ok: 200,
    roles: userRoles,
    keyScopes: ['manifests:read'],
    params: async (w) => ({ svc_id: (await createManifest(w.t, w.orgA)).svcId }),
    check: (r) => expect(r.body.status).toBe('pending'),
  },
  {
    method: 'GET',
    route: '/orgs/:org_id/manifests/:manifest_id',
    ok: 200,
    roles: userRoles,
    keyScopes: ['manifests:read'],
    params: manifestIn('pending'),
    check: (r) => expect(r.body.manifest_id).toMatch(/^[0-9a-f-]{36}$/),
  },
  {
    method: 'GET',
    route: '/orgs/:org_id/manifests/:manifest_id/history',
    ok: 200,
    roles: userRoles,
    keyScopes: ['manifests:read'],
    params: manifestIn('active'),
    check: (r) => expect(r.body.items.map((e: { status: string }) => e.status)).toEqual(['active', 'pending']),
  },
  {
    method: 'POST',
    route: '/orgs/:org_id/manifests/:manifest_id/approve',
    ok: 200,
    roles: managers,
    keyScopes: [],
    params: manifestIn('pending'),
    body: () => ({ notes: 'looks fine' }),
    check: (r) => expect(r.body.status).toBe('active'),
  },
  {
    method: 'POST',
    route: '/orgs/:org_id/manifests/:manifest_id/reject',
    ok: 200,
    roles: managers,
    keyScopes: [],
    params: manifestIn('pending'),
    body: () => ({ reason: 'too broad' }),
    check: (r) => expect(r.body.status).toBe('rejected'),
  },
  {
    method: 'POST',
    route: '/orgs/:org_id/manifests/:manifest_id/suspend',
    ok: 200,
    roles: managers,
    keyScopes: [],
    params: manifestIn('active'),
    body: () => ({ reason: 'incident' }),
    check: (r) => expect(r.body.status).toBe('suspended'),
  },
  {
    method: 'POST',
    route: '/orgs/:org_id/manifests/:manifest_id/reactivate',
    ok: 200,
    roles: managers,
    keyScopes: [],
    params: manifestIn('suspended'),
    body: () => ({ notes: 'resolved' }),
    check: (r) => expect(r.body.status).toBe('active'),
  },
  {
    method: 'POST',
    route: '/orgs/:org_id/manifests/:manifest_id/revoke',
    ok: 200,
    roles: managers,
    keyScopes: [],
    params: manifestIn('active'),
    body: () => ({ reason: 'retired' }),
    check: (r) => expect(r.body.status).toBe('revoked'),
  },
  {
    method: 'GET',
    route: '/orgs/:org_id/tools',
    ok: 200,
    roles: managers,
    keyScopes: [],
    check: (r) => expect(r.body.items.map((t: { action_type: string }) => t.action_type)).toContain('billing'),
  },
  {
    method: 'POST',
    route: '/orgs/:org_id/tools',
    ok: 201,
    roles: managers,
    keyScopes: [],
    body: () => ({ action_type: `t-${unique()}`, connector: 'mock', config: { response: { fine: true } } }),
    check: (r) => expect(r.body).toMatchObject({ connector: 'mock', tool_id: expect.stringMatching(/^tool_/) }),
  },
  {
    method: 'GET',
    route: '/orgs/:org_id/tools/:tool_id',
    ok: 200,
    roles: managers,
    keyScopes: [],
    params: newTool,
    check: (r) => expect(r.body.connector).toBe('mock'),
  },
  {
    method: 'PATCH',
    route: '/orgs/:org_id/tools/:tool_id',
    ok: 200,
    roles: managers,
    keyScopes: [],
    params: newTool,
    body: () => ({ config: { response: { changed: true } } }),
    check: (r) => expect(r.body.config).toEqual({ response: { changed: true } }),
  },
  {
    method: 'POST',
    route: '/orgs/:org_id/tools/:tool_id/refresh',
    ok: 200,
    roles: managers,
    keyScopes: [],
    params: newMcpTool,
    check: (r) =>
      expect(r.body).toMatchObject({
        connector: 'mcp',
        definitions: [],
        definitions_error: expect.stringMatching(/^TOOL_UNREACHABLE/),
      }),
  },
  {
    method: 'POST',
    route: '/orgs/:org_id/tools/:tool_id/accept-definitions',
    ok: 200,
    roles: managers,
    keyScopes: [],
    params: newMcpTool,
    body: () => ({}),
    check: (r) => expect(r.body).toMatchObject({ connector: 'mcp', definitions: [] }),
  },
  {
    method: 'DELETE',
    route: '/orgs/:org_id/tools/:tool_id',
    ok: 204,
    roles: managers,
    keyScopes: [],
    params: newTool,
    check: (r) => expect(r.text).toBe(''),
  },
  {
    method: 'GET',
    route: '/orgs/:org_id/tools/:tool_id/connections',
    ok: 200,
    roles: userRoles,
    keyScopes: [],
    params: async (w) => ({ tool_id: (await orgConnection(w)).tool_id }),
    check: (r) => expect(r.body).toEqual({ items: expect.any(Array), total: r.body.items.length }),
  },
  {
    method: 'POST',
    route: '/orgs/:org_id/tools/:tool_id/connections',
    ok: 201,
    roles: userRoles,
    keyScopes: [],
    // A "user" tool: any signed-in user connects their own account.
    params: async (w) => ({ tool_id: await oauthTool(w, 'user') }),
    check: (r) =>
      expect(r.body).toEqual({
        connection_id: expect.stringMatching(/^conn_/),
        authorization_url: expect.stringMatching(/\/oauth\/upstream\/start\?state=/),
        expires_at: expect.any(String),
      }),
  },
  {
    method: 'GET',
    route: '/orgs/:org_id/tools/:tool_id/connections/:connection_id',
    ok: 200,
    roles: managers,
    keyScopes: [],
    params: orgConnection,
    check: (r) => expect(r.body).toMatchObject({ scope: 'org', user_id: null }),
  },
  {
    method: 'DELETE',
    route: '/orgs/:org_id/tools/:tool_id/connections/:connection_id',
    ok: 204,
    roles: managers,
    keyScopes: [],
    params: orgConnection,
    check: (r) => expect(r.text).toBe(''),
  },
  {
    method: 'GET',
    route: '/orgs/:org_id/webhooks',
    ok: 200,
    roles: managers,
    keyScopes: [],
    check: (r) => {
      expect(r.body).toMatchObject({ items: expect.any(Array), total: expect.any(Number) });
      expect(r.text).not.toContain('"secret"');
    },
  },
  {
    method: 'POST',
    route: '/orgs/:org_id/webhooks',
    ok: 201,
    roles: managers,
    keyScopes: [],
    body: () => ({ url: `https://hooks.example.com/${unique()}`, events: ['approval.requested'] }),
    check: (r) =>
      expect(r.body).toMatchObject({
        webhook_id: expect.stringMatching(/^whk_/),
        secret: expect.stringMatching(/^whsec_/),
      }),
  },
  {
    method: 'GET',
    route: '/orgs/:org_id/webhooks/:webhook_id',
    ok: 200,
    roles: managers,
    keyScopes: [],
    params: newWebhook,
    check: (r) => {
      expect(r.body.events).toEqual(['approval.decided']);
      expect(r.body).not.toHaveProperty('secret');
    },
  },
  {
    method: 'PATCH',
    route: '/orgs/:org_id/webhooks/:webhook_id',
    ok: 200,
    roles: managers,
    keyScopes: [],
    params: newWebhook,
    body: () => ({ events: ['approval.requested', 'approval.decided'], active: false }),
    check: (r) => expect(r.body).toMatchObject({ events: ['approval.requested', 'approval.decided'], active: false }),
  },
  {
    method: 'DELETE',
    route: '/orgs/:org_id/webhooks/:webhook_id',
    ok: 204,
    roles: managers,
    keyScopes: [],
    params: newWebhook,
    check: (r) => expect(r.text).toBe(''),
  },
  {
    method: 'GET',
    route: '/orgs/:org_id/webhooks/:webhook_id/deliveries',
    ok: 200,
    roles: managers,
    keyScopes: [],
    params: newWebhook,
    check: (r) => expect(r.body).toEqual({ items: [], total: 0 }),
  },
  {
    method: 'GET',
    route: '/policies',
    ok: 200,
    roles: userRoles,
    keyScopes: [],
    // Makes sure there is one to list.
    params: newPolicy,
    check: (r) => {
      expect(r.body.total).toBeGreaterThan(0);
      expect(r.body.items[0].policy_id).toMatch(/^pol_/);
    },
  },
  {
    method: 'POST',
    route: '/policies',
    ok: 201,
    roles: managers,
    keyScopes: [],
    body: () => ({ name: `policy ${unique()}`, effect: 'deny', target: { capabilities: ['nothing:matches'] } }),
    check: (r) => expect(r.body).toMatchObject({ policy_id: expect.stringMatching(/^pol_/), version: 1 }),
  },
  {
    method: 'GET',
    route: '/policies/:policy_id',
    ok: 200,
    roles: userRoles,
    keyScopes: [],
    params: newPolicy,
    check: (r) => expect(r.body).toMatchObject({ policy_id: expect.stringMatching(/^pol_/), effect: 'deny' }),
  },
  {
    method: 'PUT',
    route: '/policies/:policy_id',
    ok: 200,
    roles: managers,
    keyScopes: [],
    params: newPolicy,
    body: () => ({ name: `replaced ${unique()}`, effect: 'deny', target: { capabilities: ['nothing:matches'] } }),
    check: (r) => expect(r.body).toMatchObject({ name: expect.stringMatching(/^replaced /), version: 2 }),
  },
  {
    method: 'DELETE',
    route: '/policies/:policy_id',
    ok: 204,
    roles: managers,
    keyScopes: [],
    params: newPolicy,
    check: (r) => expect(r.text).toBe(''),
  },
  {
    method: 'POST',
    route: '/manifests',
    root: true,
    ok: 201,
    roles: managers,
    keyScopes: [],
    body: () => ({ name: `Template ${unique()}`, category: 'matrix', operations: ['billing:read'], price: '1.50' }),
    check: (r) => expect(r.body).toEqual({ id: expect.any(String), status: 'draft', created_at: expect.any(String) }),
  },
  {
    method: 'GET',
    route: '/manifests',
    root: true,
    ok: 200,
    roles: userRoles,
    keyScopes: [],
    params: newTemplate,
    check: (r) => expect(r.body.pagination.total).toBeGreaterThan(0),
  },
  {
    method: 'GET',
    route: '/manifests/:id',
    root: true,
    ok: 200,
    roles: userRoles,
    keyScopes: [],
    params: newTemplate,
    check: (r) =>
      expect(r.body).toMatchObject({ manifest: { status: 'draft' }, operations: [{ capability: 'billing:read' }] }),
  },
  {
    method: 'POST',
    route: '/manifests/:id/publish',
    root: true,
    ok: 200,
    roles: managers,
    keyScopes: [],
    params: newTemplate,
    check: (r) => expect(r.body).toMatchObject({ status: 'published', published_at: expect.any(String) }),
  },
  {
    method: 'POST',
    route: '/manifests/:id/archive',
    root: true,
    ok: 200,
    roles: managers,
    keyScopes: [],
    params: newTemplate,
    check: (r) => expect(r.body.status).toBe('archived'),
  },
  {
    method: 'POST',
    route: '/marketplace/purchase',
    root: true,
    ok: 201,
    roles: ['admin'],
    keyScopes: [],
    body: (w) => ({ manifest_id: w.freeTemplateA, payment_method: 'free', agent_id: `bought-${unique()}` }),
    check: (r) =>
      expect(r.body).toMatchObject({
        transaction_id: expect.stringMatching(/^txn_/),
        status: 'completed',
        manifest: { status: 'pending' },
      }),
  },
  {
    method: 'GET',
    route: '/marketplace/transactions',
    root: true,
    ok: 200,
    roles: ['admin'],
    keyScopes: [],
    check: (r) => expect(r.body).toMatchObject({ items: expect.any(Array), total: expect.any(Number) }),
  },
  {
    method: 'POST',
    route: '/marketplace/transactions/:transaction_id/confirm',
    root: true,
    ok: 200,
    roles: ['admin'],
    keyScopes: [],
    // A sale of org A to org B, paid by invoice: org A's admin confirms it.
    params: async (w) => {
      const { id } = await newTemplate(w, '5.00');
      await w.t.request('POST', `/manifests/${id}/publish`, { token: w.orgA.adminToken, body: {} });
      const bought = await w.t.request('POST', '/marketplace/purchase', {
        token: await bearer(w.adminB),
        body: { manifest_id: id, payment_method: 'invoice', agent_id: `invoiced-${unique()}` },
      });
      expect(bought.body.status).toBe('pending');
      return { transaction_id: bought.body.transaction_id as string };
    },
    check: (r) => expect(r.body).toMatchObject({ status: 'completed', registered_manifest_id: expect.any(String) }),
  },
  {
    method: 'GET',
    route: '/marketplace/manifests',
    root: true,
    ok: 200,
    roles: userRoles,
    keyScopes: [],
    check: (r) =>
      expect(r.body).toMatchObject({ manifests: expect.any(Array), filters: { categories: expect.any(Array) } }),
  },
  {
    method: 'GET',
    route: '/agents',
    ok: 200,
    roles: userRoles,
    keyScopes: ['manifests:read'],
    // The rows below register agents by the hundred; the newest, registered for this request, is listed first.
    params: async (w) => {
      newestAgent = (await newAgent(w)).agent_id;
      return {};
    },
    check: (r) => {
      expect(r.body.total).toBeGreaterThan(1);
      expect(r.body.items[0].agent_id).toBe(newestAgent);
    },
  },
  {
    method: 'POST',
    route: '/agents',
    ok: 201,
    roles: managers,
    keyScopes: ['manifests:write'],
    body: () => ({ agent_id: `agent-${unique()}`, name: 'Registered', labels: { env: 'test' } }),
    check: (r) =>
      expect(r.body).toMatchObject({
        status: 'active',
        name: 'Registered',
        labels: { env: 'test' },
        current_manifest: null,
      }),
  },
  {
    method: 'GET',
    route: '/agents/:agent_id',
    ok: 200,
    roles: userRoles,
    keyScopes: ['manifests:read'],
    params: async (w) => ({ agent_id: w.agentA }),
    check: (r, w) => expect(r.body).toMatchObject({ agent_id: w.agentA, current_manifest: { status: 'active' } }),
  },
  {
    method: 'DELETE',
    route: '/agents/:agent_id',
    ok: 204,
    roles: managers,
    keyScopes: [],
    params: newAgent,
    check: (r) => expect(r.text).toBe(''),
  },
  {
    method: 'POST',
    route: '/agents/:agent_id/reactivate',
    ok: 200,
    roles: admins,
    keyScopes: [],
    params: newDeactivatedAgent,
    check: (r) => expect(r.body).toMatchObject({ status: 'active', deactivated_at: null, deactivation_reason: null }),
  },
  {
    method: 'GET',
    route: '/agents/:agent_id/grants',
    ok: 200,
    roles: userRoles,
    keyScopes: [],
    params: async (w) => ({ agent_id: w.agentA }),
    check: (r) => expect(r.body).toEqual({ items: expect.any(Array), total: r.body.items.length }),
  },
  {
    method: 'DELETE',
    route: '/agents/:agent_id/grants/:grant_id',
    ok: 204,
    roles: managers,
    keyScopes: [],
    params: newGrant,
    check: (r) => expect(r.text).toBe(''),
  },
  {
    method: 'POST',
    route: '/orgs/:org_id/capability-tokens',
    ok: 201,
    roles: managers,
    keyScopes: [],
    body: (w) => ({ svc_id: w.agentA, capabilities: ['billing:read'], expires_in_seconds: 600 }),
    check: (r) => expect(r.body.token).toMatch(/^ey/),
  },
  {
    method: 'GET',
    route: '/orgs/:org_id/capability-tokens',
    ok: 200,
    roles: managers,
    keyScopes: [],
    check: (r) => expect(r.text).not.toMatch(/"token":/),
  },
  {
    method: 'POST',
    route: '/orgs/:org_id/capability-tokens/:token_id/revoke',
    ok: 200,
    roles: managers,
    keyScopes: [],
    params: async (w) => {
      const issued = await w.t.request('POST', `/api/v1/orgs/${w.orgA.orgId}/capability-tokens`, {
        token: w.orgA.adminToken,
        body: { svc_id: w.agentA, capabilities: ['billing:read'], expires_in_seconds: 600 },
      });
      return { token_id: issued.body.token_id as string };
    },
    check: (r) => expect(r.body.revoked_at).not.toBeNull(),
  },
  {
    method: 'GET',
    route: '/records',
    ok: 200,
    roles: userRoles,
    keyScopes: ['logs:read'],
    check: (r, w) => expect(r.body.items.map((x: { record_id: string }) => x.record_id)).toContain(w.recordA),
  },
  {
    method: 'GET',
    route: '/records/:record_id',
    ok: 200,
    roles: userRoles,
    keyScopes: ['logs:read'],
    params: async (w) => ({ record_id: w.recordA }),
    check: (r, w) => expect(r.body.record_id).toBe(w.recordA),
  },
  {
    method: 'GET',
    route: '/records/:record_id/verify',
    ok: 200,
    roles: userRoles,
    keyScopes: ['logs:read'],
    params: async (w) => ({ record_id: w.recordA }),
    check: (r) => expect(r.body).toMatchObject({ valid: true, checks: { hash: true, signature: true, chain: true } }),
  },
  {
    method: 'GET',
    route: '/records/checkpoint',
    ok: 200,
    roles: userRoles,
    keyScopes: ['logs:read'],
    contentType: 'text/plain; charset=utf-8',
    check: (r, w) => expect(r.text.split('\n')[0]).toBe(`localhost:8000/orgs/${w.orgA.orgId}`),
  },
  {
    method: 'GET',
    route: '/records/checkpoint/verifier',
    ok: 200,
    roles: userRoles,
    keyScopes: ['logs:read'],
    check: (r, w) => expect(r.body.verifier_key).toMatch(new RegExp(`^localhost:8000/orgs/${w.orgA.orgId}\\+`)),
  },
  {
    method: 'GET',
    route: '/records/:record_id/proof',
    ok: 200,
    roles: userRoles,
    keyScopes: ['logs:read'],
    params: async (w) => ({ record_id: w.recordA }),
    check: (r, w) => expect(r.body).toMatchObject({ record_id: w.recordA, leaf_index: 0 }),
  },
  {
    method: 'GET',
    route: '/records/consistency',
    ok: 200,
    roles: userRoles,
    keyScopes: ['logs:read'],
    query: 'from=1&to=1',
    check: (r) => expect(r.body).toEqual({ from: 1, to: 1, hashes: [] }),
  },
  {
    method: 'GET',
    route: '/orgs/:org_id/audit-logs',
    ok: 200,
    roles: userRoles,
    keyScopes: ['logs:read'],
    check: (r, w) => {
      expect(r.body.total).toBeGreaterThan(0);
      for (const item of r.body.items) expect(item.org_id).toBe(w.orgA.orgId);
    },
  },
  {
    method: 'GET',
    route: '/orgs/:org_id/audit-logs/export',
    ok: 200,
    roles: managers,
    keyScopes: ['logs:export'],
    contentType: 'application/x-ndjson; charset=utf-8',
    check: (r, w) => {
      const entries = r.text
        .trimEnd()
        .split('\n')
        .map((line) => JSON.parse(line));
      expect(entries.map((e) => e.action)).toContain('org.created');
      for (const entry of entries) expect(entry.org_id).toBe(w.orgA.orgId);
    },
  },
  {
    method: 'GET',
    route: '/records/export',
    ok: 200,
    roles: managers,
    keyScopes: ['logs:export'],
    contentType: 'application/x-ndjson; charset=utf-8',
    check: (r, w) => {
      const [header, ...records] = r.text
        .trimEnd()
        .split('\n')
        .map((line) => JSON.parse(line));
      expect(header).toMatchObject({ type: 'header', org_id: w.orgA.orgId, count: records.length });
      expect(records.map((x) => x.body.record_id)).toContain(w.recordA);
    },
  },
  {
    method: 'POST',
    route: '/gateway/execute',
    ok: 200,
    roles: [],
    keyScopes: ['gateway:execute'],
    body: gatewayBody,
    check: (r) => expect(r.body).toMatchObject({ decision: 'allow', executed: true }),
  },
  {
    method: 'GET',
    route: '/gateway/approvals/:approval_id',
    ok: 200,
    roles: [],
    keyScopes: ['gateway:execute', 'gateway:evaluate', 'approvals:read'],
    params: newApproval,
    check: (r) => expect(r.body).toMatchObject({ status: 'pending', approval_id: expect.stringMatching(/^apr_/) }),
  },
  {
    method: 'GET',
    route: '/orgs/:org_id/approvals',
    ok: 200,
    roles: userRoles,
    keyScopes: ['approvals:read'],
    params: async (w) => (await newApproval(w), {}),
    check: (r, w) => {
      expect(r.body.pending_count).toBeGreaterThan(0);
      expect(r.body.items[0]).toMatchObject({ svc_id: w.humanAgentA });
    },
  },
  {
    method: 'GET',
    route: '/orgs/:org_id/approvals/:approval_id',
    ok: 200,
    roles: userRoles,
    keyScopes: ['approvals:read'],
    params: newApproval,
    check: (r, w) =>
      expect(r.body).toMatchObject({ status: 'pending', svc_id: w.humanAgentA, capability: 'billing:refund' }),
  },
  {
    method: 'POST',
    route: '/orgs/:org_id/approvals/:approval_id/approve',
    ok: 200,
    roles: managers,
    keyScopes: ['approvals:write'],
    params: newApproval,
    body: () => ({ notes: 'fine' }),
    check: (r) => expect(r.body).toMatchObject({ status: 'approved', notes: 'fine' }),
  },
  {
    method: 'POST',
    route: '/orgs/:org_id/approvals/:approval_id/deny',
    ok: 200,
    roles: managers,
    keyScopes: ['approvals:write'],
    params: newApproval,
    body: () => ({ reason: 'not today' }),
    check: (r) => expect(r.body).toMatchObject({ status: 'denied', reason: 'not today' }),
  },
  {
    method: 'POST',
    route: '/gateway/evaluate',
    ok: 200,
    roles: managers,
    keyScopes: ['gateway:evaluate', 'gateway:execute'],
    body: gatewayBody,
    check: (r) => expect(r.body).toMatchObject({ decision: 'allow', executed: false }),
  },
  {
    method: 'POST',
    route: '/auth/refresh',
    ok: 200,
    roles: userRoles,
    keyScopes: [],
    check: async (r, w) => {
      expect(r.body).toMatchObject({ token_type: 'bearer', expires_in: 3600 });
      const me = await w.t.request('GET', `/api/v1/orgs/${w.orgA.orgId}`, { token: r.body.access_token });
      expect(me.status).toBe(200);
    },
  },
  {
    method: 'POST',
    route: '/auth/logout',
    ok: 204,
    roles: userRoles,
    keyScopes: [],
    check: (r) => expect(r.text).toBe(''),
  },
];

/** Open routes: no credentials needed. */
const openRoutes = [
  { method: 'POST', route: '/orgs' },
  { method: 'GET', route: '/signup' },
  { method: 'POST', route: '/auth/login' },
  { method: 'POST', route: '/auth/login', root: true as const },
  { method: 'POST', route: '/auth/refresh', root: true as const },
  { method: 'POST', route: '/auth/sso/exchange' },
];

const label = (r: { method: string; route: string }) => `${r.method} ${r.route}`;

let w: World;

let checker: OpenApiResponseChecker;

beforeAll(async () => {
  const app = await startTestApp(LOOPBACK_UPSTREAMS);
  idp = await startIdentityProvider({ redirectUri: app.app.services.sso.redirectUri });
  const upstreamResources: string[] = [];
  upstreamAs = await startAuthorizationServer({
    resources: () => upstreamResources,
    redirectUri: app.app.services.tools.upstreamRedirectUri,
  });
  protectedMcp = await startProtectedMcpServer({ issuer: upstreamAs.issuer });
  upstreamResources.push(protectedMcp.url);
  // Every response of the matrix, its setup included, is checked against the served document.
  checker = await OpenApiResponseChecker.load(app);
  const t: TestApp = { ...app, request: checker.validating(app).request };
  const orgA = await signUp(t, 'matrix-a');
  const orgB = await signUp(t, 'matrix-b');
  // The matrix sends well over 1000 requests a minute as org A; the limit itself is tested in identity tests.
  for (const org of [orgA, orgB]) {
    const raised = await t.request('PATCH', `/api/v1/orgs/${org.orgId}`, {
      token: org.adminToken,
      body: { operator_rate_limit_per_minute: 1_000_000 },
    });
    expect(raised.status).toBe(200);
  }
  const asSessionUser = (org: OrgFixture, id: string, email: string, role: UserRole): SessionUser => ({
    id,
    orgId: org.orgId,
    email,
    role,
  });
  const operator = await addUser(t, orgA, 'operator');
  const viewer = await addUser(t, orgA, 'viewer');
  w = {
    t,
    orgA,
    orgB,
    usersA: {
      admin: asSessionUser(orgA, orgA.adminUserId, orgA.adminEmail, 'admin'),
      operator: asSessionUser(orgA, operator.userId, operator.email, 'operator'),
      viewer: asSessionUser(orgA, viewer.userId, viewer.email, 'viewer'),
    },
    adminB: asSessionUser(orgB, orgB.adminUserId, orgB.adminEmail, 'admin'),
    agentA: '',
    recordA: '',
    humanAgentA: '',
    humanAgentKeyA: '',
    freeTemplateA: '',
  };
  const agent = await createManifest(
    t,
    orgA,
    'active',
    manifestPayload({
      capabilities: ['billing:read'],
      constraints: { max_actions_per_hour: 10000, max_actions_per_day: 10000 },
    }),
  );
  w.agentA = agent.svcId;
  const tool = await t.request('POST', `/api/v1/orgs/${orgA.orgId}/tools`, {
    token: orgA.adminToken,
    body: { action_type: 'billing', connector: 'mock', config: { response: { ok: true } } },
  });
  expect(tool.status).toBe(201);
  const executed = await t.request('POST', '/api/v1/gateway/execute', {
    apiKey: (await createKey(t, orgA, ['gateway:execute'])).key,
    body: gatewayBody(w),
  });
  expect(executed.status).toBe(200);
  w.recordA = executed.body.interaction_id;
  const humanAgent = await createManifest(
    t,
    orgA,
    'active',
    manifestPayload({
      capabilities: ['billing:refund'],
      constraints: {
        max_actions_per_hour: 10000,
        max_actions_per_day: 10000,
        require_human_approval: ['billing:refund'],
      },
    }),
  );
  w.humanAgentA = humanAgent.svcId;
  w.humanAgentKeyA = (await createKey(t, orgA, ['gateway:execute'], { svc_ids: [humanAgent.svcId] })).key;
  w.freeTemplateA = (await newTemplate(w)).id;
  expect(
    (await t.request('POST', `/manifests/${w.freeTemplateA}/publish`, { token: orgA.adminToken, body: {} })).status,
  ).toBe(200);
});

afterAll(async () => {
  await w?.t.close();
  await idp?.close();
  await protectedMcp?.close();
  await upstreamAs?.close();
});

/** A fresh bearer token, so that refresh and logout never consume a token another test uses. */
async function bearer(user: SessionUser, ttlSeconds?: number): Promise<string> {
  return (await w.t.app.services.sessions.startSession(user, 'password', ttlSeconds)).access_token;
}

function fillPath(row: Row, orgId: string, params: Record<string, string>): string {
  const all: Record<string, string> = { org_id: orgId, ...params };
  return `${row.root ? '' : '/api/v1'}${row.route.replace(/:([a-z_]+)/g, (_, name: string) => {
    if (!(name in all)) throw new Error(`${label(row)}: no value for :${name}`);
    return encodeURIComponent(all[name]);
  })}${row.query ? `?${row.query}` : ''}`;
}

async function auditCount(): Promise<number> {
  const [row] = await w.t.database.db.sql.query<{ n: number }>('SELECT count(*)::int AS n FROM audit_logs');
  return Number(row.n);
}

/** The request for the row on org `orgId`; builds fresh path parameters and body. */
async function prepare(row: Row, orgId = w.orgA.orgId) {
  const path = fillPath(row, orgId, row.params ? await row.params(w) : {});
  return { path, body: row.body?.(w) };
}

/** A refusal: exact status and envelope, and no write happened (every write is audited). */
async function expectRefused(
  row: Row,
  credentials: RequestOptions,
  status: 401 | 403 | 404,
  code: string,
  orgId?: string,
) {
  const { path, body } = await prepare(row, orgId);
  const before = await auditCount();
  const response = await w.t.request(row.method, path, { ...credentials, body });
  expect({ status: response.status, body: response.body }).toEqual({
    status,
    body:
      status === 404
        ? { error: { code, message: expect.any(String), details: {} } }
        : { detail: { code, message: expect.any(String) } },
  });
  expect(await auditCount()).toBe(before);
}

async function expectAllowed(row: Row, credentials: RequestOptions) {
  const { path, body } = await prepare(row);
  const response = await w.t.request(row.method, path, { ...credentials, body });
  expect(response).toMatchObject({ status: row.ok });
  if (row.contentType) expect(response.headers.get('content-type')).toBe(row.contentType);
  await row.check?.(response, w);
}

/** Flips one character inside the signature segment of a JWT. */
function tamperSignature(token: string): string {
  const [header, payload, signature] = token.split('.');
  const i = 10;
  const flipped = signature[i] === 'A' ? 'B' : 'A';
  const tampered = `${header}.${payload}.${signature.slice(0, i)}${flipped}${signature.slice(i + 1)}`;
  expect(tampered).not.toBe(token);
  return tampered;
}

/** Credentials that must never authenticate. Built per test: each needs a little setup. */
const rejectedCredentials: {
  name: string;
  code: 'AUTHENTICATION_REQUIRED' | 'INVALID_TOKEN';
  make: () => Promise<RequestOptions>;
}[] = [
  { name: 'no credentials', code: 'AUTHENTICATION_REQUIRED', make: async () => ({}) },
  { name: 'garbage bearer token', code: 'INVALID_TOKEN', make: async () => ({ token: 'not-a-jwt' }) },
  { name: 'garbage API key', code: 'INVALID_TOKEN', make: async () => ({ apiKey: 'agw_garbage' }) },
  {
    name: 'well-formed but unknown API key',
    code: 'INVALID_TOKEN',
    make: async () => ({ apiKey: generateApiKey().key }),
  },
  {
    name: 'Basic authorization',
    code: 'INVALID_TOKEN',
    make: async () => ({ headers: { authorization: 'Basic xxx' } }),
  },
  {
    name: 'both a bearer token and an API key',
    code: 'INVALID_TOKEN',
    make: async () => ({
      token: await bearer(w.usersA.admin),
      apiKey: (await createKey(w.t, w.orgA, [...apiKeyScopes])).key,
    }),
  },
  {
    name: 'expired bearer token',
    code: 'INVALID_TOKEN',
    make: async () => ({ token: await bearer(w.usersA.admin, -60) }),
  },
  {
    name: 'bearer token with a tampered signature',
    code: 'INVALID_TOKEN',
    make: async () => ({ token: tamperSignature(await bearer(w.usersA.admin)) }),
  },
  {
    name: 'logged-out bearer token',
    code: 'INVALID_TOKEN',
    make: async () => {
      const token = await bearer(w.usersA.admin);
      expect((await w.t.request('POST', '/api/v1/auth/logout', { token })).status).toBe(204);
      return { token };
    },
  },
  {
    name: 'bearer token replaced by refresh',
    code: 'INVALID_TOKEN',
    make: async () => {
      const token = await bearer(w.usersA.admin);
      expect((await w.t.request('POST', '/api/v1/auth/refresh', { token })).status).toBe(200);
      return { token };
    },
  },
  {
    name: 'deleted API key',
    code: 'INVALID_TOKEN',
    make: async () => {
      const { keyId, key } = await createKey(w.t, w.orgA, [...apiKeyScopes]);
      const deleted = await w.t.request('DELETE', `/api/v1/orgs/${w.orgA.orgId}/api-keys/${keyId}`, {
        token: w.orgA.adminToken,
      });
      expect(deleted.status).toBe(204);
      return { apiKey: key };
    },
  },
  {
    name: 'expired API key',
    code: 'INVALID_TOKEN',
    make: async () => {
      const { keyId, key } = await createKey(w.t, w.orgA, [...apiKeyScopes]);
      await w.t.database.db.sql.query(`UPDATE api_keys SET expires_at = now() - interval '1 minute' WHERE id = $1`, [
        keyId,
      ]);
      return { apiKey: key };
    },
  },
];

describe('the matrix covers every route', () => {
  // SOFA routes and streamed routes alike.
  const declaredRoutes = () =>
    [...restRoutes.values(), ...streamRoutes] as {
      method: string;
      path: string;
      mount?: 'root';
      auth: readonly string[];
      status?: number;
    }[];
  const rootOf = (r: { mount?: 'root'; root?: true }) => r.mount === 'root' || r.root === true;

  test('rows = declared routes that need credentials; open routes = declared routes without', () => {
    const declared = declaredRoutes();
    const key = (r: { method: string; path?: string; route?: string; mount?: 'root'; root?: true }) =>
      `${r.method} ${rootOf(r) ? '' : '/api/v1'}${r.path ?? r.route}`;
    expect(new Set(matrix.map(key))).toEqual(new Set(declared.filter((r) => r.auth.length > 0).map(key)));
    expect(new Set(openRoutes.map(key))).toEqual(new Set(declared.filter((r) => r.auth.length === 0).map(key)));
    expect(matrix.length).toBe(new Set(matrix.map(key)).size);
  });

  test.each(matrix)('$method $route: success status and security schemes agree with its declaration', (row) => {
    const declared = declaredRoutes().find(
      (r) => r.method === row.method && r.path === row.route && rootOf(r) === rootOf(row),
    )!;
    expect(declared.status ?? 200).toBe(row.ok);
    const schemes = [...(row.keyScopes.length ? ['apiKey'] : []), ...(row.roles.length ? ['bearer'] : [])];
    expect([...declared.auth].sort()).toEqual(schemes);
  });
});

describe.each(matrix)('$method $route', (row) => {
  test.each(rejectedCredentials)('$name → 401 $code', async ({ make, code }) => {
    await expectRefused(row, await make(), 401, code);
  });

  const roleCases = userRoles.map((role) => {
    const allowed = row.roles.includes(role);
    return { role, allowed, outcome: allowed ? String(row.ok) : '403 FORBIDDEN' };
  });
  test.each(roleCases)('bearer $role of the org → $outcome', async ({ role, allowed }) => {
    const credentials = { token: await bearer(w.usersA[role]) };
    if (allowed) await expectAllowed(row, credentials);
    else await expectRefused(row, credentials, 403, 'FORBIDDEN');
  });

  const lackingScopes = apiKeyScopes.filter((scope) => !row.keyScopes.includes(scope));
  const lacking = row.keyScopes.length
    ? `every scope but ${row.keyScopes.join(', ')}`
    : 'every scope (keys are never allowed)';
  if (lackingScopes.length) {
    test(`API key of the org with ${lacking} → 403 FORBIDDEN`, async () => {
      const { key } = await createKey(w.t, w.orgA, lackingScopes);
      await expectRefused(row, { apiKey: key }, 403, 'FORBIDDEN');
    });
  }

  if (row.keyScopes.length) {
    test.each(row.keyScopes.map((scope) => ({ scope })))('API key with scope $scope → allowed', async ({ scope }) => {
      await expectAllowed(row, { apiKey: (await createKey(w.t, w.orgA, [scope])).key });
    });
  }

  if (row.route.includes(':org_id')) {
    test("another org's admin → 404 NOT_FOUND", async () => {
      await expectRefused(row, { token: await bearer(w.adminB) }, 404, 'NOT_FOUND');
    });

    test("another org's API key with every scope → 404 NOT_FOUND", async () => {
      const { key } = await createKey(w.t, w.orgB, [...apiKeyScopes]);
      await expectRefused(row, { apiKey: key }, 404, 'NOT_FOUND');
    });

    test('admin on an org id that does not exist → 404 NOT_FOUND', async () => {
      await expectRefused(row, { token: await bearer(w.usersA.admin) }, 404, 'NOT_FOUND', randomUUID());
    });
  }
});

describe('open routes work without credentials', () => {
  test('POST /api/v1/orgs → 201', async () => {
    const slug = `open-${unique()}`;
    const response = await w.t.request('POST', '/api/v1/orgs', {
      body: { name: `Org ${slug}`, slug, admin_email: `admin@${slug}.example`, admin_password: PASSWORD },
    });
    expect(response.status).toBe(201);
    expect(response.body).toMatchObject({ slug, admin_user: { email: `admin@${slug}.example`, role: 'admin' } });
  });

  test('GET /api/v1/signup → 200, sign-up open (the default)', async () => {
    const response = await w.t.request('GET', '/api/v1/signup');
    expect({ status: response.status, body: response.body }).toEqual({ status: 200, body: { open: true } });
  });

  test('POST /api/v1/auth/login → 200 with a working token', async () => {
    const response = await w.t.request('POST', '/api/v1/auth/login', {
      body: { email: w.orgA.adminEmail, password: PASSWORD },
    });
    expect(response.status).toBe(200);
    expect(response.body).toMatchObject({ token_type: 'bearer', expires_in: 3600 });
    const me = await w.t.request('GET', `/api/v1/orgs/${w.orgA.orgId}`, { token: response.body.access_token });
    expect(me.status).toBe(200);
  });

  test('POST /auth/login and POST /auth/refresh (the secondary listing, at the root) → 200, the refresh token rotating', async () => {
    const login = await w.t.request('POST', '/auth/login', { body: { email: w.orgA.adminEmail, password: PASSWORD } });
    expect(login.status).toBe(200);
    const rotated = await w.t.request('POST', '/auth/refresh', { body: { refresh_token: login.body.refresh_token } });
    expect(rotated.status).toBe(200);
    expect(rotated.body.refresh_token).not.toBe(login.body.refresh_token);
  });

  test('single sign-on: GET /auth/sso/{org_slug} → 302, its callback → 302, POST /api/v1/auth/sso/exchange → 200 with a working token', async () => {
    await withSso(w);
    idp.accounts.set('matrix-user', { email: `matrix-user@${w.orgA.slug}.example`, email_verified: true });
    const started = await w.t.request('GET', `/auth/sso/${w.orgA.slug}`);
    expect(started.status).toBe(302);
    const jar = new CookieJar();
    jar.take(new Response(null, { headers: started.headers }));
    const redirectUri = w.t.app.services.sso.redirectUri;
    const answer = await signInAtProvider(started.headers.get('location')!, 'matrix-user', redirectUri);
    const callback = await w.t.request('GET', `${answer.pathname}${answer.search}`, {
      headers: { cookie: jar.header() },
    });
    expect(callback.status).toBe(302);
    const code = new URLSearchParams(callback.headers.get('location')!.split('#')[1]).get('code');
    const session = await w.t.request('POST', '/api/v1/auth/sso/exchange', { body: { code } });
    expect(session.status).toBe(200);
    expect(session.body.user).toMatchObject({ org_id: w.orgA.orgId, role: 'viewer' });
    expect((await w.t.request('GET', `/api/v1/orgs/${w.orgA.orgId}`, { token: session.body.token })).status).toBe(200);
  });

  test("a tool connection's browser steps: GET /oauth/upstream/start → 302 with its cookie, the callback → 302 to the console, the client document → 200", async () => {
    const toolId = await oauthTool(w, 'org');
    const started = await w.t.request('POST', `/api/v1/orgs/${w.orgA.orgId}/tools/${toolId}/connections`, {
      token: w.orgA.adminToken,
    });
    expect(started.status).toBe(201);
    const link = new URL(started.body.authorization_url);
    const opened = await w.t.request('GET', `${link.pathname}${link.search}`);
    expect(opened.status).toBe(302);
    const jar = new CookieJar();
    jar.take(new Response(null, { headers: opened.headers }));
    const redirectUri = w.t.app.services.tools.upstreamRedirectUri;
    const answer = await signInAtProvider(opened.headers.get('location')!, 'matrix-account', redirectUri);
    const callback = await w.t.request('GET', `${answer.pathname}${answer.search}`, {
      headers: { cookie: jar.header() },
    });
    expect(callback.status).toBe(302);
    expect(callback.headers.get('location')).toBe(
      `/console/tools/${toolId}?connection=${started.body.connection_id}&result=connected`,
    );
    expect((await w.t.request('GET', '/oauth/upstream-client.json')).status).toBe(200);
  });

  test('POST /api/v1/auth/sso/exchange → 401 for a code never issued, as documented', async () => {
    for (const code of ['agsso_' + 'A'.repeat(43), 'not-a-code']) {
      const response = await w.t.request('POST', '/api/v1/auth/sso/exchange', { body: { code } });
      expect(response.status).toBe(401);
      expect(response.body.detail.code).toBe('INVALID_TOKEN');
    }
  });

  test('GET /healthz, /readyz and /.well-known/jwks.json → 200 as documented', async () => {
    for (const path of ['/healthz', '/readyz', '/.well-known/jwks.json'])
      expect((await w.t.request('GET', path)).status).toBe(200);
  });

  test('the OAuth metadata documents → 200 without credentials, and POST /oauth/register → 201 as documented', async () => {
    for (const path of [
      '/.well-known/oauth-authorization-server',
      '/.well-known/oauth-protected-resource/mcp/matrix-agent',
    ]) {
      expect((await w.t.request('GET', path)).status).toBe(200);
    }
    const registered = await w.t.request('POST', '/oauth/register', {
      body: { redirect_uris: ['http://127.0.0.1:7777/cb'] },
    });
    expect(registered.status).toBe(201);
    // Credentials change nothing here: an operator's token does not make a registration anything more.
    const withToken = await w.t.request('POST', '/oauth/register', {
      token: w.orgA.adminToken,
      body: { redirect_uris: ['http://127.0.0.1:7777/cb'] },
    });
    expect(withToken.status).toBe(201);
    expect(withToken.body.client_id).not.toBe(registered.body.client_id);
  });

  test('the OAuth flow’s endpoints → 302, 200 and 200 without credentials, as documented', async () => {
    const publicUrl = w.t.app.env.publicUrl;
    const clientId = await registerClient(w.t);
    const { challenge } = pkce();
    const authorized = await w.t.request(
      'GET',
      authorizeUrl(authorizationParams(publicUrl, clientId, w.agentA, challenge)),
    );
    expect(authorized.status).toBe(302);
    const client = await connectClient(w.t, publicUrl, w.orgA.adminToken, w.agentA);
    const rotated = await tokenRequest(w.t, {
      grant_type: 'refresh_token',
      refresh_token: client.refreshToken,
      client_id: client.clientId,
    });
    expect(rotated.status).toBe(200);
    const revoked = await w.t.request('POST', '/oauth/revoke', {
      body: form({ token: rotated.body.refresh_token, client_id: client.clientId }),
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
    });
    expect(revoked.status).toBe(200);
  });

  test('POST /api/v1/auth/login with a wrong password → 401 INVALID_TOKEN', async () => {
    const response = await w.t.request('POST', '/api/v1/auth/login', {
      body: { email: w.orgA.adminEmail, password: 'not the right password' },
    });
    expect({ status: response.status, body: response.body }).toEqual({
      status: 401,
      body: { detail: { code: 'INVALID_TOKEN', message: expect.any(String) } },
    });
  });
});

describe('the OpenAPI document describes what the routes answer', () => {
  test('every operation has answered a 2xx this document validates (a generated client would accept it)', () => {
    // The matrix ran every route's positive case through the validating client above.
    expect(
      checker
        .operations()
        .filter((id) => !checker.covered.has(id))
        .sort(),
    ).toEqual([]);
  });
});
