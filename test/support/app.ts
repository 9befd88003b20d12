import { appendFileSync } from 'node:fs';
import type { Logger } from 'pino';
import { createApp, type App } from '../../src/app.js';
import type { Database } from '../../src/db/database.js';
import type { QueryObserver } from '../../src/db/query-observer.js';
import { parseEnv } from '../../src/env.js';
import { createLogger } from '../../src/logger.js';
import type { Telemetry } from '../../src/observability/telemetry.js';
import { createTestDatabase, type TestDatabase } from './database.js';
import { OpenApiResponseChecker } from './openapi-validator.js';

export interface TestResponse<T = any> {
  status: number;
  headers: Headers;
  body: T;
  text: string;
}

export interface RequestOptions {
  body?: unknown;
  /** Bearer token. */
  token?: string;
  apiKey?: string;
  headers?: Record<string, string>;
  clientAddress?: string;
}

/** Anything the fixtures can call: the in-process app, or a service process on a real port. */
export interface TestClient {
  request<T = any>(method: string, path: string, options?: RequestOptions): Promise<TestResponse<T>>;
}

export interface TestApp extends TestClient {
  app: App;
  database: TestDatabase;
  graphql<T = any>(
    query: string,
    variables?: Record<string, unknown>,
    options?: RequestOptions,
  ): Promise<TestResponse<T>>;
  close(): Promise<void>;
}

export interface TestAppOptions {
  logger?: Logger;
  /** Run on this database instead of a fresh one (several app instances on one database). */
  db?: Database;
  /** Sees every statement Prisma sends (N+1 bounds). */
  onQuery?: QueryObserver;
  /** Metrics and spans to use (an in-memory span exporter); the test shuts it down. */
  telemetry?: Telemetry;
  /** False: serve at once, without waiting for the journal's recovery (a database that cannot be reached). */
  waitReady?: boolean;
}

/** The fetch options of a test request: JSON body, bearer token or API key, extra headers. */
export function requestInit(method: string, options: RequestOptions): RequestInit {
  const headers: Record<string, string> = { ...options.headers };
  let body: string | undefined;
  if (options.body !== undefined) {
    body = typeof options.body === 'string' ? options.body : JSON.stringify(options.body);
    headers['content-type'] ??= 'application/json';
  }
  if (options.token) headers.authorization = `Bearer ${options.token}`;
  if (options.apiKey) headers['x-api-key'] = options.apiKey;
  return { method, headers, body };
}

/** Status, headers, text and the JSON body when there is one. */
export async function testResponse<T>(response: Response): Promise<TestResponse<T>> {
  const text = await response.text();
  let parsed: unknown;
  try {
    parsed = text ? JSON.parse(text) : undefined;
  } catch {
    parsed = undefined;
  }
  return { status: response.status, headers: response.headers, body: parsed as T, text };
}

/**
 * Test files sign up dozens of organizations, all from the one default client address; the tests
 * of sign-up throttling set the limit they test.
 */
export const TEST_SIGNUP_LIMIT = { SIGNUP_MAX_PER_ADDRESS: '100000' } as const;

/**
 * The deployment opening loopback to tenants' configurations (docs/decisions/0062-the-deployment-boundary.md):
 * tests whose tools, webhooks, identity providers or client documents run on 127.0.0.1 need it,
 * as a developer running local tools does. Without it those are refused, as on a default deployment.
 */
export const LOOPBACK_UPSTREAMS = { OUTBOUND_PRIVATE_NETWORKS: '127.0.0.0/8' } as const;

/** The real app on a real database, called in-process through `yoga.fetch`. */
export async function startTestApp(env: Record<string, string> = {}, options: TestAppOptions = {}): Promise<TestApp> {
  const database: TestDatabase = options.db
    ? { db: options.db, url: undefined, close: async () => undefined }
    : await createTestDatabase({ onQuery: options.onQuery });
  const app = createApp({
    env: parseEnv({ LOG_LEVEL: 'silent', ...TEST_SIGNUP_LIMIT, ...env }),
    db: database.db,
    logger: options.logger ?? createLogger(process.env.TEST_LOG_LEVEL ?? 'silent'),
    telemetry: options.telemetry,
  });
  if (options.waitReady ?? true) await app.ready;
  else app.ready.catch(() => undefined);

  async function send<T>(method: string, path: string, options: RequestOptions = {}): Promise<TestResponse<T>> {
    const response = await app.yoga.fetch(`http://localhost${path}`, requestInit(method, options), {
      clientAddress: options.clientAddress ?? '192.0.2.1',
    } as never);
    return testResponse<T>(response);
  }
  const checker = OpenApiResponseChecker.committed();

  /**
   * Every response any test gets is held to the served /openapi.json: a status the operation does
   * not document, a body off its schema or a missing documented header fails that test. The
   * document cannot drift from what the service answers without the build failing.
   */
  async function request<T>(method: string, path: string, options: RequestOptions = {}): Promise<TestResponse<T>> {
    const response = await send<T>(method, path, options);
    const problems = checker.check(method, path, response);
    const observed = process.env.OPENAPI_OBSERVED_FILE;
    if (observed) {
      const operation = checker.operationOf(method, path);
      if (operation)
        appendFileSync(observed, `${operation} ${response.status} ${JSON.stringify(problems.map((p) => p.problem))}\n`);
      return response;
    }
    if (problems.length) {
      throw new Error(
        `${method} ${path} → ${response.status} does not match /openapi.json:\n${problems.map((p) => `  ${p.problem}`).join('\n')}`,
      );
    }
    return response;
  }

  return {
    app,
    database,
    request,
    graphql: (query, variables, options = {}) =>
      request('POST', '/graphql', { ...options, body: { query, variables } }),
    async close() {
      await app.stop();
      await database.close();
    },
  };
}
