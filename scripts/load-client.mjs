// An HTTP load client, run as a process of its own so that it shares no event loop with the
// service it measures (the bench's two-org and fixed-rate rows, test/fairness.measured.test.ts).
// Closed loop: `concurrency` clients each send the request again as soon as the previous answer
// arrived, for `seconds`. Open loop, with `rate`: a request every 1/rate seconds whatever the
// answers, each latency counted from when the request was due, so that a stalled service is not
// measured by fewer, luckier requests (coordinated omission). It prints one JSON line: requests,
// rps, the latency percentiles in milliseconds (per request with the monotonic clock, not
// bucketed), and how many answers were not 2xx or failed; with `samples`, every latency too, so
// that several runs' samples can be pooled (scripts/load.ts).
//
//   node scripts/load-client.mjs '{"url": "...", "headers": {...}, "body": "...", "seconds": 5, "concurrency": 1}'
//   node scripts/load-client.mjs '{"url": "...", "seconds": 10, "rate": 500}'
//   node scripts/load-client.mjs - < options.json   (a body too large for an argument: 1 MiB of params)
import { readFileSync } from 'node:fs';
import http from 'node:http';

const {
  url,
  method = 'POST',
  headers = {},
  body = '',
  // Closed loop: client i sends bodies[i % bodies.length] instead (several agents' calls, each one at a time).
  bodies = [body],
  seconds,
  concurrency = 256,
  rate,
  samples = false,
} = JSON.parse(process.argv[2] === '-' ? readFileSync(0, 'utf8') : process.argv[2]);
const target = new URL(url);
const agent = new http.Agent({ keepAlive: true, maxSockets: concurrency });
const payloads = bodies.map((text) => Buffer.from(text));
const latencies = [];
const statuses = {};
let failures = 0;

function once(started = performance.now(), payload = payloads[0]) {
  return new Promise((resolve) => {
    const request = http.request(
      {
        host: target.hostname,
        port: target.port,
        path: target.pathname + target.search,
        method,
        agent,
        headers: { ...headers, 'content-length': payload.length },
      },
      (response) => {
        response.resume();
        response.on('end', () => {
          latencies.push(performance.now() - started);
          statuses[response.statusCode] = (statuses[response.statusCode] ?? 0) + 1;
          resolve();
        });
      },
    );
    request.on('error', () => {
      failures++;
      resolve();
    });
    request.end(payload);
  });
}

/** Sends each request when it is due, however many are still waiting for their answers. */
async function openLoop() {
  const interval = 1000 / rate;
  const total = Math.floor(seconds * rate);
  const start = performance.now();
  const sent = [];
  for (let k = 0; k < total; ) {
    for (const now = performance.now(); k < total && start + k * interval <= now; k++)
      sent.push(once(start + k * interval));
    const wait = start + k * interval - performance.now();
    if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
  }
  await Promise.all(sent);
}

const deadline = performance.now() + seconds * 1000;
if (rate) await openLoop();
else
  await Promise.all(
    Array.from({ length: concurrency }, async (_, i) => {
      const payload = payloads[i % payloads.length];
      while (performance.now() < deadline) await once(performance.now(), payload);
    }),
  );
agent.destroy();
latencies.sort((a, b) => a - b);
const percentile = (p) =>
  latencies.length ? latencies[Math.min(latencies.length - 1, Math.floor(p * latencies.length))] : null;
const round = (ms) => (ms === null ? null : Math.round(ms * 100) / 100);
process.stdout.write(
  `${JSON.stringify({
    requests: latencies.length,
    rps: Math.round(latencies.length / seconds),
    p50: round(percentile(0.5)),
    p90: round(percentile(0.9)),
    p99: round(percentile(0.99)),
    statuses,
    failures,
    ...(samples ? { latencies: latencies.map(round) } : {}),
  })}\n`,
);
