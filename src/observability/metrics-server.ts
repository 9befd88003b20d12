import { createServer, type Server } from 'node:http';
import type { Logger } from 'pino';
import type { Telemetry } from './telemetry.js';

export const METRICS_PATH = '/metrics';

/**
 * The metrics listener (docs/decisions/0039-metrics-and-traces.md): a plain node:http server apart from the
 * public one, on METRICS_HOST:METRICS_PORT, that answers `GET /metrics` (and HEAD) in the
 * Prometheus text format and 404 to anything else. The public port never serves metrics.
 */
export function createMetricsServer(telemetry: Telemetry, logger?: Logger): Server {
  const server = createServer((request, response) => {
    const path = (request.url ?? '').split('?', 1)[0];
    if (path !== METRICS_PATH) {
      response
        .writeHead(404, { 'content-type': 'text/plain; charset=utf-8' })
        .end('Not found: metrics are at GET /metrics\n');
      return;
    }
    if (request.method !== 'GET' && request.method !== 'HEAD') {
      response
        .writeHead(405, { allow: 'GET, HEAD', 'content-type': 'text/plain; charset=utf-8' })
        .end('Method not allowed\n');
      return;
    }
    telemetry.scrape().then(
      ({ contentType, text }) => {
        response.writeHead(200, { 'content-type': contentType, 'cache-control': 'no-store' });
        response.end(request.method === 'HEAD' ? undefined : text);
      },
      (error: unknown) => {
        logger?.error({ err: error }, 'collecting metrics failed');
        response.writeHead(500, { 'content-type': 'text/plain; charset=utf-8' }).end('Collecting metrics failed\n');
      },
    );
  });
  server.keepAliveTimeout = 5000;
  return server;
}
