/**
 * Connecting a tool from the console, end to end (docs/decisions/0068-upstream-connections.md):
 * Debian's Chromium against the real service on a real port (PUBLIC_URL its address), panva's
 * oidc-provider as the upstream's authorization server with its development login and consent
 * pages, and an MCP server of the official SDK that takes only its tokens. A viewer connects
 * their own account at the tool's address, and an agent acting for them calls the tool over REST
 * and MCP with that account; an operator connects the organization's from the Tools page and
 * revokes it.
 *
 * Conventions of console.e2e.test.ts: each test has its own organization and browser context,
 * screenshots go to test/artifacts/, skipped with a notice without Chromium (failing under CI).
 */
import { createServer, type Server } from 'node:http';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import type { AddressInfo } from 'node:net';
import { LOOPBACK_UPSTREAMS, startTestApp, type TestApp } from '../../support/app.js';
import { chromiumTests, type ConsolePage, screenshot, submitSignIn, watchedPage } from '../../support/console.js';
import {
  type ProtectedMcpServer,
  startAuthorizationServer,
  startProtectedMcpServer,
  type TestAuthorizationServer,
} from '../../support/oauth-upstream.js';
import {
  addUser,
  createKey,
  createManifest,
  manifestPayload,
  signUp,
  type OrgFixture,
} from '../../support/fixtures.js';

/** The upstream: its authorization server, its MCP server, and the resources the server issues tokens for. */
const resources: string[] = [];
let as: TestAuthorizationServer;
let upstream: ProtectedMcpServer;

const { test, newContext } = chromiumTests();

/** The service on a real port, its address its PUBLIC_URL. */
let t: TestApp;
let service: Server;
let base: string;

beforeAll(async () => {
  // The address first: PUBLIC_URL is where the authorization server sends the browser back.
  service = createServer();
  await new Promise<void>((resolve) => service.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(service.address() as AddressInfo).port}`;
  t = await startTestApp({ ...LOOPBACK_UPSTREAMS, PUBLIC_URL: base });
  service.on('request', t.app.yoga);
  as = await startAuthorizationServer({ resources: () => resources, redirectUri: `${base}/oauth/upstream/callback` });
  upstream = await startProtectedMcpServer({ issuer: as.issuer });
  resources.push(upstream.url);
});

afterAll(async () => {
  if (service) {
    service.closeAllConnections();
    await new Promise((resolve) => service.close(resolve));
  }
  await upstream?.close();
  await as?.close();
  await t?.close();
});

async function oauthTool(org: OrgFixture, connection: 'org' | 'user'): Promise<string> {
  const created = await t.request('POST', `/api/v1/orgs/${org.orgId}/tools`, {
    token: org.adminToken,
    body: {
      action_type: 'mail',
      connector: 'mcp',
      config: { url: upstream.url, allow_private_network: true, tool: 'whoami', auth: { type: 'oauth', connection } },
    },
  });
  if (created.status !== 201) throw new Error(`tool create failed: ${created.status} ${created.text}`);
  return created.body.tool_id;
}

async function signedIn(email: string, path: string): Promise<ConsolePage> {
  const view = await watchedPage(await newContext());
  await view.page.goto(`${base}${path}`);
  await submitSignIn(view.page, email);
  await view.page.getByRole('heading', { level: 1, name: 'Tools' }).waitFor();
  return view;
}

/** The provider's development login (any password) and consent pages, as a person fills them. */
async function signInAtProvider({ page }: ConsolePage, login: string) {
  await page.locator('input[name=login]').fill(login);
  await page.locator('input[name=password]').fill('any');
  await page.getByRole('button', { name: 'Sign-in' }).click();
  await page.getByRole('button', { name: 'Continue' }).click();
}

test("a viewer connects their own account at the tool's address, and the gateway gets a token for them", async () => {
  const org = await signUp(t, 'connect-user');
  const toolId = await oauthTool(org, 'user');
  const viewer = await addUser(t, org, 'viewer');
  const view = await signedIn(viewer.email, `/console/tools/${toolId}`);
  const { page } = view;
  const section = page.getByRole('region', { name: 'OAuth connections' });
  await section.getByText('Not connected yet.').waitFor();
  await section.getByRole('button', { name: 'Connect your account' }).click();
  await page.waitForURL((url) => url.origin === as.issuer);
  await signInAtProvider(view, 'viewer-account');
  await page.waitForURL((url) => url.pathname === `/console/tools/${toolId}`);
  await page.getByRole('status').filter({ hasText: 'Connected' }).waitFor();
  // The result is read once and dropped from the address.
  expect(new URL(page.url()).search).toBe('');
  const item = section.getByRole('group', { name: /^Connection / });
  await item.getByText('connected', { exact: true }).waitFor();
  await item.getByText('viewer-account').waitFor();
  await section.getByRole('button', { name: 'Reconnect your account' }).waitFor();
  await screenshot(page, 'tool-connection-viewer');
  // An agent acting for the viewer (a key bound to them) reaches the upstream as their account,
  // over REST and over MCP with the SDK's client.
  const { svcId } = await createManifest(t, org, 'active', manifestPayload({ capabilities: ['mail:whoami'] }));
  const { key } = await createKey(t, org, ['gateway:execute'], { user_id: viewer.userId });
  const executed = await t.request('POST', '/api/v1/gateway/execute', {
    apiKey: key,
    body: { svc_id: svcId, agent_id: svcId, action: { type: 'mail', tool: 'whoami', params: {} } },
  });
  expect(executed.body.result.data.structuredContent).toMatchObject({ sub: 'viewer-account' });
  const client = new Client({ name: 'agent', version: '1.0.0' });
  await client.connect(
    new StreamableHTTPClientTransport(new URL(`${base}/mcp/${svcId}`), {
      requestInit: { headers: { 'X-API-Key': key } },
    }),
  );
  try {
    const [listed] = (await client.listTools()).tools;
    const called = (await client.callTool({ name: listed.name, arguments: {} })) as CallToolResult;
    expect(called.isError).toBeFalsy();
    expect((called.structuredContent as { structuredContent: unknown }).structuredContent).toMatchObject({
      sub: 'viewer-account',
    });
  } finally {
    await client.close();
  }
  expect(view.problems).toEqual([]);
});

test("an operator connects the organization's account from the Tools page, then revokes it", async () => {
  const org = await signUp(t, 'connect-org');
  const toolId = await oauthTool(org, 'org');
  const operator = await addUser(t, org, 'operator');
  const view = await signedIn(operator.email, '/console/tools');
  const { page } = view;
  const card = page.getByRole('article', { name: 'Tool mail' });
  await card.getByRole('button', { name: 'Connect' }).click();
  await page.waitForURL((url) => url.origin === as.issuer);
  await signInAtProvider(view, 'shared-mailbox');
  await page.waitForURL((url) => url.pathname === `/console/tools/${toolId}`);
  await page.getByRole('status').filter({ hasText: 'Connected' }).waitFor();
  const item = page.getByRole('article', { name: 'Tool mail' }).getByRole('group', { name: /^Connection / });
  await item.getByText('The organization').waitFor();
  await item.getByText('shared-mailbox').waitFor();
  const revocations = as.hits.get('/token/revocation') ?? 0;
  await item.getByRole('button', { name: 'Disconnect' }).click();
  await item.getByRole('button', { name: 'Yes, disconnect' }).click();
  await item.getByText('revoked', { exact: true }).waitFor();
  expect(as.hits.get('/token/revocation') ?? 0).toBeGreaterThan(revocations);
  const tool = await t.app.services.tools.get(org.orgId, toolId);
  expect(await t.app.services.tools.accessTokenFor(tool, { userId: null })).toEqual({
    required: { connectUrl: `${base}/console/tools/${toolId}`, reason: 'revoked' },
  });
  expect(view.problems).toEqual([]);
});
