// Runs scripts/load-client.mjs, or autocannon for a closed loop at saturation, as a child process
// and reads its result (the bench's two-org and fixed-rate rows, scripts/bench-cost.ts,
// test/fairness.measured.test.ts): load that does not share the measured service's event loop.
import { execFile } from 'node:child_process';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const client = fileURLToPath(new URL('./load-client.mjs', import.meta.url));

export interface LoadRequest {
  url: string;
  method?: string;
  headers?: Record<string, string>;
  body?: string;
  /** The load client's closed loop only: client i sends bodies[i % bodies.length] instead of `body`. */
  bodies?: string[];
}

export interface LoadResult {
  requests: number;
  rps: number;
  /** Milliseconds. */
  p50: number;
  p90: number;
  p99: number;
  statuses: Record<string, number>;
  /** Requests that got no answer. */
  failures: number;
  /** Requests still in flight when the client stopped at its time (autocannon's closed loop): the service may have done them. */
  unanswered?: number;
  /** Every answer's latency in milliseconds, ascending, when asked for (`samples`). */
  latencies?: number[];
}

/**
 * The `p` quantile (0.99: p99) of the samples of several runs taken together. A p99 of one short
 * window is its few slowest requests, and on a shared machine one stall moves it by half; the
 * median of a few such p99s still follows whichever window the stalls fell in. Pooled, the same
 * requests give a p99 of many more, which a stall moves little (test/fairness.measured.test.ts).
 */
export function pooledQuantile(results: LoadResult[], p: number): number {
  const pooled = results.flatMap((result) => {
    if (!result.latencies) throw new Error('pooledQuantile needs runs made with { samples: true }');
    return result.latencies;
  });
  if (!pooled.length) throw new Error('pooledQuantile: no samples');
  pooled.sort((a, b) => a - b);
  return pooled[Math.min(pooled.length - 1, Math.floor(p * pooled.length))];
}

export async function runLoad(
  request: LoadRequest,
  options: ({ seconds: number; concurrency: number } | { seconds: number; rate: number }) & { samples?: boolean },
): Promise<LoadResult> {
  // The options go in on stdin: an argument is at most 128 KiB, and a body may be 1 MiB.
  const running = promisify(execFile)(process.execPath, [client, '-'], {
    env: { ...process.env, NODE_OPTIONS: '' },
    timeout: (options.seconds + 60) * 1000,
    // A sample is ≈6 bytes of JSON: room for a long run's.
    maxBuffer: 64 * 1024 * 1024,
  });
  running.child.stdin!.end(JSON.stringify({ ...request, ...options }));
  const { stdout } = await running;
  return JSON.parse(stdout) as LoadResult;
}

// Resolved by require's rules: jest's ESM runtime, which loads this file in the measured tests, has no import.meta.resolve.
const autocannonCli = createRequire(import.meta.url).resolve('autocannon/autocannon.js');

/**
 * A closed loop at saturation from autocannon in a process of its own (scripts/bench-cost.ts):
 * `connections` each send the request again as soon as the answer arrived, for `seconds`, or
 * until `amount` requests were answered. Not scripts/load-client.mjs: with 32 connections it
 * drives a bare node:http server in another process at ≈4,700 req/s, autocannon at ≈16,800 (2026-11-29,
 * 2 cores), so bare's row measured the client, and the client's CPU is taken from the service on
 * two cores. Its p50/p90/p99 are whole milliseconds: the rows read its throughput, the open-loop
 * rows the latencies.
 */
export async function runClosedLoop(
  request: LoadRequest,
  options: { connections: number } & ({ seconds: number } | { amount: number }),
): Promise<LoadResult> {
  const args = ['-j', '-c', String(options.connections), '-m', request.method ?? 'POST'];
  args.push(...('amount' in options ? ['-a', String(options.amount)] : ['-d', String(options.seconds)]));
  for (const [name, value] of Object.entries(request.headers ?? {})) args.push('-H', `${name}:${value}`);
  if (request.body) args.push('-b', request.body);
  const { stdout } = await promisify(execFile)(process.execPath, [autocannonCli, ...args, request.url], {
    env: { ...process.env, NODE_OPTIONS: '' },
    timeout: (('amount' in options ? 3600 : options.seconds) + 60) * 1000,
    maxBuffer: 16 * 1024 * 1024,
  });
  const result = JSON.parse(stdout) as {
    duration: number;
    errors: number;
    requests: { sent: number };
    latency: { p50: number; p90: number; p99: number };
    statusCodeStats: Record<string, { count: number }>;
  };
  const statuses = Object.fromEntries(
    Object.entries(result.statusCodeStats).map(([status, { count }]) => [status, count]),
  );
  const answered = Object.values(statuses).reduce((sum, count) => sum + count, 0);
  return {
    requests: answered,
    rps: Math.round(answered / result.duration),
    p50: result.latency.p50,
    p90: result.latency.p90,
    p99: result.latency.p99,
    statuses,
    // Timeouts are among the errors.
    failures: result.errors,
    unanswered: Math.max(0, result.requests.sent - answered - result.errors),
  };
}
