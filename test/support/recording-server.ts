import http from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A server on 127.0.0.1 that records every request it gets (tools, webhooks and MCP upstreams are
 * tested against it) and answers through `respond`, once the body is read.
 */

export interface Hit {
  method: string;
  path: string;
  headers: http.IncomingHttpHeaders;
  body: string;
}

export interface RecordingServer {
  port: number;
  /** `http://127.0.0.1:<port>` (or the host it was started on) */
  base: string;
  /** TCP connections accepted so far (clients that keep theirs open between requests open few). */
  readonly connections: number;
  /** Ends open connections (a hung answer included) and stops listening. */
  close(): Promise<void>;
}

/**
 * `port`: a given one, so that a test can stop the server and start it again where clients know it
 * (an upstream restarting). `host`: another loopback address (127.0.0.2), for a server the address
 * policy must keep the gateway from reaching.
 */
export async function startRecordingServer(
  hits: Hit[],
  respond: (hit: Hit, res: http.ServerResponse, req: http.IncomingMessage) => unknown,
  port = 0,
  host = '127.0.0.1',
): Promise<RecordingServer> {
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const hit = {
        method: req.method!,
        path: req.url!,
        headers: req.headers,
        body: Buffer.concat(chunks).toString('utf8'),
      };
      hits.push(hit);
      res.on('error', () => undefined);
      respond(hit, res, req);
    });
  });
  let connections = 0;
  server.on('connection', () => connections++);
  await new Promise<void>((resolve) => server.listen(port, host, resolve));
  const bound = (server.address() as AddressInfo).port;
  return {
    port: bound,
    base: `http://${host}:${bound}`,
    get connections() {
      return connections;
    },
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
