import { parseEnv } from './env.js';

/**
 * What each environment variable means and its default as `--help` shows it. The list of names is
 * not kept here: it is what `parseEnv` reads (`environmentNames`), so a variable added there shows
 * up in the usage even before it is described; test/command-line.test.ts fails until it is (here
 * and in docs/reference/configuration.md), and checks every literal default below against what
 * `parseEnv` does without the variable.
 */
export const ENV_DESCRIPTIONS: Record<string, { default?: string; meaning: string }> = {
  PORT: { default: '8000', meaning: 'port to listen on' },
  HOST: { default: '0.0.0.0', meaning: 'address to listen on' },
  DATABASE_URL: { meaning: 'postgresql://… : PostgreSQL (migrated at start), not PGlite' },
  DATABASE_TIMEOUT_MS: { default: '5000', meaning: 'PostgreSQL: longest wait on a connection or statement (503)' },
  DATABASE_POOL_MODE: { default: 'session', meaning: 'transaction: behind a transaction-mode pooler' },
  DATA_DIR: { default: './data', meaning: 'embedded PGlite directory (created and migrated at start)' },
  PUBLIC_URL: { default: 'http://localhost:$PORT', meaning: 'base URL in logs, OpenAPI servers, token issuers' },
  LOG_LEVEL: { default: 'info', meaning: 'pino level (JSON lines on stdout)' },
  KEY_ENCRYPTION_KEY: { meaning: '32 bytes, hex or base64: seals secrets at rest (unset: plaintext)' },
  KEY_ENCRYPTION_KEY_PREVIOUS: { meaning: 'earlier keys, comma-separated: still open, never seal' },
  TRUST_PROXY: { default: 'false', meaning: 'take the client address from X-Forwarded-For (throttling)' },
  LOGIN_MAX_FAILURES_PER_EMAIL: { default: '10', meaning: 'failed logins per email in a window' },
  LOGIN_MAX_FAILURES_PER_ADDRESS: { default: '100', meaning: 'failed logins per client address in a window' },
  REFRESH_MAX_FAILURES_PER_ADDRESS: {
    default: '100',
    meaning: 'failed refresh-token rotations per client address in a window',
  },
  LOGIN_WINDOW_SECONDS: { default: '900', meaning: 'login and refresh throttling window' },
  SIGNUP: { default: 'open', meaning: 'closed: no sign-up (403); agent-gateway create-org makes orgs' },
  SIGNUP_MAX_PER_ADDRESS: { default: '10', meaning: 'sign-ups per client address an hour' },
  OAUTH_REGISTRATIONS_PER_ADDRESS: { default: '20', meaning: 'OAuth client registrations per client address an hour' },
  OAUTH_CLIENT_DOCUMENTS_PER_ADDRESS: {
    default: '60',
    meaning: 'OAuth client documents fetched per client address an hour',
  },
  OAUTH_CLIENT_METADATA_LOOPBACK: {
    default: 'false',
    meaning: 'true: OAuth client ids at http loopback URLs (tests only)',
  },
  OUTBOUND_PRIVATE_NETWORKS: {
    meaning: 'private CIDRs tenants may reach, comma-separated; no link-local',
  },
  SHUTDOWN_GRACE_MS: { default: '10000', meaning: 'SIGTERM: time for in-flight requests (then ≤ 5 s more)' },
  APPROVAL_SWEEP_SECONDS: { default: '60', meaning: 'how often overdue approvals are marked expired' },
  CHECKPOINT_SECONDS: {
    default: '10',
    meaning: 'seconds between an org’s record checkpoints; 0: on demand',
  },
  MCP_UPSTREAM_REFRESH_SECONDS: {
    default: '300',
    meaning: 'how often mcp tools read their upstream tool definitions again',
  },
  WEBHOOK_POLL_MS: { default: '500', meaning: 'how often due webhook deliveries are looked for' },
  WEBHOOK_RETRY_BASE_MS: { default: '2000', meaning: 'first retry delay of a delivery; doubles per attempt' },
  WEBHOOK_MAX_ATTEMPTS: { default: '8', meaning: 'attempts per delivery, the first included' },
  WEBHOOK_TIMEOUT_MS: { default: '10000', meaning: 'time one delivery attempt may take' },
  MCP_UPSTREAM_POOL_SIZE: { default: '64', meaning: 'connected mcp tool upstreams kept for reuse; 0: none' },
  MCP_UPSTREAM_IDLE_SECONDS: { default: '300', meaning: 'how long an unused mcp tool upstream stays connected' },
  EXECUTION_RECOVERY_SECONDS: { default: '30', meaning: 'how often executions of stopped processes are recorded' },
  EXECUTION_LEASE_SECONDS: { default: '15', meaning: 'how long a process’s journal lease lasts unrenewed' },
  ORG_MAX_CONCURRENCY: { default: '32', meaning: 'requests of one org running at once, when it is alone' },
  MAX_CONCURRENT_REQUESTS: { default: '4', meaning: 'requests running at once, shared among the active orgs' },
  ORG_MAX_QUEUED: { default: '1000', meaning: 'requests of one org waiting their turn (more: 429)' },
  POLICY_EVAL_BUDGET: { default: '50000', meaning: 'operations one policy condition evaluation may take' },
  CORS_ALLOWED_ORIGINS: { meaning: 'other browser origins allowed by CORS (comma-separated)' },
  MCP_ALLOWED_ORIGINS: { meaning: 'browser origins allowed on /mcp/… (comma-separated)' },
  MCP_CONFIRMATIONS_WAITING_PER_ORG: {
    default: '20',
    meaning: "an org's MCP calls waiting at once for their user's yes",
  },
  METRICS_PORT: { default: '9464', meaning: 'port of the GET /metrics listener; 0: no metrics' },
  METRICS_HOST: { default: '127.0.0.1', meaning: 'address of the metrics listener' },
  OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: { meaning: 'OTLP/HTTP traces URL, as is (unset: no tracing)' },
  OTEL_EXPORTER_OTLP_ENDPOINT: { meaning: 'OTLP/HTTP base URL: traces to …/v1/traces' },
  OTEL_SERVICE_NAME: { default: 'agent-gateway', meaning: 'service.name of the spans' },
  OTEL_TRACES_SAMPLER: { default: 'parentbased_always_on', meaning: 'which traces are kept (OpenTelemetry names)' },
  OTEL_TRACES_SAMPLER_ARG: { default: '1', meaning: 'fraction a traceidratio sampler keeps, 0 to 1' },
};

/** The variables `parseEnv` reads, in the order it reads them (with none set). */
export function environmentNames(): string[] {
  const names: string[] = [];
  const source = new Proxy({} as NodeJS.ProcessEnv, {
    get(_target, name) {
      if (typeof name === 'string' && !names.includes(name)) names.push(name);
      return undefined;
    },
  });
  parseEnv(source);
  return names;
}

/** The environment part of `--help`: `NAME=default` (or `NAME`, unset by default) and its meaning. */
export function environmentUsage(): string {
  const rows = environmentNames().map((name) => {
    const described = ENV_DESCRIPTIONS[name];
    const left = described?.default === undefined ? name : `${name}=${described.default}`;
    return [left, described?.meaning ?? '(see docs/reference/configuration.md)'] as const;
  });
  const width = Math.max(...rows.map(([left]) => left.length)) + 2;
  return rows.map(([left, meaning]) => `  ${left.padEnd(width)}${meaning}`).join('\n');
}
