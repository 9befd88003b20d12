/**
 * The load client the measured tests and the benches pool their samples from
 * (scripts/load-client.mjs, scripts/load.ts): asked for its samples it returns one per answer, in
 * order, and the pooled quantile is taken over every run's samples together.
 */
import { pooledQuantile, runLoad, type LoadResult } from '../scripts/load.js';
import http from 'node:http';
import type { AddressInfo } from 'node:net';

const run = (latencies: number[]): LoadResult => ({
  requests: latencies.length,
  rps: 0,
  p50: 0,
  p90: 0,
  p99: 0,
  statuses: { 200: latencies.length },
  failures: 0,
  latencies,
});

test('the pooled quantile is taken over the samples of every run, not per run', () => {
  const fast = run(Array.from({ length: 100 }, (_, i) => i + 1));
  const slow = run(Array.from({ length: 100 }, (_, i) => i + 101));
  // 200 samples: the p99 is the 199th smallest, which only the second run holds.
  expect(pooledQuantile([fast, slow], 0.99)).toBe(199);
  expect(pooledQuantile([slow, fast], 0.5)).toBe(101);
  expect(pooledQuantile([fast], 0.99)).toBe(100);
});

test('a run made without its samples cannot be pooled', () => {
  const { latencies: _none, ...bare } = run([1, 2, 3]);
  expect(() => pooledQuantile([run([1]), bare], 0.99)).toThrow(/samples: true/);
  expect(() => pooledQuantile([], 0.99)).toThrow(/no samples/);
});

test('the client returns one latency per answer, ascending, only when asked for them', async () => {
  const server = http.createServer((_req, res) => res.end('ok'));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
  try {
    const sampled = await runLoad({ url, method: 'GET' }, { seconds: 0.5, concurrency: 2, samples: true });
    expect(sampled.requests).toBeGreaterThan(0);
    expect(sampled.latencies).toHaveLength(sampled.requests);
    expect(sampled.latencies).toEqual([...sampled.latencies!].sort((a, b) => a - b));
    expect(sampled.latencies!.every((ms) => ms > 0)).toBe(true);
    const plain = await runLoad({ url, method: 'GET' }, { seconds: 0.2, concurrency: 1 });
    expect(plain.requests).toBeGreaterThan(0);
    expect(plain.latencies).toBeUndefined();
  } finally {
    await new Promise((resolve) => server.close(resolve));
  }
});
