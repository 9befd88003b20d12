import path from 'node:path';
import type { DatabaseOptions } from './db/database.js';
import { DEFAULT_DATABASE_TIMEOUT_MS, type PoolMode } from './db/sql.js';
import { PrivateNetworks, PrivateNetworksError } from './lib/address-policy.js';

/**
 * The default of POLICY_EVAL_BUDGET, in operations (≈20 ns each): an evaluation over big params
 * stops after 0.5–2 ms of CPU here, whatever it does (docs/decisions/0005-policy-condition-budget.md).
 */
export const DEFAULT_EVAL_BUDGET = 50_000;

/** Everything the service reads from its environment, parsed and checked once at start. */
export interface Env {
  port: number;
  host: string;
  /** `postgresql://…` selects PostgreSQL; absent selects embedded PGlite in `dataDir`. */
  databaseUrl: string | undefined;
  /**
   * PostgreSQL: the longest a request waits for a connection or a statement before it is answered
   * 503 (the database is unreachable); `DATABASE_TIMEOUT_MS`, default 5000.
   */
  databaseTimeoutMs: number;
  /** `DATABASE_POOL_MODE`: `transaction` behind a pooler in transaction mode (PgBouncer), else `session`. */
  databasePoolMode: PoolMode;
  dataDir: string;
  /** Public base URL used in logs, the OpenAPI `servers` entry and token issuers. */
  publicUrl: string;
  logLevel: string;
  /**
   * 32-byte key (base64 or hex) that encrypts secrets at rest (signing keys, tool secrets and
   * header values, webhook secrets); optional, warned about at start when absent.
   */
  keyEncryptionKey: Buffer | undefined;
  /** Earlier keys, comma-separated: what they sealed still opens (rotation); nothing new is sealed with them. */
  keyEncryptionKeyPrevious: Buffer[];
  sessionTtlSeconds: number;
  /** Lifetime of a refresh token (30 days, docs/decisions/0012-rotating-refresh-tokens.md); each rotation starts a new one. */
  refreshTokenTtlSeconds: number;
  maxBodyBytes: number;
  trustProxy: boolean;
  loginMaxFailuresPerEmail: number;
  loginMaxFailuresPerAddress: number;
  /**
   * Failed refresh-token rotations (`POST /auth/refresh`) one client address may make in a login
   * window before every further attempt is refused (429) without looking the token up.
   */
  refreshMaxFailuresPerAddress: number;
  loginWindowSeconds: number;
  /** Sign-ups (`POST /api/v1/orgs`) one client address may make in an hour, refused ones (409) included. */
  signupMaxPerAddress: number;
  /**
   * `SIGNUP`: `open` lets anyone create an organization through the API; `closed` refuses every
   * sign-up (403), and organizations come from `agent-gateway create-org` only
   * (docs/decisions/0063-closed-sign-up-and-create-org.md).
   */
  signup: SignUpMode;
  /** OAuth client registrations (`POST /oauth/register`) one client address may make in an hour. */
  oauthRegistrationsPerAddress: number;
  /** Client metadata documents the authorization endpoint fetches for one client address an hour (OAUTH_CLIENT_DOCUMENTS_PER_ADDRESS). */
  oauthClientDocumentsPerAddress: number;
  /** Tests and local development: client metadata documents at http URLs on the loopback interface (OAUTH_CLIENT_METADATA_LOOPBACK). */
  oauthClientMetadataLoopback: boolean;
  /**
   * The private or reserved ranges tenants' configurations may reach (`OUTBOUND_PRIVATE_NETWORKS`,
   * comma-separated CIDRs, none by default), and only those that set `allow_private_network`;
   * link-local addresses never (docs/decisions/0062-the-deployment-boundary.md).
   */
  outboundPrivateNetworks: PrivateNetworks;
  shutdownGraceMs: number;
  /** How often pending approvals past their TTL are marked expired (reads also do it lazily). */
  approvalSweepSeconds: number;
  /**
   * At most one signed checkpoint of an org's record tree per this many seconds, while it grows
   * (docs/decisions/0059-records-as-a-transparency-log.md); 0: whenever it grew and one is needed.
   */
  checkpointSeconds: number;
  /** How often each mcp tool's upstream definitions are read again (docs/decisions/0050-upstream-tool-definitions.md). */
  mcpUpstreamRefreshSeconds: number;
  /** How often the webhook dispatcher looks for due deliveries. */
  webhookPollMs: number;
  /** Delay before the first retry of a failed delivery; each further retry waits twice as long. */
  webhookRetryBaseMs: number;
  /** Attempts per delivery, the first included; after the last failed one it is `failed`. */
  webhookMaxAttempts: number;
  /** How long one delivery attempt may take. */
  webhookTimeoutMs: number;
  /**
   * Requests of one org that run at once in this process while no other org is active
   * (`ORG_MAX_CONCURRENCY`); more wait their turn (src/lib/fair-scheduler.ts).
   */
  orgMaxConcurrency: number;
  /**
   * Requests that run at once in this process while several orgs are active
   * (`MAX_CONCURRENT_REQUESTS`), shared out equally among them; an org's first always starts.
   */
  maxConcurrentRequests: number;
  /** Requests of one org that may wait for their turn beyond `orgMaxConcurrency` running (`ORG_MAX_QUEUED`); more are answered 429. */
  orgMaxQueued: number;
  /**
   * Connected upstream clients of mcp tools kept for reuse (`MCP_UPSTREAM_POOL_SIZE`), the least
   * recently used closed first; 0 keeps none (docs/decisions/0049-mcp-upstream-pool.md).
   */
  mcpUpstreamPoolSize: number;
  /** How long an upstream client of an mcp tool is kept unused before it is closed (`MCP_UPSTREAM_IDLE_SECONDS`). */
  mcpUpstreamIdleSeconds: number;
  /** How often executions left by stopped gateway processes are recorded as interrupted (also at start). */
  executionRecoverySeconds: number;
  /**
   * How long a process's claim on its journal entries lasts without renewal (renewed every third
   * of it): after a crash, another process records the dead one's executions this long after its
   * last renewal at the earliest.
   */
  executionLeaseSeconds: number;
  /**
   * How many operations one evaluation of a policy condition may take (≈20 ns each: a node of a
   * comprehension's body per iteration, an element an `in` compares, 10 characters of a string a
   * function reads…; policy-condition-budget.ts); past it the evaluation stops and the policy
   * matches with `condition_error` "evaluation budget exceeded" (fail closed). The default, 50,000,
   * stops an evaluation over big params after 0.5–2 ms of CPU here; conditions over ordinary
   * params use a few hundred operations.
   */
  policyEvalBudget: number;
  /**
   * Origins (`https://host[:port]`) whose browsers may call `/mcp/…`; a request with any other
   * `Origin` header is refused (DNS rebinding). Clients that send no Origin (agents) are not affected.
   */
  mcpAllowedOrigins: string[];
  /**
   * MCP calls of one org that may wait at once, per process, for their user's confirmation on
   * 2025-11-25 (`MCP_CONFIRMATIONS_WAITING_PER_ORG`); beyond it a call is denied rather than asked.
   */
  mcpConfirmationsWaitingPerOrg: number;
  /** Browser origins other than the service's own that may call /graphql and the REST API (CORS); none by default. */
  corsAllowedOrigins: string[];
  /**
   * The port of the separate `/metrics` listener (docs/operations.md#metrics); 0 turns metrics off
   * (no listener, nothing counted).
   */
  metricsPort: number;
  /** Where the metrics listener binds; loopback by default, so scrapers must be on the host or let in. */
  metricsHost: string;
  /**
   * Where spans are sent (OTLP over HTTP): `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` as is, or
   * `OTEL_EXPORTER_OTLP_ENDPOINT` + `/v1/traces`; undefined turns tracing off.
   */
  otlpTracesUrl: string | undefined;
  /** `service.name` of the spans (`OTEL_SERVICE_NAME`, default agent-gateway). */
  serviceName: string;
  /** Which traces are recorded (`OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG`), as OpenTelemetry SDKs read them. */
  tracesSampler: TracesSampler;
}

export const TRACES_SAMPLERS = [
  'always_on',
  'always_off',
  'traceidratio',
  'parentbased_always_on',
  'parentbased_always_off',
  'parentbased_traceidratio',
] as const;
export interface TracesSampler {
  name: (typeof TRACES_SAMPLERS)[number];
  /** The fraction of traces kept by the `traceidratio` samplers, 0 to 1. */
  ratio: number;
}

/**
 * The OpenTelemetry environment variables: the default is OpenTelemetry's
 * `parentbased_always_on` (a caller's sampling decision is kept, every new trace recorded); a
 * ratio without a valid argument keeps every trace, as OpenTelemetry specifies, but a value that
 * is not a number between 0 and 1 is refused rather than silently read as 1.
 */
function tracesSampler(source: NodeJS.ProcessEnv): TracesSampler {
  const name = (source.OTEL_TRACES_SAMPLER || 'parentbased_always_on').trim().toLowerCase();
  if (!(TRACES_SAMPLERS as readonly string[]).includes(name)) {
    throw new EnvError(
      `OTEL_TRACES_SAMPLER must be one of ${TRACES_SAMPLERS.join(', ')}, got "${source.OTEL_TRACES_SAMPLER}"`,
    );
  }
  const raw = source.OTEL_TRACES_SAMPLER_ARG?.trim();
  const ratio = raw ? Number(raw) : 1;
  if (name.endsWith('traceidratio') && !(Number.isFinite(ratio) && ratio >= 0 && ratio <= 1)) {
    throw new EnvError(
      `OTEL_TRACES_SAMPLER_ARG must be a number from 0 to 1 (the fraction of traces kept), got "${raw}"`,
    );
  }
  return { name: name as TracesSampler['name'], ratio };
}

function otlpTracesUrl(source: NodeJS.ProcessEnv): string | undefined {
  const traces = source.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT;
  const base = source.OTEL_EXPORTER_OTLP_ENDPOINT;
  const url = traces || (base ? `${base.replace(/\/+$/, '')}/v1/traces` : undefined);
  if (url && !/^https?:\/\/[^/]/.test(url)) {
    throw new EnvError(
      `${traces ? 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT' : 'OTEL_EXPORTER_OTLP_ENDPOINT'} must be an http(s) URL, got "${traces || base}"`,
    );
  }
  return url;
}

function allowedOrigins(raw: string | undefined, name: string): string[] {
  const origins = (raw ?? '')
    .split(',')
    .map((part) => part.trim())
    .filter(Boolean);
  for (const origin of origins) {
    let parsed: URL | undefined;
    try {
      parsed = new URL(origin);
    } catch {
      parsed = undefined;
    }
    if (!parsed || parsed.origin !== origin) {
      throw new EnvError(`${name}: "${origin}" is not an origin (scheme://host[:port], no path or trailing slash)`);
    }
  }
  return origins;
}

export class EnvError extends Error {}

export const SIGNUP_MODES = ['open', 'closed'] as const;
export type SignUpMode = (typeof SIGNUP_MODES)[number];

/**
 * Anything but the two words refuses to start: a typo (`SIGNUP=close`, `SIGNUP=no`) must not leave
 * sign-up open on a deployment its operator meant to close.
 */
function signUpMode(source: NodeJS.ProcessEnv): SignUpMode {
  const raw = (source.SIGNUP || 'open').trim().toLowerCase();
  if (!(SIGNUP_MODES as readonly string[]).includes(raw)) {
    throw new EnvError(
      `SIGNUP must be "open" (anyone may sign up an organization through the API) or "closed" (only agent-gateway create-org creates them), got "${source.SIGNUP}"`,
    );
  }
  return raw as SignUpMode;
}

const POOL_MODES: readonly PoolMode[] = ['session', 'transaction'];

function poolMode(source: NodeJS.ProcessEnv): PoolMode {
  const raw = (source.DATABASE_POOL_MODE || 'session').trim().toLowerCase();
  if (!(POOL_MODES as readonly string[]).includes(raw)) {
    throw new EnvError(
      `DATABASE_POOL_MODE must be "session" (a direct connection or a pooler in session mode) or "transaction" (a pooler in transaction mode), got "${source.DATABASE_POOL_MODE}"`,
    );
  }
  return raw as PoolMode;
}

function outboundPrivateNetworks(source: NodeJS.ProcessEnv): PrivateNetworks {
  try {
    return PrivateNetworks.parse(source.OUTBOUND_PRIVATE_NETWORKS);
  } catch (error) {
    if (error instanceof PrivateNetworksError) throw new EnvError(`OUTBOUND_PRIVATE_NETWORKS: ${error.message}`);
    throw error;
  }
}

function integer(source: NodeJS.ProcessEnv, name: string, fallback: number, min = 0): number {
  const raw = source[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < min) {
    throw new EnvError(`${name} must be an integer ≥ ${min}, got "${raw}"`);
  }
  return value;
}

function encryptionKey(raw: string | undefined, name = 'KEY_ENCRYPTION_KEY'): Buffer | undefined {
  if (!raw) return undefined;
  const key = /^[0-9a-f]{64}$/i.test(raw) ? Buffer.from(raw, 'hex') : Buffer.from(raw, 'base64');
  if (key.length !== 32) throw new EnvError(`${name} must be 32 bytes, hex or base64`);
  return key;
}

function previousEncryptionKeys(source: NodeJS.ProcessEnv): Buffer[] {
  const raw = source.KEY_ENCRYPTION_KEY_PREVIOUS;
  if (!raw) return [];
  if (!source.KEY_ENCRYPTION_KEY)
    throw new EnvError('KEY_ENCRYPTION_KEY_PREVIOUS needs KEY_ENCRYPTION_KEY (the key to seal with)');
  return raw
    .split(',')
    .map((part) => part.trim())
    .filter(Boolean)
    .map((part) => encryptionKey(part, 'each key of KEY_ENCRYPTION_KEY_PREVIOUS')!);
}

export function parseEnv(source: NodeJS.ProcessEnv = process.env): Env {
  const port = integer(source, 'PORT', 8000);
  const host = source.HOST || '0.0.0.0';
  const databaseUrl = source.DATABASE_URL || undefined;
  if (databaseUrl && !/^postgres(ql)?:\/\//.test(databaseUrl)) {
    throw new EnvError('DATABASE_URL must be a postgresql:// URL');
  }
  return {
    port,
    host,
    databaseUrl,
    databaseTimeoutMs: integer(source, 'DATABASE_TIMEOUT_MS', DEFAULT_DATABASE_TIMEOUT_MS, 100),
    databasePoolMode: poolMode(source),
    dataDir: path.resolve(source.DATA_DIR || './data'),
    publicUrl: (source.PUBLIC_URL || `http://localhost:${port}`).replace(/\/$/, ''),
    logLevel: source.LOG_LEVEL || 'info',
    keyEncryptionKey: encryptionKey(source.KEY_ENCRYPTION_KEY),
    keyEncryptionKeyPrevious: previousEncryptionKeys(source),
    sessionTtlSeconds: 3600,
    refreshTokenTtlSeconds: 30 * 86400,
    maxBodyBytes: 1024 * 1024,
    trustProxy: source.TRUST_PROXY === 'true' || source.TRUST_PROXY === '1',
    loginMaxFailuresPerEmail: integer(source, 'LOGIN_MAX_FAILURES_PER_EMAIL', 10, 1),
    loginMaxFailuresPerAddress: integer(source, 'LOGIN_MAX_FAILURES_PER_ADDRESS', 100, 1),
    refreshMaxFailuresPerAddress: integer(source, 'REFRESH_MAX_FAILURES_PER_ADDRESS', 100, 1),
    loginWindowSeconds: integer(source, 'LOGIN_WINDOW_SECONDS', 900, 1),
    signup: signUpMode(source),
    signupMaxPerAddress: integer(source, 'SIGNUP_MAX_PER_ADDRESS', 10, 1),
    oauthRegistrationsPerAddress: integer(source, 'OAUTH_REGISTRATIONS_PER_ADDRESS', 20, 1),
    oauthClientDocumentsPerAddress: integer(source, 'OAUTH_CLIENT_DOCUMENTS_PER_ADDRESS', 60, 1),
    oauthClientMetadataLoopback: source.OAUTH_CLIENT_METADATA_LOOPBACK === 'true',
    outboundPrivateNetworks: outboundPrivateNetworks(source),
    shutdownGraceMs: integer(source, 'SHUTDOWN_GRACE_MS', 10000),
    approvalSweepSeconds: integer(source, 'APPROVAL_SWEEP_SECONDS', 60, 1),
    checkpointSeconds: integer(source, 'CHECKPOINT_SECONDS', 10, 0),
    mcpUpstreamRefreshSeconds: integer(source, 'MCP_UPSTREAM_REFRESH_SECONDS', 300, 1),
    webhookPollMs: integer(source, 'WEBHOOK_POLL_MS', 500, 10),
    webhookRetryBaseMs: integer(source, 'WEBHOOK_RETRY_BASE_MS', 2000, 1),
    webhookMaxAttempts: integer(source, 'WEBHOOK_MAX_ATTEMPTS', 8, 1),
    webhookTimeoutMs: integer(source, 'WEBHOOK_TIMEOUT_MS', 10000, 1),
    orgMaxConcurrency: integer(source, 'ORG_MAX_CONCURRENCY', 32, 1),
    maxConcurrentRequests: integer(source, 'MAX_CONCURRENT_REQUESTS', 4, 1),
    orgMaxQueued: integer(source, 'ORG_MAX_QUEUED', 1000, 1),
    mcpUpstreamPoolSize: integer(source, 'MCP_UPSTREAM_POOL_SIZE', 64),
    mcpUpstreamIdleSeconds: integer(source, 'MCP_UPSTREAM_IDLE_SECONDS', 300, 1),
    executionRecoverySeconds: integer(source, 'EXECUTION_RECOVERY_SECONDS', 30, 1),
    executionLeaseSeconds: integer(source, 'EXECUTION_LEASE_SECONDS', 15, 3),
    policyEvalBudget: integer(source, 'POLICY_EVAL_BUDGET', DEFAULT_EVAL_BUDGET, 1),
    mcpAllowedOrigins: allowedOrigins(source.MCP_ALLOWED_ORIGINS, 'MCP_ALLOWED_ORIGINS'),
    mcpConfirmationsWaitingPerOrg: integer(source, 'MCP_CONFIRMATIONS_WAITING_PER_ORG', 20, 1),
    corsAllowedOrigins: allowedOrigins(source.CORS_ALLOWED_ORIGINS, 'CORS_ALLOWED_ORIGINS'),
    metricsPort: integer(source, 'METRICS_PORT', 9464),
    metricsHost: source.METRICS_HOST || '127.0.0.1',
    otlpTracesUrl: otlpTracesUrl(source),
    serviceName: source.OTEL_SERVICE_NAME || 'agent-gateway',
    tracesSampler: tracesSampler(source),
  };
}

/** What of the environment opening the database needs; `warn` reports a pooler found in `session` mode. */
export function databaseOptions(env: Env, warn?: (message: string) => void): DatabaseOptions {
  return {
    databaseUrl: env.databaseUrl,
    dataDir: env.dataDir,
    timeoutMs: env.databaseTimeoutMs,
    poolMode: env.databasePoolMode,
    warn,
  };
}
