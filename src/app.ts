import { readFileSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { useGraphQlJit } from '@envelop/graphql-jit';
import { GraphQLError } from 'graphql';
import { createYoga, type YogaServerInstance } from 'graphql-yoga';
import type { Logger } from 'pino';
import type { Database } from './db/database.js';
import type { Env } from './env.js';
import { isDatabaseUnavailable, isMissingReference } from './db/unavailable.js';
import { AppError, referenceGone, serviceUnavailable } from './errors.js';
import { logUnexpected } from './logger.js';
import type { Context } from './api/context.js';
import { boundedDocumentCaches, GRAPHQL_ENDPOINT, isGraphQlEndpointRequest, useGraphQlGuard } from './http/guard.js';
import { requestLoaders, type LoaderFactory } from './api/request-loaders.js';
import { modules } from './modules/modules.js';
import { schema } from './http/schema.js';
import { useScopeCacheRelease } from './http/scope-cache.js';
import { serveDocs } from './http/docs.js';
import { useConsole } from './http/console.js';
import { useGraphiQLPage } from './http/graphiql-page.js';
import { useRequestLifecycle, type ServerContext } from './http/lifecycle.js';
import { awayWhile, concurrencyOf, createAuthenticator, type AuthenticateOptions } from './http/authenticate.js';
import { buildOpenApiDocument } from './http/openapi.js';
import type { RequestState } from './api/request-state.js';
import { currentRequest } from './http/request-state.js';
import { useMcpEndpoint } from './http/mcp-endpoint.js';
import { useOAuthEndpoints } from './http/oauth-endpoints.js';
import { useSsoEndpoints } from './http/sso-endpoints.js';
import { useUpstreamOAuthEndpoints } from './http/upstream-oauth-endpoints.js';
import { useRestFacade, type ReadRoutes } from './http/rest-facade.js';
import { directLane } from './http/direct-lane.js';
import { ConfigCache } from './lib/config-cache.js';
import { SecretBox } from './lib/secret-box.js';
import { SigningKeyStore } from './lib/signing-keys.js';
import { pruneCounters } from './lib/rate-counter.js';
import { createTelemetry, type Telemetry } from './observability/telemetry.js';
import type { AuthState } from './authz/authz.js';
import { createWebhookDispatcher } from './modules/webhook/webhook.dispatcher.js';
import type { WebhookWake } from './modules/webhook/webhook.service.js';
import { createServices, type Services } from './services.js';
import { Response } from './api/fetch-api.js';

export const packageVersion: string = JSON.parse(
  readFileSync(new URL('../package.json', import.meta.url), 'utf8'),
).version;

export interface App {
  yoga: YogaServerInstance<ServerContext, Context>;
  /**
   * What Node's server calls: the gateway's routes and the operators' reads answered before yoga
   * (src/http/direct-lane.ts), everything else by yoga.
   */
  handler: (req: IncomingMessage, res: ServerResponse) => void;
  /** The reads `handler` answers before yoga (tests check which it takes, and that it takes them). */
  reads: ReadRoutes;
  services: Services;
  /** Its metrics (served by the separate listener of src/main.ts) and tracer. */
  telemetry: Telemetry;
  /** Its settings and signing keys: for tests and the bench, not for resolvers (they are not in the context). */
  env: Env;
  keys: SigningKeyStore;
  /** The OpenAPI document it serves, built on first use. */
  openapi(): Record<string, unknown>;
  /** This app's webhook dispatcher, for code that enqueues events outside the services (tests). */
  webhooks: WebhookWake;
  /**
   * Resolves once the process owns its execution journal and has recorded the executions that
   * stopped processes left unrecorded; serve traffic after it.
   */
  ready: Promise<void>;
  /** Readiness turns false once shutdown begins, so load balancers stop sending traffic. */
  setDraining(): void;
  /**
   * Stops background work (cache polling, maintenance, the webhook dispatcher, whose attempts in
   * flight are aborted); resolves once none touches the database any more, so the caller may
   * close it.
   */
  stop(): Promise<void>;
}

/** Rate counters (src/lib/rate-counter.ts, every module's) past their window are deleted this often. */
const COUNTER_PRUNE_EVERY_MS = 10 * 60 * 1000;

/** The request loaders every module contributes, by name: a name is one module's. */
const loaderFactories = new Map<string, LoaderFactory>();
for (const module of modules) {
  for (const [name, make] of Object.entries(module.loaders ?? {})) {
    if (loaderFactories.has(name)) throw new Error(`loader ${name} contributed twice (module ${module.name})`);
    loaderFactories.set(name, make);
  }
}
const makeLoaders = requestLoaders(loaderFactories);

/**
 * The OpenAPI document depends only on the schema, the version and PUBLIC_URL, and building it
 * costs about a second of CPU (SOFA derives every route again): it is built when first asked for,
 * once per PUBLIC_URL in the process, instead of at every start.
 */
const openApiDocuments = new Map<string | undefined, Record<string, unknown>>();
function openApiDocument(publicUrl: string | undefined): Record<string, unknown> {
  let document = openApiDocuments.get(publicUrl);
  if (!document) {
    document = buildOpenApiDocument(schema, packageVersion, publicUrl);
    openApiDocuments.set(publicUrl, document);
  }
  return document;
}

/** The app's telemetry from its environment: OTLP tracing when an endpoint is set, metrics unless METRICS_PORT=0. */
export function telemetryFromEnv(env: Env, logger: Logger): Telemetry {
  return createTelemetry({
    serviceName: env.serviceName,
    serviceVersion: packageVersion,
    metrics: env.metricsPort !== 0,
    otlpTracesUrl: env.otlpTracesUrl,
    sampler: env.tracesSampler,
    logger,
  });
}

export function createApp({
  env,
  db,
  logger,
  telemetry: given,
}: {
  env: Env;
  db: Database;
  logger: Logger;
  /** Injected by tests and the bench (an in-memory exporter); else made from `env` and shut down by stop(). */
  telemetry?: Telemetry;
}): App {
  const telemetry = given ?? telemetryFromEnv(env, logger);
  const secrets = new SecretBox(env.keyEncryptionKey, env.keyEncryptionKeyPrevious);
  if (!secrets.encrypting) {
    logger.warn(
      'KEY_ENCRYPTION_KEY is not set: signing keys, tool secrets and header values and webhook secrets are stored in plaintext ' +
        '(set it to 32 random bytes, hex or base64, then run `agent-gateway reencrypt`)',
    );
  }
  const cache = new ConfigCache(db.sql).start();
  const keys = new SigningKeyStore(db.sql, secrets, cache);
  // Made before the services: those that enqueue webhook events wake it (it starts below).
  const webhookDispatcher = createWebhookDispatcher({ env, db, logger, secrets, telemetry });
  const services = createServices(
    { env, db, logger, keys, cache, secrets, telemetry },
    { webhooks: webhookDispatcher },
  );
  const openapi = () => openApiDocument(env.publicUrl);
  let draining = false;
  // Admission is the edge's (src/http/authenticate.ts): credentials, the operator rate limit, the org's turn.
  const authenticator = createAuthenticator({
    sessions: services.sessions,
    apiKeys: services.apiKeys,
    countOperatorRequests: services.countOperatorRequests,
    operatorQuota: services.operatorQuota,
    concurrency: concurrencyOf(env),
  });
  const authenticate = (
    request: { headers: Pick<Headers, 'get'> },
    state: RequestState,
    options?: AuthenticateOptions,
  ): Promise<AuthState> => (state.auth ??= authenticator.authenticate(request, state, options));

  const restFacade = useRestFacade(schema, authenticate, logger, services);
  const yoga = createYoga<ServerContext, Context>({
    schema,
    graphqlEndpoint: GRAPHQL_ENDPOINT,
    parserAndValidationCache: boundedDocumentCaches(),
    // MAX_BODY_BYTES is enforced for every route before yoga (useRequestLifecycle). Yoga's own
    // limit piped each body through a stream transform whose objects outlived two young-generation
    // collections: 12 KB promoted per GraphQL request (docs/decisions/0057-young-garbage.md).
    maxRequestBodySize: false,
    landingPage: false,
    // Served by useGraphiQLPage: rendered and compressed once, cacheable.
    graphiql: false,
    // Closed to other origins unless configured: yoga's default would answer every origin,
    // letting any web page a signed-in operator visits call the API with a token it obtained.
    cors:
      env.corsAllowedOrigins.length > 0 ? { origin: env.corsAllowedOrigins, credentials: false, maxAge: 600 } : false,
    logging: {
      debug: (...args) => logger.debug(args.map(String).join(' ')),
      info: (...args) => logger.info(args.map(String).join(' ')),
      warn: (...args) => logger.warn(args.map(String).join(' ')),
      // maskError below has logged a database outage already, as a warning: not again as an error.
      error: (...args) => !args.some(isDatabaseUnavailable) && logger.error(args.map(String).join(' ')),
    },
    context({ request, state }): Context {
      return {
        request,
        state,
        services,
        // Each loader is made on first use: gateway calls, most of the traffic, batch no relations.
        loaders: makeLoaders(services),
        authenticate: () => authenticate(request, state),
        awayWhile: (wait) => awayWhile(state, wait),
      };
    },
    maskedErrors: {
      maskError(error) {
        const original = error instanceof GraphQLError ? error.originalError : error;
        if (error instanceof GraphQLError && (!original || original instanceof GraphQLError)) return error;
        if (isMissingReference(original)) return referenceGone();
        logUnexpected(logger, original, { request_id: currentRequest()?.requestId }, 'unexpected error');
        return isDatabaseUnavailable(original)
          ? serviceUnavailable()
          : new AppError('INTERNAL_ERROR', 'An internal error occurred');
      },
    },
    plugins: [
      // Compiled resolvers for the REST facade's fixed documents. Never for /graphql: compiling
      // whatever anyone sends is slow and holds memory per document.
      useGraphQlJit({}, { enableIf: (args) => !isGraphQlEndpointRequest((args.contextValue as Context).state) }),
      useRequestLifecycle({ logger, telemetry, maxBodyBytes: env.maxBodyBytes, trustProxy: env.trustProxy }),
      useGraphQlGuard(authenticator),
      useScopeCacheRelease(),
      useGraphiQLPage(),
      useConsole(),
      {
        async onRequest({ request, url, endResponse }) {
          // Fixed paths are their own route pattern (metrics, logs); REST and MCP set theirs.
          const fixedRoute = () => {
            const state = currentRequest();
            if (state) state.route = `${request.method} ${url.pathname}`;
          };
          if (url.pathname === GRAPHQL_ENDPOINT) return fixedRoute();
          if (url.pathname === '/healthz') {
            fixedRoute();
            return endResponse(Response.json({ status: 'ok' }));
          }
          if (url.pathname === '/readyz') {
            fixedRoute();
            const database = !draining && (await db.ping());
            return endResponse(
              Response.json(
                { status: database ? 'ok' : 'unavailable', checks: { database } },
                { status: database ? 200 : 503 },
              ),
            );
          }
          if (url.pathname === '/.well-known/jwks.json') {
            fixedRoute();
            return endResponse(Response.json(await keys.jwks(['capability', 'record', 'oauth'])));
          }
          const docs = await serveDocs(url.pathname, openapi);
          if (docs) {
            fixedRoute();
            endResponse(docs);
          }
        },
      },
      useOAuthEndpoints({ oauth: services.oauth, logger }),
      useSsoEndpoints({ sso: services.sso, publicUrl: env.publicUrl, logger }),
      useUpstreamOAuthEndpoints({ tools: services.tools, publicUrl: env.publicUrl, logger }),
      useMcpEndpoint({
        env,
        logger,
        telemetry,
        version: packageVersion,
        apiKeys: services.apiKeys,
        oauth: services.oauth,
        mcp: services.mcp,
        admit: authenticator.admit,
      }),
      ...restFacade.plugins,
    ],
  });

  // Periodic database work in flight: stop() waits for it, so the database is not closed under it.
  const periodicWork = new Set<Promise<void>>();
  const runPeriodic = (work: () => Promise<unknown>, failure: string) => {
    const task: Promise<void> = work()
      .then(
        () => undefined,
        (error) => logger.warn({ err: error }, failure),
      )
      .finally(() => periodicWork.delete(task));
    periodicWork.add(task);
  };
  const every = (ms: number, work: () => Promise<unknown>, failure: string) => {
    const timer = setInterval(() => runPeriodic(work, failure), ms);
    timer.unref();
    return timer;
  };
  const timers = [
    every(COUNTER_PRUNE_EVERY_MS, () => pruneCounters(db.sql), 'maintenance failed'),
    ...modules.flatMap((module) =>
      (module.jobs ?? []).map((job) => every(job.everyMs(env), () => job.run(services), job.failure)),
    ),
  ];

  // Sends the webhook outbox; safe to run in every process on the database (SKIP LOCKED claims).
  webhookDispatcher.start();
  const ready = services.journal.start();
  ready.catch((error) => logger.error({ err: error }, 'execution journal recovery failed at start'));

  const lane = directLane({
    direct: restFacade.direct,
    reads: restFacade.reads,
    logger,
    telemetry,
    maxBodyBytes: env.maxBodyBytes,
    trustProxy: env.trustProxy,
    cors: env.corsAllowedOrigins.length > 0,
  });
  return {
    yoga,
    handler: (req, res) => {
      if (!lane(req, res)) yoga(req, res);
    },
    reads: restFacade.reads,
    services,
    telemetry,
    env,
    keys,
    openapi,
    webhooks: webhookDispatcher,
    ready,
    setDraining: () => {
      draining = true;
    },
    stop: async () => {
      for (const timer of timers) clearInterval(timer);
      cache.stop();
      await ready.catch(() => undefined);
      await Promise.all([webhookDispatcher.stop(), services.journal.stop(), services.tools.close(), ...periodicWork]);
      // Spans still buffered go out (bounded); an injected telemetry is its owner's to shut down.
      if (!given) await telemetry.shutdown();
    },
  };
}
