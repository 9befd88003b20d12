import {
  defaultTextMapSetter,
  INVALID_SPAN_CONTEXT,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type Attributes,
  type Context,
  type Span,
  type TextMapGetter,
  type Tracer,
} from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { resourceFromAttributes } from '@opentelemetry/resources';
import {
  AlwaysOffSampler,
  AlwaysOnSampler,
  BatchSpanProcessor,
  ParentBasedSampler,
  SimpleSpanProcessor,
  TraceIdRatioBasedSampler,
  TracerProvider,
  type Sampler,
  type SpanExporter,
  type SpanProcessor,
} from '@opentelemetry/sdk-trace';
import { ATTR_SERVICE_NAME, ATTR_SERVICE_VERSION } from '@opentelemetry/semantic-conventions';
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { Logger } from 'pino';
import type { TracesSampler } from '../env.js';
import { scopedSlot } from '../lib/async-scope.js';

/**
 * Metrics and traces (docs/decisions/0039-metrics-and-traces.md), in one object per app that services get
 * through Deps: tests start several apps in one process, so nothing here is global except the
 * process metrics, which are the process's.
 *
 * Metrics are prom-client objects on the app's own Registry with fixed label sets; callers use the
 * methods below, whose parameters are the labels, so no id or free text can become a label.
 * Traces use the OpenTelemetry SDK with a tracer provider and a W3C propagator of the app's own
 * (none is registered globally); the active span's context lives in the process's async scope
 * (`traceSlot`). Without an exporter (no
 * OTEL_EXPORTER_OTLP_ENDPOINT, none injected) tracing is off and `withSpan` only calls its function.
 */

export type DecisionLabel = 'allow' | 'deny';
export type PolicyEvaluationResult = 'matched' | 'not_matched' | 'condition_error';
/** One attempt of a webhook delivery: delivered, failed with a retry to come, or failed for good. */
export type WebhookAttemptOutcome = 'delivered' | 'retrying' | 'failed';
/** An argon2 computation: a new password hashed, or a presented one verified. */
export type PasswordOperation = 'hash' | 'verify';

export interface SpanOptions {
  kind?: SpanKind;
  attributes?: Attributes;
  /** Headers of an incoming request: a `traceparent` among them continues the caller's trace. */
  remoteParent?: Headers;
  /** Start a trace of its own, whatever is active (background work woken from a request). */
  root?: boolean;
}

export interface Telemetry {
  /** Counting is on (METRICS_PORT not 0); when off, the metric methods do nothing. */
  readonly metricsEnabled: boolean;
  /** Spans are recorded and exported; when off, `withSpan` only calls its function. */
  readonly tracing: boolean;
  /** The app's metrics and the process's, in the Prometheus text format. */
  scrape(): Promise<{ contentType: string; text: string }>;

  /** A served request: its route pattern (`unmatched` when none), never the raw path. */
  httpRequest(method: string, route: string, status: number, seconds: number): void;
  /** A gateway decision: counted once, under its first reason (`none` for an allow); each reason of a deny counted apart. */
  decision(decision: DecisionLabel, reasons: readonly { code: string }[], channel: string, mode: string): void;
  policyEvaluated(effect: string, mode: string, result: PolicyEvaluationResult): void;
  /** A tool call: `outcome` is `success` or the failure's code (a closed set of TOOL_* codes). */
  toolCall(connector: string, outcome: string, seconds: number): void;
  recordAppended(seconds: number): void;
  webhookAttempt(outcome: WebhookAttemptOutcome): void;
  /** One argon2 computation, the CPU that logins and sign-ups spend (a flood of them shows here first). */
  passwordHashed(operation: PasswordOperation): void;
  /** What `agw_approvals_pending` reports, asked once per scrape. */
  observePendingApprovals(count: () => Promise<number>): void;

  /**
   * Runs `fn` in a new span, a child of the active one (or of `remoteParent`'s trace), and ends
   * it when `fn` settles; a throw marks it as an error. With tracing off, only calls `fn`.
   */
  withSpan<T>(name: string, options: SpanOptions, fn: (span: Span) => T): T;
  /** `traceparent` (and `tracestate`) of the active span, for outbound requests; empty when none. */
  traceHeaders(): Record<string, string>;
  /** Exports what is buffered and stops tracing; bounded by `timeoutMs`. */
  shutdown(timeoutMs?: number): Promise<void>;
}

export interface TelemetryOptions {
  serviceName?: string;
  serviceVersion?: string;
  /** False: no metric is counted (METRICS_PORT=0). */
  metrics?: boolean;
  /** Where spans go: an injected exporter (tests, the bench), else OTLP when `otlpTracesUrl` is set. */
  spanExporter?: SpanExporter;
  otlpTracesUrl?: string;
  /** Which traces are recorded; the default keeps every one (parentbased_always_on). */
  sampler?: TracesSampler;
  /** `simple` exports each span as it ends (tests); `batch` (the default) in the background. */
  spanProcessor?: 'batch' | 'simple';
  logger?: Logger;
}

const TRACER_NAME = 'agent-gateway';
/** Gateway requests take milliseconds; the default buckets start at 5 ms. */
const LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];
const TOOL_BUCKETS = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];
const knownMethods = new Set(['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS']);

let processRegistry: Registry | undefined;
/**
 * Process metrics (CPU, memory, event loop lag, GC, handles) once per process: they describe the
 * process, and each collector starts monitors that are never stopped, so not one per app.
 */
function processMetrics(): Registry {
  if (!processRegistry) {
    processRegistry = new Registry();
    collectDefaultMetrics({ register: processRegistry });
  }
  return processRegistry;
}

const NOOP_SPAN = trace.wrapSpanContext(INVALID_SPAN_CONTEXT);
/**
 * The active trace context, in the process's one async scope (src/lib/async-scope.ts) rather than
 * an AsyncLocalStorageContextManager of its own. Shared by the apps of a process, which is safe:
 * a scope belongs to one request, served by one app.
 */
const traceSlot = scopedSlot<Context>('trace');

const headersGetter: TextMapGetter<Headers> = {
  get: (carrier, key) => carrier.get(key) ?? undefined,
  keys: (carrier) => [...carrier.keys()],
};

const isPromiseLike = (value: unknown): value is PromiseLike<unknown> =>
  typeof value === 'object' && value !== null && typeof (value as { then?: unknown }).then === 'function';

function metricsOf(registry: Registry) {
  const registers = [registry];
  const evaluations = new Counter({
    name: 'agw_policy_evaluations_total',
    help: 'Policies evaluated against a gateway request that they target, by effect, mode and result',
    labelNames: ['effect', 'mode', 'result'] as const,
    registers,
  });
  // Every combination exists from the start (at 0), and counting one skips the label lookup.
  const evaluationChildren = new Map<string, ReturnType<typeof evaluations.labels>>();
  for (const effect of ['deny', 'require_approval', 'rate_limit']) {
    for (const mode of ['enforce', 'shadow']) {
      for (const result of ['matched', 'not_matched', 'condition_error']) {
        evaluationChildren.set(`${effect} ${mode} ${result}`, evaluations.labels(effect, mode, result));
      }
    }
  }
  const passwordHashes = new Counter({
    name: 'agw_password_hashes_total',
    help: 'argon2 computations by operation: hash (sign-up, new users) or verify (logins, wrong passwords and unknown emails alike)',
    labelNames: ['operation'] as const,
    registers,
  });
  // Both series exist from the start (at 0), so a flood shows as a rate rather than a new series.
  for (const operation of ['hash', 'verify'] as const) passwordHashes.inc({ operation }, 0);
  return {
    requests: new Counter({
      name: 'agw_http_requests_total',
      help: 'HTTP requests served on the public port, by method, route pattern and status',
      labelNames: ['method', 'route', 'status'] as const,
      registers,
    }),
    requestDuration: new Histogram({
      name: 'agw_http_request_duration_seconds',
      help: 'Time to the response head of HTTP requests on the public port, by method, route pattern and status',
      labelNames: ['method', 'route', 'status'] as const,
      buckets: LATENCY_BUCKETS,
      registers,
    }),
    decisions: new Counter({
      name: 'agw_gateway_decisions_total',
      help: 'Gateway decisions, each counted once under its first reason code (none for an allow), by channel and mode',
      labelNames: ['decision', 'reason', 'channel', 'mode'] as const,
      registers,
    }),
    denialReasons: new Counter({
      name: 'agw_gateway_denial_reasons_total',
      help: 'Reasons given by gateway denials, each reason of a denial counted, by channel and mode',
      labelNames: ['reason', 'channel', 'mode'] as const,
      registers,
    }),
    evaluations,
    evaluationChildren,
    toolCalls: new Histogram({
      name: 'agw_tool_call_duration_seconds',
      help: 'Tool calls of allowed executions, by connector and outcome (success or the failure code)',
      labelNames: ['connector', 'outcome'] as const,
      buckets: TOOL_BUCKETS,
      registers,
    }),
    recordAppends: new Histogram({
      name: 'agw_record_append_duration_seconds',
      help: 'Time from asking for a record to its commit in the org chain (queueing and batching included)',
      buckets: LATENCY_BUCKETS,
      registers,
    }),
    webhookAttempts: new Counter({
      name: 'agw_webhook_deliveries_total',
      help: 'Webhook delivery attempts by outcome: delivered, retrying (failed, retried later) or failed (for good)',
      labelNames: ['outcome'] as const,
      registers,
    }),
    passwordHashes,
  };
}

export function createTelemetry(options: TelemetryOptions = {}): Telemetry {
  const registry = new Registry();
  const metricsEnabled = options.metrics ?? true;
  const metrics = metricsEnabled ? metricsOf(registry) : undefined;
  let pendingApprovals: (() => Promise<number>) | undefined;
  if (metricsEnabled) {
    new Gauge({
      name: 'agw_approvals_pending',
      help: 'Approvals waiting for a human decision (pending and not expired), over all orgs',
      registers: [registry],
      async collect() {
        if (!pendingApprovals) return;
        try {
          this.set(await pendingApprovals());
        } catch (error) {
          // The scrape still answers; the gauge keeps its last value.
          options.logger?.warn({ err: error }, 'counting pending approvals for /metrics failed');
        }
      },
    });
  }

  const exporter =
    options.spanExporter ?? (options.otlpTracesUrl ? new OTLPTraceExporter({ url: options.otlpTracesUrl }) : undefined);
  let provider: TracerProvider | undefined;
  let tracer: Tracer | undefined;
  const propagator = new W3CTraceContextPropagator();
  if (exporter) {
    const processor: SpanProcessor =
      options.spanProcessor === 'simple'
        ? new SimpleSpanProcessor({ exporter })
        : new BatchSpanProcessor({ exporter, exportTimeoutMillis: 10_000 });
    provider = new TracerProvider({
      resource: resourceFromAttributes({
        [ATTR_SERVICE_NAME]: options.serviceName ?? 'agent-gateway',
        ...(options.serviceVersion ? { [ATTR_SERVICE_VERSION]: options.serviceVersion } : {}),
      }),
      spanProcessors: [processor],
      sampler: samplerOf(options.sampler ?? { name: 'parentbased_always_on', ratio: 1 }),
    });
    tracer = provider.getTracer(TRACER_NAME, options.serviceVersion);
  }
  const activeContext = () => traceSlot.get() ?? ROOT_CONTEXT;

  function withSpan<T>(name: string, spanOptions: SpanOptions, fn: (span: Span) => T): T {
    if (!tracer) return fn(NOOP_SPAN);
    const parent = spanOptions.remoteParent
      ? propagator.extract(ROOT_CONTEXT, spanOptions.remoteParent, headersGetter)
      : spanOptions.root
        ? ROOT_CONTEXT
        : activeContext();
    const span = tracer.startSpan(
      name,
      { kind: spanOptions.kind ?? SpanKind.INTERNAL, attributes: spanOptions.attributes },
      parent,
    );
    const failed = (error: unknown) => {
      span.recordException(error instanceof Error ? error : String(error));
      span.setStatus({ code: SpanStatusCode.ERROR, message: error instanceof Error ? error.message : undefined });
      span.end();
    };
    let result: T;
    try {
      result = traceSlot.run(trace.setSpan(parent, span), () => fn(span));
    } catch (error) {
      failed(error);
      throw error;
    }
    if (!isPromiseLike(result)) {
      span.end();
      return result;
    }
    return (result as PromiseLike<unknown>).then(
      (value) => {
        span.end();
        return value;
      },
      (error: unknown) => {
        failed(error);
        throw error;
      },
    ) as T;
  }

  function traceHeaders(): Record<string, string> {
    if (!tracer) return {};
    const carrier: Record<string, string> = {};
    propagator.inject(activeContext(), carrier, defaultTextMapSetter);
    return carrier;
  }

  const noop = () => undefined;
  // A series found once per label set rather than hashed from a labels object on every count:
  // these run on every request, and the label sets are few (routes, codes and channels are closed sets).
  const requestSeries = new Map<string, { count: Counter.Internal; duration: Histogram.Internal<string> }>();
  const seriesCache = new WeakMap<object, Map<string, Counter.Internal>>();
  function seriesOf<T extends string>(
    counter: Counter<T>,
    key: string,
    labels: () => Record<T, string>,
  ): Counter.Internal {
    let byKey = seriesCache.get(counter);
    if (!byKey) seriesCache.set(counter, (byKey = new Map()));
    let series = byKey.get(key);
    if (!series) byKey.set(key, (series = counter.labels(labels())));
    return series;
  }
  return {
    metricsEnabled,
    tracing: tracer !== undefined,
    async scrape() {
      const [own, shared] = await Promise.all([registry.metrics(), processMetrics().metrics()]);
      return { contentType: registry.contentType, text: `${own}\n${shared}` };
    },
    httpRequest: metrics
      ? (method, route, status, seconds) => {
          const known = knownMethods.has(method) ? method : 'OTHER';
          const key = `${known} ${status} ${route}`;
          let series = requestSeries.get(key);
          if (!series) {
            const labels = { method: known, route, status: String(status) };
            series = { count: metrics.requests.labels(labels), duration: metrics.requestDuration.labels(labels) };
            requestSeries.set(key, series);
          }
          series.count.inc();
          series.duration.observe(seconds);
        }
      : noop,
    decision: metrics
      ? (decision, reasons, channel, mode) => {
          seriesOf(metrics.decisions, `${decision} ${reasons[0]?.code ?? 'none'} ${channel} ${mode}`, () => ({
            decision,
            reason: reasons[0]?.code ?? 'none',
            channel,
            mode,
          })).inc();
          for (const { code } of reasons)
            seriesOf(metrics.denialReasons, `${code} ${channel} ${mode}`, () => ({
              reason: code,
              channel,
              mode,
            })).inc();
        }
      : noop,
    policyEvaluated: metrics
      ? (effect, mode, result) => metrics.evaluationChildren.get(`${effect} ${mode} ${result}`)?.inc()
      : noop,
    toolCall: metrics
      ? (connector, outcome, seconds) => metrics.toolCalls.observe({ connector, outcome }, seconds)
      : noop,
    recordAppended: metrics ? (seconds) => metrics.recordAppends.observe(seconds) : noop,
    webhookAttempt: metrics ? (outcome) => metrics.webhookAttempts.inc({ outcome }) : noop,
    passwordHashed: metrics ? (operation) => metrics.passwordHashes.inc({ operation }) : noop,
    observePendingApprovals(count) {
      pendingApprovals = count;
    },
    withSpan,
    traceHeaders,
    async shutdown(timeoutMs = 2000) {
      if (!provider) return;
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        provider
          .shutdown()
          .catch((error: unknown) => options.logger?.warn({ err: error }, 'exporting the last spans failed')),
        new Promise<void>((resolve) => {
          timer = setTimeout(resolve, timeoutMs);
          timer.unref();
        }),
      ]);
      clearTimeout(timer);
    },
  };
}

/** The SDK's sampler for OTEL_TRACES_SAMPLER's names. */
function samplerOf({ name, ratio }: TracesSampler): Sampler {
  const root = name.endsWith('always_off')
    ? new AlwaysOffSampler()
    : name.endsWith('traceidratio')
      ? new TraceIdRatioBasedSampler(ratio)
      : new AlwaysOnSampler();
  return name.startsWith('parentbased_') ? new ParentBasedSampler({ root }) : root;
}

/** Seconds since `start` (a `performance.now()` reading). */
export const secondsSince = (start: number): number => (performance.now() - start) / 1000;

export { SpanKind, SpanStatusCode, type Span };
