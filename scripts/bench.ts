// Throughput of the service against a bare node:http server on the same machine, measured in one
// run so that only ratios matter. `npm run bench` (PGlite), or with DATABASE_URL for PostgreSQL.
import { createHash, randomBytes } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import { Session } from 'node:inspector';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import type { AddressInfo } from 'node:net';
import {
  createMcpHandler,
  LATEST_PROTOCOL_VERSION,
  McpServer as McpServerV2,
  PROTOCOL_VERSION_META_KEY,
} from '@modelcontextprotocol/server';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import autocannon from 'autocannon';
import { z } from 'zod';
import { ExportResultCode } from '@opentelemetry/core';
import type { SpanExporter } from '@opentelemetry/sdk-trace';
import type { InteractionRecord } from '../src/generated/prisma/client.js';
import { benchApi } from './bench-setup.js';
import { type LoadRequest, type LoadResult, pooledQuantile, runLoad } from './load.js';
import { nodeHandlerOf, statefulEndpoint } from '../test/support/mcp-upstream.js';

/**
 * The service as `npm start` runs it: built by tsc into dist/ (`npm run bench` rebuilds it when
 * stale), not transpiled by tsx on the fly, which costs the same rows 10-20 % more CPU. Typed by
 * its sources.
 */
const built = <T>(path: string): Promise<T> => import(new URL(`../dist/${path}`, import.meta.url).href);
const { createApp, packageVersion } = await built<typeof import('../src/app.js')>('app.js');
const { createTelemetry } =
  await built<typeof import('../src/observability/telemetry.js')>('observability/telemetry.js');
const { openDatabase } = await built<typeof import('../src/db/database.js')>('db/database.js');
const { parseEnv } = await built<typeof import('../src/env.js')>('env.js');
const { createLogger } = await built<typeof import('../src/logger.js')>('logger.js');
const { GENESIS_HASH, recordHashOf, verifyRecordSignature } = await built<
  typeof import('../src/modules/record/record-chain.js')
>('modules/record/record-chain.js');
const { bodyOf } = await built<typeof import('../src/modules/record/record.service.js')>(
  'modules/record/record.service.js',
);
const { SecretBox } = await built<typeof import('../src/lib/secret-box.js')>('lib/secret-box.js');
const { resourceOf } = await built<typeof import('../src/modules/tool/upstream-oauth-discovery.js')>(
  'modules/tool/upstream-oauth-discovery.js',
);

async function verifyChain(chain: InteractionRecord[], app: ReturnType<typeof createApp>) {
  let broken = 0;
  let prev = GENESIS_HASH;
  for (const record of chain) {
    const key = await app.keys.byId(record.keyId);
    const ok =
      record.prevHash === prev &&
      recordHashOf(bodyOf(record)) === record.recordHash &&
      Boolean(key && verifyRecordSignature(record.recordHash, record.signature, key.publicKey));
    if (!ok) broken++;
    prev = record.recordHash;
  }
  return broken;
}

const DURATION_S = Number(process.env.BENCH_SECONDS ?? 5);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 50);
// The load generator runs in a worker thread so that it does not share the service's event loop.
// BENCH_WORKERS=1 runs the load generator in a worker thread instead (bare then gains more than the service).
const WORKERS = Number(process.env.BENCH_WORKERS ?? 0);
// BENCH_ONLY=evaluate (a substring of a row name; several separated by `|`; `=name` for exactly that
// row) measures just the bare server and the matching rows, for profiling.
const ONLY = process.env.BENCH_ONLY;
const onlyParts = ONLY?.split('|') ?? [];
const onlyMatches = (part: string, name: string) =>
  part.startsWith('=') ? name === part.slice(1) : name.includes(part);
// The tail at a steady load: rows at a fixed rate report p99 where throughput rows saturate.
const FIXED_RATE = Number(process.env.BENCH_RATE ?? 500);
const RATE_DURATION_S = Number(process.env.BENCH_RATE_SECONDS ?? 10);

const listen = (server: Server) =>
  new Promise<number>((resolve) =>
    server.listen(0, '127.0.0.1', () => resolve((server.address() as AddressInfo).port)),
  );

/**
 * One row. `cpu µs/req` is this process's CPU time (service and, unless BENCH_WORKERS, the load
 * generator) per request: steadier than throughput on a machine shared with other work.
 */
async function measure(name: string, url: string, headers: Record<string, string> = {}) {
  const cpu = process.cpuUsage();
  const result = await autocannon({
    url,
    connections: CONNECTIONS,
    duration: DURATION_S,
    headers,
    ...(WORKERS ? { workers: WORKERS } : {}),
  });
  return row(name, result, process.cpuUsage(cpu));
}

/**
 * A row at a fixed rate: an open-loop client in a process of its own (scripts/load-client.mjs)
 * sends a request every 1/FIXED_RATE s and counts each latency from when it was due. autocannon's
 * `overallRate` sends each second's requests in a burst, which puts 40 ms in bare's p99.
 */
async function measureRate(name: string, request: LoadRequest) {
  const cpu = process.cpuUsage();
  // How long the event loop was kept from running (garbage collection, synchronous work): a tail
  // it explains is the process's, one it does not is the database's or the network's.
  const loop = monitorEventLoopDelay({ resolution: 1 });
  loop.enable();
  const result = await runLoad(request, { seconds: RATE_DURATION_S, rate: FIXED_RATE });
  loop.disable();
  const used = process.cpuUsage(cpu);
  return {
    name,
    rps: result.rps,
    p50: result.p50,
    p99: result.p99,
    errors: result.failures + result.requests - (result.statuses['200'] ?? 0),
    'cpu µs/req': Math.round((used.user + used.system) / Math.max(1, result.requests)),
    'loop delay p99/max': `${(loop.percentile(99) / 1e6).toFixed(1)}/${(loop.max / 1e6).toFixed(1)}`,
  };
}

function row(name: string, result: autocannon.Result, cpu: NodeJS.CpuUsage) {
  const errors = result.errors + result.non2xx;
  const cpuPerRequest = Math.round((cpu.user + cpu.system) / Math.max(1, result.requests.total));
  return {
    name,
    rps: Math.round(result.requests.average),
    p50: result.latency.p50,
    p99: result.latency.p99,
    errors,
    'cpu µs/req': cpuPerRequest,
  };
}

// BENCH_PROFILE=<dir> writes a CPU profile of each measured service row (not of the bare server).
const PROFILE_DIR = process.env.BENCH_PROFILE;
async function profiled<T>(name: string, run: () => Promise<T>): Promise<T> {
  if (!PROFILE_DIR) return run();
  const session = new Session();
  session.connect();
  const post = <R>(method: string, params?: object) =>
    new Promise<R>((resolve, reject) =>
      session.post(method, params, (error, result) => (error ? reject(error) : resolve(result as R))),
    );
  await post('Profiler.enable');
  await post('Profiler.start');
  const result = await run();
  const { profile } = await post<{ profile: object }>('Profiler.stop');
  await mkdir(PROFILE_DIR, { recursive: true });
  await writeFile(`${PROFILE_DIR}/${name.replace(/[^a-z0-9]+/gi, '-')}.cpuprofile`, JSON.stringify(profile));
  session.disconnect();
  return result;
}

const bare = createServer((_req, res) => {
  res.writeHead(200, { 'content-type': 'application/json' }).end('{"status":"ok"}');
});
const barePort = await listen(bare);

// The bench signs up several orgs from one address on every run.
// The mcp tool rows' upstreams run on loopback, which a deployment opens to tenants only by listing it.
const env = parseEnv({
  SIGNUP_MAX_PER_ADDRESS: '1000000',
  OUTBOUND_PRIVATE_NETWORKS: '127.0.0.0/8',
  ...process.env,
  LOG_LEVEL: 'silent',
});
const db = await openDatabase({ databaseUrl: env.databaseUrl, dataDir: 'memory://' });
const app = createApp({ env, db, logger: createLogger('silent') });
await app.ready;
const server = createServer(app.handler);
const port = await listen(server);
const base = `http://127.0.0.1:${port}`;

// The cost of metrics and tracing: two more apps on the same database, one with telemetry off
// (METRICS_PORT=0, no exporter: nothing counted, no span) and one with metrics and tracing on
// (a real tracer provider with its batch processor; the exporter drops the batches, so only the
// gateway's side of tracing is measured, not a collector's).
let spansExported = 0;
const droppingExporter: SpanExporter = {
  export(spans, done) {
    spansExported += spans.length;
    done({ code: ExportResultCode.SUCCESS });
  },
  shutdown: async () => undefined,
};
const quietApp = createApp({
  env: { ...env, metricsPort: 0, otlpTracesUrl: undefined },
  db,
  logger: createLogger('silent'),
});
const tracedTelemetry = createTelemetry({ serviceVersion: packageVersion, spanExporter: droppingExporter });
const tracedApp = createApp({ env, db, logger: createLogger('silent'), telemetry: tracedTelemetry });
// And as a busy deployment would trace: OTEL_TRACES_SAMPLER=parentbased_traceidratio, ARG=0.1.
const sampledTelemetry = createTelemetry({
  serviceVersion: packageVersion,
  spanExporter: droppingExporter,
  sampler: parseEnv({ OTEL_TRACES_SAMPLER: 'parentbased_traceidratio', OTEL_TRACES_SAMPLER_ARG: '0.1' }).tracesSampler,
});
const sampledApp = createApp({ env, db, logger: createLogger('silent'), telemetry: sampledTelemetry });
await Promise.all([quietApp.ready, tracedApp.ready, sampledApp.ready]);
const quietServer = createServer(quietApp.handler);
const quietBase = `http://127.0.0.1:${await listen(quietServer)}`;
const tracedServer = createServer(tracedApp.handler);
const tracedBase = `http://127.0.0.1:${await listen(tracedServer)}`;
const sampledServer = createServer(sampledApp.handler);
const sampledBase = `http://127.0.0.1:${await listen(sampledServer)}`;

const { post, signUp, gatewayAgent } = benchApi(base);
const org = await signUp('bench');
const { auth } = org;

for (let i = 0; i < 10; i++) {
  await post(
    `/api/v1/orgs/${org.orgId}/manifests`,
    {
      version: '1.0',
      agent: { id: `bench-agent-${i}`, name: 'Bench', version: '1.0.0' },
      capabilities: { requested: ['bench:run'] },
    },
    auth,
  );
}

// The gateway (an active manifest, a mock tool, an agent key), built twice: in the bench org (no
// policies) and in a second org whose agent 50 policies apply to.
const gatewayRequest = await gatewayAgent(org.orgId, auth);

// 50 enabled policies on the second org's agent: targets by agent and capability pattern (some
// elsewhere), conditions over params (numbers, strings, lists, nested maps; false for the bench
// request, so every one is evaluated and none denies), shadow matches that enter every record,
// and one enforced rate limit per agent the run cannot reach.
const { orgId: policyOrgId, auth: policyAuth } = await signUp('bench-policies', 'Bench policies');
const policyRequest = await gatewayAgent(policyOrgId, policyAuth);
const conditions = [
  (i: number) => `params.amount > ${1000 + i}`,
  (i: number) => `params.currency == "USD" && params.invoice > ${i}`,
  (i: number) => `"blocked-${i}" in params.customer.tags`,
  (i: number) => `has(params.refund_reason) && params.amount * 2 > ${500 + i}`,
  (i: number) => `params.customer.tier == "bronze-${i}" || request.hour > 24`,
];
const targets = [
  {},
  { capabilities: ['billing:*'] },
  { svc_ids: ['bench-gateway'], capabilities: ['*:read'] },
  { svc_ids: ['other-agent'] },
  { capabilities: ['email:*'] },
];
for (let i = 0; i < 50; i++) {
  const body =
    i === 0
      ? {
          name: 'rate limit',
          effect: 'rate_limit',
          rate_limit: { limit: 1_000_000, window_seconds: 86400, per: 'agent' },
        }
      : i < 4
        ? {
            name: `shadow ${i}`,
            effect: 'deny',
            mode: 'shadow',
            condition: `params.invoice == 42 && params.customer.tier == "gold"`,
          }
        : {
            name: `policy ${i}`,
            effect: i % 2 ? 'deny' : 'require_approval',
            mode: i % 3 ? 'enforce' : 'shadow',
            priority: (i * 7) % 1000,
            target: targets[i % targets.length],
            condition: conditions[i % conditions.length](i),
          };
  const created = await fetch(`${base}/api/v1/policies`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...policyAuth },
    body: JSON.stringify(body),
  });
  if (created.status !== 201) throw new Error(`policy ${i}: ${created.status} ${await created.text()}`);
}
const check = (await (await fetch(`${base}/api/v1/gateway/evaluate`, { ...policyRequest })).json()) as {
  decision: string;
  policies: unknown[];
};
if (check.decision !== 'allow' || check.policies.length !== 4)
  throw new Error(`the policy bench request must be allowed with 4 matches: ${JSON.stringify(check)}`);

// The same action as an MCP tools/call (stateless: one POST, no handshake needed per call).
const gatewayParams = JSON.parse(gatewayRequest.body).action.params;
const mcpRequest = {
  method: 'POST' as const,
  headers: {
    ...gatewayRequest.headers,
    accept: 'application/json, text/event-stream',
    'mcp-protocol-version': LATEST_PROTOCOL_VERSION,
  },
  body: JSON.stringify({
    jsonrpc: '2.0',
    id: 1,
    method: 'tools/call',
    params: { name: 'billing__read', arguments: gatewayParams },
  }),
};
// And as a 2026-07-28 client sends it: the `_meta` envelope and the headers that mirror the body.
const MCP_STATELESS_REVISION = '2026-07-28';
const mcpStatelessRequest = {
  method: 'POST' as const,
  headers: {
    ...mcpRequest.headers,
    'mcp-protocol-version': MCP_STATELESS_REVISION,
    'mcp-method': 'tools/call',
    'mcp-name': 'billing__read',
  },
  body: JSON.stringify({
    jsonrpc: '2.0',
    id: 1,
    method: 'tools/call',
    params: {
      name: 'billing__read',
      arguments: gatewayParams,
      _meta: {
        [PROTOCOL_VERSION_META_KEY]: MCP_STATELESS_REVISION,
        'io.modelcontextprotocol/clientInfo': { name: 'bench', version: '1' },
        'io.modelcontextprotocol/clientCapabilities': {},
      },
    },
  }),
};
for (const request of [mcpRequest, mcpStatelessRequest]) {
  const mcpCheck = (await (await fetch(`${base}/mcp/bench-gateway`, request)).json()) as {
    result?: { isError: boolean };
  };
  if (mcpCheck.result?.isError !== false)
    throw new Error(`the MCP bench call must succeed: ${JSON.stringify(mcpCheck)}`);
}

// The same call with an OAuth access token (docs/decisions/0047-mcp-oauth.md): a client registered,
// allowed by the admin through the consent page's mutation, its code exchanged with PKCE.
async function oauthAccessToken(svcId: string): Promise<string> {
  const redirectUri = 'http://127.0.0.1:1/callback';
  const { client_id: clientId } = await post('/oauth/register', { redirect_uris: [redirectUri], client_name: 'bench' });
  const verifier = randomBytes(32).toString('base64url');
  const params = {
    response_type: 'code',
    client_id: clientId,
    redirect_uri: redirectUri,
    code_challenge: createHash('sha256').update(verifier).digest('base64url'),
    code_challenge_method: 'S256',
    state: 'bench',
    resource: `${env.publicUrl}/mcp/${svcId}`,
  };
  const decided = await post(
    '/graphql',
    {
      query: `mutation ($p: String, $c: String, $r: String, $cc: String, $m: String, $s: String, $res: String) {
        decide_oauth_authorization(response_type: $p, client_id: $c, redirect_uri: $r, code_challenge: $cc,
          code_challenge_method: $m, state: $s, resource: $res, allow: true) { redirect_to } }`,
      variables: {
        p: params.response_type,
        c: clientId,
        r: redirectUri,
        cc: params.code_challenge,
        m: 'S256',
        s: params.state,
        res: params.resource,
      },
    },
    auth,
  );
  const code = new URL(decided.data.decide_oauth_authorization.redirect_to).searchParams.get('code')!;
  const tokens = await fetch(`${base}/oauth/token`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({
      grant_type: 'authorization_code',
      code,
      redirect_uri: redirectUri,
      client_id: clientId,
      code_verifier: verifier,
    }),
  });
  return ((await tokens.json()) as { access_token: string }).access_token;
}
const { 'x-api-key': _apiKey, ...mcpHeadersWithoutKey } = mcpRequest.headers;
const mcpOAuthRequest = {
  ...mcpRequest,
  headers: { ...mcpHeadersWithoutKey, authorization: `Bearer ${await oauthAccessToken('bench-gateway')}` },
};
const oauthCheck = (await (await fetch(`${base}/mcp/bench-gateway`, mcpOAuthRequest)).json()) as {
  result?: { isError: boolean };
};
if (oauthCheck.result?.isError !== false)
  throw new Error(`the MCP bench call with an OAuth token must succeed: ${JSON.stringify(oauthCheck)}`);

// An mcp tool (docs/guides/mcp.md#the-mcp-connector) whose upstream is the SDK's own server on
// loopback, in this process: a stateful 2025-11-25 one (v1) and a 2026-07-28 one (v2). Its tool
// answers the params back, as the mock tool does.
const readTool = (params: Record<string, unknown>) => ({
  content: [{ type: 'text' as const, text: 'read' }],
  structuredContent: params,
});
const upstream2025 = statefulEndpoint(() => {
  const server = new McpServer({ name: 'bench-upstream', version: '1.0.0' });
  server.registerTool('read', { inputSchema: z.object({}).passthrough() }, async (params) => readTool(params));
  return server;
});
const upstream2026 = createMcpHandler(() => {
  const server = new McpServerV2({ name: 'bench-upstream-2026', version: '1.0.0' });
  server.registerTool('read', { inputSchema: z.object({}).passthrough() }, async (params) => readTool(params));
  return server;
});
const serve2026 = nodeHandlerOf(upstream2026.fetch);
/** The Authorization headers the loopback upstream receives while a check collects them (never during a row). */
let upstreamAuthorizations: string[] | undefined;
const mcpUpstream = createServer((req, res) => {
  upstreamAuthorizations?.push(String(req.headers.authorization));
  if (req.url === '/mcp-2026') return serve2026(req, res);
  const chunks: Buffer[] = [];
  req.on('data', (chunk: Buffer) => chunks.push(chunk));
  req.on('end', () => {
    const text = Buffer.concat(chunks).toString('utf8');
    void upstream2025.serve(req, res, text ? JSON.parse(text) : undefined);
  });
});
const mcpUpstreamBase = `http://127.0.0.1:${await listen(mcpUpstream)}`;
const mcpAgent = await post(
  `/api/v1/orgs/${org.orgId}/manifests`,
  {
    version: '1.0',
    agent: { id: 'bench-mcp-tool', name: 'Bench', version: '1.0.0', team: 'bench' },
    capabilities: { requested: ['upstream2025:read', 'upstream2026:read'] },
    constraints: { max_actions_per_hour: 100_000_000, max_actions_per_day: 100_000_000 },
  },
  auth,
);
await post(`/api/v1/orgs/${org.orgId}/manifests/${mcpAgent.manifest_id}/approve`, {}, auth);
/** An execute of `<actionType>:read` through an mcp tool at `path` of the loopback upstream. */
async function mcpToolRequest(actionType: string, path: string) {
  const config = {
    url: `${mcpUpstreamBase}${path}`,
    allow_private_network: true,
    headers: { authorization: 'Bearer bench-upstream' },
  };
  await post(`/api/v1/orgs/${org.orgId}/tools`, { action_type: actionType, connector: 'mcp', config }, auth);
  const request = {
    ...gatewayRequest,
    body: JSON.stringify({
      svc_id: 'bench-mcp-tool',
      agent_id: 'bench-mcp-tool',
      action: { type: actionType, tool: 'read', params: gatewayParams },
    }),
  };
  const check = (await (await fetch(`${base}/api/v1/gateway/execute`, request)).json()) as {
    result?: { success: boolean };
  };
  if (check.result?.success !== true)
    throw new Error(`the mcp tool bench call (${path}) must succeed: ${JSON.stringify(check)}`);
  return request;
}
const mcpTool2025Request = await mcpToolRequest('upstream2025', '/mcp');
const mcpTool2026Request = await mcpToolRequest('upstream2026', '/mcp-2026');

// An mcp tool whose upstream calls go with an OAuth connection's token
// (docs/decisions/0068-upstream-connections.md), against an identical one with static headers: the
// same loopback 2025-11-25 upstream, which ignores the bearer token either way, so the difference
// is the gateway's connection path (the connection's SELECT beside the decision's other reads, the
// token opened per call). Both are called as an agent calls, MCP tools/call with an API key.
const MCP_STATIC_TOOL = 'mcpheaders';
const MCP_CONNECTION_TOOL = 'mcpconnection';
const mcpConnectionAgent = await post(
  `/api/v1/orgs/${org.orgId}/manifests`,
  {
    version: '1.0',
    agent: { id: 'bench-mcp-connection', name: 'Bench', version: '1.0.0', team: 'bench' },
    capabilities: { requested: [`${MCP_STATIC_TOOL}:read`, `${MCP_CONNECTION_TOOL}:read`] },
    constraints: { max_actions_per_hour: 100_000_000, max_actions_per_day: 100_000_000 },
  },
  auth,
);
await post(`/api/v1/orgs/${org.orgId}/manifests/${mcpConnectionAgent.manifest_id}/approve`, {}, auth);
const mcpToolUrl = `${mcpUpstreamBase}/mcp`;
await post(
  `/api/v1/orgs/${org.orgId}/tools`,
  {
    action_type: MCP_STATIC_TOOL,
    connector: 'mcp',
    config: { url: mcpToolUrl, allow_private_network: true, headers: { authorization: 'Bearer bench-upstream' } },
  },
  auth,
);
const connectionTool = await post(
  `/api/v1/orgs/${org.orgId}/tools`,
  {
    action_type: MCP_CONNECTION_TOOL,
    connector: 'mcp',
    config: { url: mcpToolUrl, allow_private_network: true, auth: { type: 'oauth', connection: 'org' } },
  },
  auth,
);
// There is no authorization server here: the org's connection is stored as the callback stores it
// (storeConnected in tool-connections.store.ts), its tokens sealed by a SecretBox with the app's
// KEY_ENCRYPTION_KEY, for the resource the call path checks against the tool's url, and valid
// for a day so that no call refreshes. The authorization server's metadata is a typical
// document's size: the call's SELECT reads the whole row.
const connectionToken = `bench-connection-${randomBytes(24).toString('base64url')}`;
const connectionSecrets = new SecretBox(env.keyEncryptionKey, env.keyEncryptionKeyPrevious);
const benchIssuer = 'https://auth.bench.example';
await db.sql.query(
  `INSERT INTO tool_connections (id, org_id, tool_id, user_id, scope, status, issuer, authorization_server, resource,
     client_id, registration, access_token, refresh_token, token_expires_at, token_version, scopes, subject, connected_at)
   VALUES ($1, $2::uuid, $3, NULL, 'org', 'connected', $4, $5::jsonb, $6, 'bench-client', 'dynamic', $7, $8,
     now() + interval '1 day', 1, $9::text[], 'bench', now())`,
  [
    `conn_bench${randomBytes(12).toString('base64url')}`,
    org.orgId,
    connectionTool.tool_id,
    benchIssuer,
    JSON.stringify({
      issuer: benchIssuer,
      authorization_endpoint: `${benchIssuer}/auth`,
      token_endpoint: `${benchIssuer}/token`,
      registration_endpoint: `${benchIssuer}/reg`,
      revocation_endpoint: `${benchIssuer}/token/revocation`,
      jwks_uri: `${benchIssuer}/jwks`,
      response_types_supported: ['code'],
      grant_types_supported: ['authorization_code', 'refresh_token'],
      code_challenge_methods_supported: ['S256'],
      token_endpoint_auth_methods_supported: ['none', 'client_secret_basic', 'client_secret_post'],
      scopes_supported: ['tools:call'],
      authorization_response_iss_parameter_supported: true,
    }),
    resourceOf(mcpToolUrl)!.href,
    connectionSecrets.seal(connectionToken),
    connectionSecrets.seal(`bench-refresh-${randomBytes(24).toString('base64url')}`),
    ['tools:call'],
  ],
);
// Read its definitions now, with the connection, as the first connection does: both tools then
// have pinned definitions, and their calls check the same hold.
const refreshed = await fetch(`${base}/api/v1/orgs/${org.orgId}/tools/${connectionTool.tool_id}/refresh`, {
  method: 'POST',
  headers: auth,
});
const connectionToolRead = (await refreshed.json()) as { definitions?: unknown[]; definitions_error?: string | null };
if (refreshed.status !== 200 || connectionToolRead.definitions_error || !connectionToolRead.definitions?.length)
  throw new Error(
    `the connection tool's definitions must read: ${refreshed.status} ${JSON.stringify(connectionToolRead)}`,
  );
/** A tools/call of `<actionType>__read` by the agent, checked once: it succeeds, with `authorization` at the upstream. */
async function mcpConnectionCall(actionType: string, authorization: string) {
  const request = {
    ...mcpRequest,
    body: JSON.stringify({
      jsonrpc: '2.0',
      id: 1,
      method: 'tools/call',
      params: { name: `${actionType}__read`, arguments: gatewayParams },
    }),
  };
  upstreamAuthorizations = [];
  const check = (await (await fetch(`${base}/mcp/bench-mcp-connection`, request)).json()) as {
    result?: { isError: boolean };
  };
  const seen = upstreamAuthorizations;
  upstreamAuthorizations = undefined;
  if (check.result?.isError !== false)
    throw new Error(`the MCP bench call to the ${actionType} tool must succeed: ${JSON.stringify(check)}`);
  if (!seen.length || seen.some((header) => header !== authorization))
    throw new Error(`the ${actionType} tool's upstream must be sent only \`${authorization.slice(0, 12)}…\``);
  return request;
}
const mcpStaticRequest = await mcpConnectionCall(MCP_STATIC_TOOL, 'Bearer bench-upstream');
const mcpConnectionRequest = await mcpConnectionCall(MCP_CONNECTION_TOOL, `Bearer ${connectionToken}`);

async function measurePost(
  name: string,
  url: string,
  request: { method: 'POST'; headers: Record<string, string>; body: string } = gatewayRequest,
) {
  const cpu = process.cpuUsage();
  const result = await autocannon({
    url,
    connections: CONNECTIONS,
    duration: DURATION_S,
    ...request,
    ...(WORKERS ? { workers: WORKERS } : {}),
  });
  return row(name, result, process.cpuUsage(cpu));
}

const MCP_TOOL_2025 = 'POST /api/v1/gateway/execute (+ record), mcp tool, 2025-11-25 stateful upstream';
const MCP_TOOL_2026 = 'POST /api/v1/gateway/execute (+ record), mcp tool, 2026-07-28 upstream';
const scenarios: [string, () => ReturnType<typeof measure>][] = [
  ['bare node:http', () => measure('bare node:http', `http://127.0.0.1:${barePort}/`)],
  ['GET /healthz', () => measure('GET /healthz', `${base}/healthz`)],
  [
    'GET /api/v1/orgs/{id} (bearer)',
    () => measure('GET /api/v1/orgs/{id} (bearer)', `${base}/api/v1/orgs/${org.orgId}`, auth),
  ],
  [
    'GET /api/v1/orgs/{id}/manifests, 10 items (bearer)',
    () =>
      measure('GET /api/v1/orgs/{id}/manifests, 10 items (bearer)', `${base}/api/v1/orgs/${org.orgId}/manifests`, auth),
  ],
  [
    'POST /api/v1/gateway/evaluate',
    () => measurePost('POST /api/v1/gateway/evaluate', `${base}/api/v1/gateway/evaluate`),
  ],
  [
    'POST /api/v1/gateway/execute (+ record)',
    () => measurePost('POST /api/v1/gateway/execute (+ record)', `${base}/api/v1/gateway/execute`),
  ],
  [
    'POST /mcp/{svc_id} tools/call (+ record)',
    () => measurePost('POST /mcp/{svc_id} tools/call (+ record)', `${base}/mcp/bench-gateway`, mcpRequest),
  ],
  [
    'POST /mcp/{svc_id} tools/call 2026-07-28 (+ record)',
    () =>
      measurePost(
        'POST /mcp/{svc_id} tools/call 2026-07-28 (+ record)',
        `${base}/mcp/bench-gateway`,
        mcpStatelessRequest,
      ),
  ],
  [
    'POST /api/v1/gateway/evaluate, 50 policies',
    () => measurePost('POST /api/v1/gateway/evaluate, 50 policies', `${base}/api/v1/gateway/evaluate`, policyRequest),
  ],
  [
    'POST /api/v1/gateway/execute (+ record), 50 policies',
    () =>
      measurePost(
        'POST /api/v1/gateway/execute (+ record), 50 policies',
        `${base}/api/v1/gateway/execute`,
        policyRequest,
      ),
  ],
  [MCP_TOOL_2025, () => measurePost(MCP_TOOL_2025, `${base}/api/v1/gateway/execute`, mcpTool2025Request)],
  [MCP_TOOL_2026, () => measurePost(MCP_TOOL_2026, `${base}/api/v1/gateway/execute`, mcpTool2026Request)],
  ...fixedRateScenarios(),
];
/** The same requests at a fixed rate, bare first: their p99 is the tail at a steady load. */
function fixedRateScenarios(): [string, () => ReturnType<typeof measureRate>][] {
  if (!FIXED_RATE) return [];
  const at = ` at ${FIXED_RATE} req/s`;
  const post = (path: string) => ({ url: `${base}${path}`, ...gatewayRequest });
  const rows: [string, LoadRequest][] = [
    [`bare node:http${at}`, { url: `http://127.0.0.1:${barePort}/`, method: 'GET' }],
    [`GET /api/v1/orgs/{id} (bearer)${at}`, { url: `${base}/api/v1/orgs/${org.orgId}`, method: 'GET', headers: auth }],
    [`POST /api/v1/gateway/evaluate${at}`, post('/api/v1/gateway/evaluate')],
    [`POST /api/v1/gateway/execute (+ record)${at}`, post('/api/v1/gateway/execute')],
  ];
  return rows.map(([name, request]) => [name, () => measureRate(name, request)]);
}
// Telemetry off and on, alternated so that drift (a warming database, a busy neighbour) hits both.
const TELEMETRY_ROUNDS = Number(process.env.BENCH_TELEMETRY_ROUNDS ?? 3);
const TELEMETRY_OFF = 'POST /api/v1/gateway/evaluate, telemetry off';
const TELEMETRY_ON = 'POST /api/v1/gateway/evaluate, metrics + tracing';
const TELEMETRY_SAMPLED = 'POST /api/v1/gateway/evaluate, metrics + 10% of traces';
for (let round = 1; round <= TELEMETRY_ROUNDS; round++) {
  scenarios.push(
    [
      `${TELEMETRY_OFF} #${round}`,
      () => measurePost(`${TELEMETRY_OFF} #${round}`, `${quietBase}/api/v1/gateway/evaluate`),
    ],
    [
      `${TELEMETRY_ON} #${round}`,
      () => measurePost(`${TELEMETRY_ON} #${round}`, `${tracedBase}/api/v1/gateway/evaluate`),
    ],
    [
      `${TELEMETRY_SAMPLED} #${round}`,
      () => measurePost(`${TELEMETRY_SAMPLED} #${round}`, `${sampledBase}/api/v1/gateway/evaluate`),
    ],
  );
}
// An MCP tools/call with an API key and with an OAuth access token, alternated likewise.
const OAUTH_ROUNDS = Number(process.env.BENCH_OAUTH_ROUNDS ?? 3);
const MCP_KEY = 'POST /mcp/{svc_id} tools/call, API key';
const MCP_OAUTH = 'POST /mcp/{svc_id} tools/call, OAuth access token';
for (let round = 1; round <= OAUTH_ROUNDS; round++) {
  scenarios.push(
    [`${MCP_KEY} #${round}`, () => measurePost(`${MCP_KEY} #${round}`, `${base}/mcp/bench-gateway`, mcpRequest)],
    [
      `${MCP_OAUTH} #${round}`,
      () => measurePost(`${MCP_OAUTH} #${round}`, `${base}/mcp/bench-gateway`, mcpOAuthRequest),
    ],
  );
}
// An mcp tool's tools/call with static headers and with an OAuth connection, alternated likewise.
const CONNECTION_ROUNDS = Number(process.env.BENCH_CONNECTION_ROUNDS ?? 3);
const MCP_STATIC = 'POST /mcp/{svc_id} tools/call → mcp tool, static headers';
const MCP_CONNECTION = 'POST /mcp/{svc_id} tools/call → mcp tool, OAuth connection';
for (let round = 1; round <= CONNECTION_ROUNDS; round++) {
  scenarios.push(
    [
      `${MCP_STATIC} #${round}`,
      () => measurePost(`${MCP_STATIC} #${round}`, `${base}/mcp/bench-mcp-connection`, mcpStaticRequest),
    ],
    [
      `${MCP_CONNECTION} #${round}`,
      () => measurePost(`${MCP_CONNECTION} #${round}`, `${base}/mcp/bench-mcp-connection`, mcpConnectionRequest),
    ],
  );
}
const rows: Awaited<ReturnType<typeof measure>>[] = [];
for (const [name, run] of scenarios) {
  if (ONLY && name !== 'bare node:http' && !onlyParts.some((part) => onlyMatches(part, name))) continue;
  rows.push(name === 'bare node:http' ? await run() : await profiled(name, run));
}
const baseline = rows[0].rps;
console.log(`database: ${db.kind}; ${CONNECTIONS} connections, ${DURATION_S} s each`);
console.table(rows.map((r) => ({ ...r, 'ratio to bare': (r.rps / baseline).toFixed(3) })));
// The issue's bar: with 50 policies, evaluate and execute keep ≥ 0.85 of their throughput without.
for (const mode of ['evaluate', 'execute']) {
  const without = rows.find((r) => r.name.includes(`/gateway/${mode}`) && !r.name.includes('policies'));
  const withPolicies = rows.find((r) => r.name.includes(`/gateway/${mode}`) && r.name.includes('50 policies'));
  if (without && withPolicies)
    console.log(`${mode}: 50 policies keep ${(withPolicies.rps / without.rps).toFixed(3)} of the throughput without`);
}

// The issue's bar: metrics and tracing cost at most 5 % of evaluate's throughput (≥ 0.95 kept).
// Each round's ratio, and their median: a busy machine moves single rows by more than the cost.
const rpsOf = (prefix: string) => rows.filter((r) => r.name.startsWith(prefix)).reduce((sum, r) => sum + r.rps, 0);
/** How much of the throughput with telemetry off `variant` keeps: per round, their median, all rounds together, CPU. */
function telemetryCost(variant: string) {
  const roundRatios = Array.from({ length: TELEMETRY_ROUNDS }, (_, i) => {
    const off = rows.find((r) => r.name === `${TELEMETRY_OFF} #${i + 1}`);
    const on = rows.find((r) => r.name === `${variant} #${i + 1}`);
    return off && on ? on.rps / off.rps : undefined;
  }).filter((ratio): ratio is number => ratio !== undefined);
  if (!roundRatios.length) return;
  const sorted = [...roundRatios].sort((a, b) => a - b);
  const median =
    sorted.length % 2
      ? sorted[(sorted.length - 1) / 2]
      : (sorted[sorted.length / 2 - 1] + sorted[sorted.length / 2]) / 2;
  const cpuOf = (prefix: string) => {
    const matching = rows.filter((r) => r.name.startsWith(prefix));
    return matching.reduce((sum, r) => sum + r['cpu µs/req'], 0) / matching.length;
  };
  console.log(
    `evaluate, ${variant.slice(variant.indexOf(', ') + 2)}: keeps ${median.toFixed(3)} (median of rounds: ${roundRatios.map((r) => r.toFixed(3)).join(', ')}; ` +
      `all rounds together ${(rpsOf(variant) / rpsOf(TELEMETRY_OFF)).toFixed(3)}) of the throughput with telemetry off; ` +
      `CPU per request ${cpuOf(variant).toFixed(0)} µs against ${cpuOf(TELEMETRY_OFF).toFixed(0)} µs ` +
      `(${(cpuOf(TELEMETRY_OFF) / cpuOf(variant)).toFixed(3)})`,
  );
}
telemetryCost(TELEMETRY_ON);
telemetryCost(TELEMETRY_SAMPLED);
if (rows.some((r) => r.name.startsWith(TELEMETRY_ON))) console.log(`${spansExported} spans exported`);

// The issue's bar: a tools/call with an OAuth access token keeps ≥ 0.95 of the same call with an API key.
const oauthRatios = Array.from({ length: OAUTH_ROUNDS }, (_, i) => {
  const key = rows.find((r) => r.name === `${MCP_KEY} #${i + 1}`);
  const oauth = rows.find((r) => r.name === `${MCP_OAUTH} #${i + 1}`);
  return key && oauth ? oauth.rps / key.rps : undefined;
}).filter((ratio): ratio is number => ratio !== undefined);
if (oauthRatios.length) {
  const sorted = [...oauthRatios].sort((a, b) => a - b);
  console.log(
    `mcp tools/call with an OAuth access token: keeps ${sorted[Math.floor(sorted.length / 2)].toFixed(3)} (rounds: ${oauthRatios.map((r) => r.toFixed(3)).join(', ')}; ` +
      `all rounds together ${(rpsOf(MCP_OAUTH) / rpsOf(MCP_KEY)).toFixed(3)}) of the same call with an API key`,
  );
}

// Issue 43's bar: a call to an mcp tool through an OAuth connection keeps ≥ 0.9 of the same call with static headers.
const connectionRatios = Array.from({ length: CONNECTION_ROUNDS }, (_, i) => {
  const headers = rows.find((r) => r.name === `${MCP_STATIC} #${i + 1}`);
  const connection = rows.find((r) => r.name === `${MCP_CONNECTION} #${i + 1}`);
  return headers && connection ? connection.rps / headers.rps : undefined;
}).filter((ratio): ratio is number => ratio !== undefined);
if (connectionRatios.length) {
  const sorted = [...connectionRatios].sort((a, b) => a - b);
  const cpuOf = (prefix: string) => {
    const matching = rows.filter((r) => r.name.startsWith(prefix));
    return matching.reduce((sum, r) => sum + r['cpu µs/req'], 0) / matching.length;
  };
  console.log(
    `mcp tool via an OAuth connection: keeps ${sorted[Math.floor(sorted.length / 2)].toFixed(3)} (rounds: ${connectionRatios.map((r) => r.toFixed(3)).join(', ')}; ` +
      `all rounds together ${(rpsOf(MCP_CONNECTION) / rpsOf(MCP_STATIC)).toFixed(3)}) of the same call with static headers; ` +
      `CPU per request ${cpuOf(MCP_CONNECTION).toFixed(0)} µs against ${cpuOf(MCP_STATIC).toFixed(0)} µs`,
  );
}

// The issue's bar: an MCP tools/call keeps ≥ 0.8 of REST execute's throughput.
const restExecute = rows.find((r) => r.name === 'POST /api/v1/gateway/execute (+ record)');
// Not the rows of an mcp tool: they include an upstream exchange, which REST execute with the mock tool has not.
for (const mcpCall of rows.filter((r) => r.name.startsWith('POST /mcp/') && !r.name.includes('→ mcp tool'))) {
  if (restExecute)
    console.log(`${mcpCall.name}: ${(mcpCall.rps / restExecute.rps).toFixed(3)} of REST execute's throughput`);
}

// What an mcp tool's upstream exchange costs: the call against the same execute with the mock tool.
for (const mcpTool of rows.filter((r) => r.name === MCP_TOOL_2025 || r.name === MCP_TOOL_2026)) {
  if (restExecute)
    console.log(
      `${mcpTool.name}: ${(mcpTool.rps / restExecute.rps).toFixed(3)} of REST execute's throughput with the mock tool`,
    );
}

// Two orgs on one process: org B sends one execute at a time, alone and while org A keeps 16 in
// flight. The clients are processes of their own (scripts/load-client.mjs), so that the latencies
// are the service's, not those of a load generator sharing its event loop; windows alternate so
// that drift weighs on both. The issue's bar: B's p99 during the flood at most 2× its p99 alone.
const FAIRNESS_ROUNDS = Number(process.env.BENCH_FAIRNESS_ROUNDS ?? 3);
if (FAIRNESS_ROUNDS > 0 && (!ONLY || 'two orgs'.includes(ONLY) || ONLY.includes('two orgs'))) {
  const quietOrg = await signUp('bench-quiet', 'Bench quiet');
  const quietRequest = await gatewayAgent(quietOrg.orgId, quietOrg.auth);
  const executeUrl = `${base}/api/v1/gateway/execute`;
  const flood = { url: executeUrl, headers: gatewayRequest.headers, body: gatewayRequest.body };
  const quiet = { url: executeUrl, headers: quietRequest.headers, body: quietRequest.body };
  const alone: LoadResult[] = [];
  const during: LoadResult[] = [];
  const floods: LoadResult[] = [];
  for (let round = 0; round < FAIRNESS_ROUNDS; round++) {
    alone.push(await runLoad(quiet, { seconds: DURATION_S, concurrency: 1, samples: true }));
    const [a, b] = await Promise.all([
      runLoad(flood, { seconds: DURATION_S, concurrency: 16 }),
      runLoad(quiet, { seconds: DURATION_S, concurrency: 1, samples: true }),
    ]);
    floods.push(a);
    during.push(b);
  }
  const median = (values: number[]) => [...values].sort((x, y) => x - y)[Math.floor(values.length / 2)];
  const line = (name: string, results: LoadResult[]) => ({
    name,
    rps: median(results.map((r) => r.rps)),
    p50: median(results.map((r) => r.p50)),
    p99: median(results.map((r) => r.p99)),
    errors: results.reduce((sum, r) => sum + r.failures + r.requests - (r.statuses['200'] ?? 0), 0),
  });
  console.log(`two orgs, one process (${FAIRNESS_ROUNDS} alternating rounds of ${DURATION_S} s, medians):`);
  console.table([
    line('org B, 1 at a time, alone', alone),
    line('org B, 1 at a time, while org A floods', during),
    line('org A, 16 at a time, flooding', floods),
  ]);
  const ratios = during.map((r, i) => r.p99 / alone[i].p99);
  // As the fairness test measures it: each condition's samples pooled over its rounds.
  console.log(
    `org B's p99 during org A's flood: ${(pooledQuantile(during, 0.99) / pooledQuantile(alone, 0.99)).toFixed(2)}× its p99 alone, pooled ` +
      `(each round's: ${ratios.map((r) => r.toFixed(2)).join(', ')})`,
  );
}

// The chain must still verify after the run: every link and every signature.
for (const orgId of [org.orgId, policyOrgId]) {
  const chain = await db.prisma.interactionRecord.findMany({ where: { orgId }, orderBy: { seq: 'asc' } });
  const broken = await verifyChain(chain, app);
  console.log(`record chain of ${orgId}: ${chain.length} records, ${broken === 0 ? 'verifies' : `${broken} broken`}`);
}

server.close();
quietServer.close();
tracedServer.close();
sampledServer.close();
bare.close();
mcpUpstream.close();
mcpUpstream.closeAllConnections();
await Promise.all([app.stop(), quietApp.stop(), tracedApp.stop(), sampledApp.stop()]);
await Promise.all([
  tracedTelemetry.shutdown(),
  sampledTelemetry.shutdown(),
  upstream2025.forgetAll(),
  upstream2026.close(),
]);
await db.close();
