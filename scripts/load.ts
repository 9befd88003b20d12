// Runs scripts/load-client.mjs as a child process and reads its result (the bench's two-org and
// fixed-rate rows, scripts/bench-cost.ts, test/fairness.measured.test.ts): load that does not share
// the measured service's event loop.
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const client = fileURLToPath(new URL('./load-client.mjs', import.meta.url));

export interface LoadRequest {
  url: string;
  method?: string;
  headers?: Record<string, string>;
  body?: string;
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
}

export async function runLoad(
  request: LoadRequest,
  options: { seconds: number; concurrency: number; requests?: number } | { seconds: number; rate: number },
): Promise<LoadResult> {
  const { stdout } = await promisify(execFile)(process.execPath, [client, JSON.stringify({ ...request, ...options })], {
    env: { ...process.env, NODE_OPTIONS: '' },
    timeout: (options.seconds + 60) * 1000,
  });
  return JSON.parse(stdout) as LoadResult;
}
