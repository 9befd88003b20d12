/**
 * OAuth for MCP clients with clients nobody here wrote (docs/decisions/0047-mcp-oauth.md): the
 * official SDK's client-side OAuth (`auth()` through an `OAuthClientProvider` on its Streamable
 * HTTP transport), in its v1 package on 2025-11-25 and its v2 package on 2026-07-28, and
 * `mcp-remote`'s own browser flow, each from the first 401 to a tool call, with the console's
 * consent page answered in Debian's Chromium by a signed-in operator. Nothing is registered or
 * consented behind the clients' backs: they discover, register, open the browser and exchange
 * the code themselves.
 */
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type RequestListener, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client as ClientV1 } from '@modelcontextprotocol/sdk/client/index.js';
import type { OAuthClientProvider as ProviderV1 } from '@modelcontextprotocol/sdk/client/auth.js';
import { UnauthorizedError as UnauthorizedV1 } from '@modelcontextprotocol/sdk/client/auth.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport as TransportV1 } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { OAuthClientInformationFull, OAuthTokens } from '@modelcontextprotocol/sdk/shared/auth.js';
import {
  Client as ClientV2,
  StreamableHTTPClientTransport as TransportV2,
  UnauthorizedError as UnauthorizedV2,
  type OAuthClientProvider as ProviderV2,
} from '@modelcontextprotocol/client';
import { startTestApp, type TestApp } from '../../support/app.js';
import { chromiumTests, eventually, screenshot, submitSignIn, watchedPage } from '../../support/console.js';
import { addUser, signUp, type OrgFixture } from '../../support/fixtures.js';
import { readyAgent, type AgentFixture } from '../../support/gateway.js';
import { freePort } from '../../support/service-process.js';

const { test, newContext } = chromiumTests();
const root = fileURLToPath(new URL('../../..', import.meta.url));

let t: TestApp;
let service: Server;
let base: string;
let org: OrgFixture;
let operator: { email: string };

const listen = async (server: Server) => {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return (server.address() as AddressInfo).port;
};

beforeAll(async () => {
  // PUBLIC_URL is where the clients reach the service: the issuer and the resources name it.
  let app: RequestListener | undefined;
  service = createServer((request, response) => app!(request, response));
  base = `http://127.0.0.1:${await listen(service)}`;
  t = await startTestApp({ PUBLIC_URL: base });
  app = t.app.yoga;
  org = await signUp(t, 'oauth-clients');
  operator = await addUser(t, org, 'operator');
});

afterAll(async () => {
  service?.closeAllConnections();
  await new Promise((resolve) => service?.close(resolve));
  await t?.close();
});

const CONSENT_HEADING = 'Connect an MCP client to an agent?';

/**
 * What a person does with the URL the client opened: lands on the consent page, signs in as the
 * operator, checks the client and the agent, presses Allow. The browser then goes to the client's
 * redirect URI, where the client takes over.
 */
async function consentInBrowser(authorizationUrl: string, agent: AgentFixture, shot: string): Promise<void> {
  const { page, problems } = await watchedPage(await newContext());
  await page.goto(authorizationUrl);
  await submitSignIn(page, operator.email);
  await page.getByRole('heading', { level: 1, name: CONSENT_HEADING }).waitFor();
  expect(await page.getByRole('article', { name: 'The agent' }).innerText()).toContain(agent.svcId);
  await screenshot(page, `oauth-client-${shot}`);
  const leaving = page.waitForURL((url) => url.origin !== base);
  await page.getByRole('button', { name: 'Allow' }).click();
  await leaving;
  expect(problems).toEqual([]);
}

/** The redirect URI of an SDK client: a local server that keeps what the browser brought. */
async function callbackServer() {
  const arrivals: URLSearchParams[] = [];
  const server = createServer((request, response) => {
    arrivals.push(new URL(request.url!, 'http://callback').searchParams);
    response.writeHead(200, { 'content-type': 'text/plain' }).end('You can close this window.');
  });
  const port = await listen(server);
  return {
    url: `http://127.0.0.1:${port}/callback`,
    arrivals,
    next: async (count: number) =>
      (await eventually(
        () => arrivals.length,
        (n) => n >= count,
      )) >= count
        ? arrivals[count - 1]
        : undefined,
    close: () => new Promise((resolve) => server.close(resolve)),
  };
}

/** An `OAuthClientProvider` as an application writes one: everything in memory, the browser "opened" by `open`. */
class MemoryProvider {
  information: OAuthClientInformationFull | undefined;
  saved: OAuthTokens | undefined;
  verifier = '';
  /** The state of the last authorization request: the gateway requires one, and the client checks it comes back. */
  lastState = '';
  opened: URL[] = [];
  constructor(
    readonly redirectUrl: string,
    /** What the application does with the authorization URL: a person answers it in the browser. */
    public open: (url: URL) => Promise<void>,
  ) {}
  state() {
    this.lastState = randomBytes(16).toString('base64url');
    return this.lastState;
  }
  get clientMetadata() {
    return {
      client_name: 'SDK test client',
      redirect_uris: [this.redirectUrl],
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      token_endpoint_auth_method: 'none',
    };
  }
  clientInformation() {
    return this.information;
  }
  saveClientInformation(information: OAuthClientInformationFull) {
    this.information = information;
  }
  tokens() {
    return this.saved;
  }
  saveTokens(tokens: OAuthTokens) {
    this.saved = tokens;
  }
  async redirectToAuthorization(url: URL) {
    this.opened.push(url);
    await this.open(url);
  }
  /** What the SDK v2 learned discovering the authorization server, kept with the verifier so the callback is bound to that server (SEP-2352). */
  discovery: unknown;
  saveDiscoveryState(state: unknown) {
    this.discovery = state;
  }
  discoveryState() {
    return this.discovery as never;
  }
  saveCodeVerifier(verifier: string) {
    this.verifier = verifier;
  }
  codeVerifier() {
    return this.verifier;
  }
}

const recordsOf = async (svcId: string) =>
  (await t.request('GET', `/api/v1/records?agent_id=${svcId}&limit=200`, { token: org.adminToken })).body
    .items as Array<{ channel: string; decision: string }>;

test('SDK v1 (2025-11-25): auth() from the 401 through registration and the consent page to a tool call; a refused token is refreshed; a revoked grant is refused, its refresh too', async () => {
  const agent = await readyAgent(t, org);
  const callback = await callbackServer();
  try {
    const provider = new MemoryProvider(callback.url, (url) => consentInBrowser(url.toString(), agent, 'sdk-v1'));
    const endpoint = new URL(`${base}/mcp/${agent.svcId}`);
    const first = new ClientV1({ name: 'sdk-v1', version: '1.0.0' });
    const transport = new TransportV1(endpoint, { authProvider: provider as unknown as ProviderV1 });
    await expect(first.connect(transport)).rejects.toThrow(UnauthorizedV1);
    expect(provider.information?.client_id).toMatch(/^agc_/);
    const answer = await callback.next(1);
    expect(answer?.get('iss')).toBe(base);
    expect(answer?.get('state')).toBe(provider.lastState);
    await transport.finishAuth(answer!.get('code')!);
    expect(provider.saved).toMatchObject({
      token_type: expect.stringMatching(/^bearer$/i),
      scope: 'mcp:tools',
      refresh_token: expect.stringMatching(/^ort_/),
    });

    const client = new ClientV1({ name: 'sdk-v1', version: '1.0.0' });
    await client.connect(new TransportV1(endpoint, { authProvider: provider as unknown as ProviderV1 }));
    expect((await client.listTools()).tools.map((tool) => tool.name).sort()).toEqual([
      'billing__read',
      'billing__refund',
    ]);
    expect((await client.callTool({ name: 'billing__read', arguments: { invoice: 'inv-1' } })).isError).toBe(false);

    // An access token the gateway refuses: the SDK refreshes with its refresh token, once, and goes on.
    const refreshToken = provider.saved!.refresh_token;
    provider.saved = { ...provider.saved!, access_token: 'not.a.token' };
    const again = new ClientV1({ name: 'sdk-v1', version: '1.0.0' });
    await again.connect(new TransportV1(endpoint, { authProvider: provider as unknown as ProviderV1 }));
    expect((await again.callTool({ name: 'billing__read', arguments: { invoice: 'inv-2' } })).isError).toBe(false);
    expect(provider.saved!.refresh_token).not.toBe(refreshToken);
    expect(provider.opened).toHaveLength(1);

    // The operator revokes the grant: the next call is refused, and so is the refresh the SDK tries.
    const grants = (await t.request('GET', `/api/v1/agents/${agent.svcId}/grants`, { token: org.adminToken })).body
      .items;
    expect(grants).toEqual([expect.objectContaining({ client_name: 'SDK test client', approved_by: operator.email })]);
    expect(
      (
        await t.request('DELETE', `/api/v1/agents/${agent.svcId}/grants/${grants[0].grant_id}`, {
          token: org.adminToken,
        })
      ).status,
    ).toBe(204);
    provider.open = async () => undefined;
    const refusal = await again.callTool({ name: 'billing__read', arguments: { invoice: 'inv-3' } }).then(
      () => 'answered',
      (error: Error) => `${error.constructor.name}: ${error.message}`,
    );
    expect(refusal).toMatch(/revoked/);
    expect((await recordsOf(agent.svcId)).filter((r) => r.channel === 'mcp' && r.decision === 'allow')).toHaveLength(2);
  } finally {
    await callback.close();
  }
});

test('SDK v2 on 2026-07-28: the same flow; finishAuth checks the issuer the redirect names (RFC 9207) before it spends the code', async () => {
  const agent = await readyAgent(t, org);
  const callback = await callbackServer();
  try {
    const provider = new MemoryProvider(callback.url, (url) => consentInBrowser(url.toString(), agent, 'sdk-v2'));
    const endpoint = new URL(`${base}/mcp/${agent.svcId}`);
    const pinned = { versionNegotiation: { mode: { pin: '2026-07-28' } } } as const;
    const first = new ClientV2({ name: 'sdk-v2', version: '2.0.0' }, pinned);
    const transport = new TransportV2(endpoint, { authProvider: provider as unknown as ProviderV2 });
    await expect(first.connect(transport)).rejects.toThrow(UnauthorizedV2);
    const answer = await callback.next(1);
    expect(answer?.get('iss')).toBe(base);
    expect(answer?.get('state')).toBe(provider.lastState);
    // A redirect that names another issuer (a mix-up) is refused before the code is spent ...
    const mixedUp = new URLSearchParams({
      code: answer!.get('code')!,
      state: answer!.get('state')!,
      iss: 'https://other-issuer.example',
    });
    await expect(transport.finishAuth(mixedUp)).rejects.toThrow();
    // ... so the real one still works.
    await transport.finishAuth(answer!);
    expect(provider.saved).toMatchObject({ scope: 'mcp:tools', refresh_token: expect.stringMatching(/^ort_/) });

    const client = new ClientV2({ name: 'sdk-v2', version: '2.0.0' }, pinned);
    const connected = new TransportV2(endpoint, { authProvider: provider as unknown as ProviderV2 });
    await client.connect(connected);
    expect(connected.protocolVersion).toBe('2026-07-28');
    expect((await client.listTools()).tools.map((tool) => tool.name).sort()).toEqual([
      'billing__read',
      'billing__refund',
    ]);
    expect((await client.callTool({ name: 'billing__read', arguments: { invoice: 'inv-1' } })).isError).toBe(false);
    expect((await recordsOf(agent.svcId)).filter((r) => r.channel === 'mcp' && r.decision === 'allow')).toHaveLength(1);
    await client.close();
  } finally {
    await callback.close();
  }
});

test('mcp-remote, as a desktop host runs it: it discovers, registers, opens the browser on the consent page, takes the code at its own callback and proxies stdio to the agent', async () => {
  const agent = await readyAgent(t, org);
  const scratch = mkdtempSync(path.join(tmpdir(), 'mcp-remote-'));
  // The "browser" mcp-remote opens: it writes down the URL it was given; the test's Chromium visits it.
  const opened = path.join(scratch, 'opened-url');
  const browser = path.join(scratch, 'browser.sh');
  writeFileSync(browser, `#!/bin/sh\nprintf '%s' "$1" > '${opened}'\n`);
  chmodSync(browser, 0o755);
  const callbackPort = await freePort();
  const stderr: string[] = [];
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [
      path.join(root, 'node_modules/mcp-remote/dist/proxy.js'),
      `${base}/mcp/${agent.svcId}`,
      String(callbackPort),
      '--host',
      '127.0.0.1',
      '--allow-http',
    ],
    env: {
      ...process.env,
      BROWSER: browser,
      MCP_REMOTE_CONFIG_DIR: path.join(scratch, 'config'),
      DISPLAY: '',
      XDG_CURRENT_DESKTOP: '',
    } as Record<string, string>,
    stderr: 'pipe',
  });
  transport.stderr?.on('data', (chunk: Buffer) => stderr.push(chunk.toString()));
  const client = new ClientV1({ name: 'desktop-host', version: '1.0.0' });
  try {
    const connecting = client.connect(transport);
    const url = await eventually(
      () => (existsSync(opened) ? readFileSync(opened, 'utf8') : ''),
      (text) => text.length > 0,
      30_000,
    );
    expect({ url, stderr: url ? '' : stderr.join('') }).toEqual({
      url: expect.stringMatching(new RegExp(`^${base}/oauth/authorize\\?`)),
      stderr: '',
    });
    const asked = new URL(url).searchParams;
    expect(asked.get('redirect_uri')).toBe(`http://127.0.0.1:${callbackPort}/oauth/callback`);
    expect(asked.get('resource')).toBe(`${base}/mcp/${agent.svcId}`);
    await consentInBrowser(url, agent, 'mcp-remote');
    await connecting;
    expect((await client.listTools()).tools.map((tool) => tool.name).sort()).toEqual([
      'billing__read',
      'billing__refund',
    ]);
    const result = await client.callTool({ name: 'billing__read', arguments: { invoice: 'inv-9' } });
    expect(result.isError).toBe(false);
    const grants = (await t.request('GET', `/api/v1/agents/${agent.svcId}/grants`, { token: org.adminToken })).body
      .items;
    expect(grants).toEqual([
      expect.objectContaining({
        client_id: expect.stringMatching(/^agc_/),
        redirect_uri: `http://127.0.0.1:${callbackPort}/oauth/callback`,
      }),
    ]);
  } finally {
    await client.close();
    rmSync(scratch, { recursive: true, force: true });
  }
});
