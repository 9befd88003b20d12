import http from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * What the lane tests (direct-lane, read-lane) share: servers of the app's handler and of yoga
 * alone side by side, a request sent to either as Node's client sends it, and the part of an
 * answer that must be the same both ways.
 */

export interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  text: string;
}

/** Servers on loopback ports, each closed with its connections by `close`. */
export function laneServers() {
  const servers: http.Server[] = [];
  return {
    async listen(handler: http.RequestListener): Promise<string> {
      const server = http.createServer(handler);
      servers.push(server);
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    },
    close() {
      for (const server of servers) {
        server.closeAllConnections();
        server.close();
      }
    },
  };
}

/** One request; `chunked`: the body in chunks of 1000 bytes, without Content-Length. */
export function exchange(
  url: string,
  method: string,
  {
    headers = {},
    body = '',
    chunked = false,
  }: { headers?: Record<string, string>; body?: string | Buffer; chunked?: boolean },
) {
  return new Promise<Answer>((resolve, reject) => {
    const request = http.request(url, { method, headers }, (response) => {
      const chunks: Buffer[] = [];
      response.on('data', (chunk: Buffer) => chunks.push(chunk));
      response.on('end', () =>
        resolve({ status: response.statusCode!, headers: response.headers, text: Buffer.concat(chunks).toString() }),
      );
    });
    request.on('error', reject);
    if (chunked) {
      const bytes = Buffer.from(body);
      for (let at = 0; at < bytes.length; at += 1000) request.write(bytes.subarray(at, at + 1000));
      request.end();
    } else request.end(body);
  });
}

/**
 * The headers that must be equal both ways: all but the date, the connection's, the request id
 * (present, checked) and the count left (one request later on the second server). The window's
 * reset is compared by its presence: the two requests may fall on either side of a window's end
 * (a minute's, for the operator limit), and then rightly differ; its value is checked to be a time.
 */
export function comparableHeaders(answer: Answer): http.IncomingHttpHeaders {
  const {
    date,
    connection,
    'keep-alive': keepAlive,
    'x-request-id': requestId,
    'x-ratelimit-remaining': remaining,
    ...headers
  } = answer.headers;
  expect(requestId).toMatch(/^\S+$/);
  const reset = headers['x-ratelimit-reset'];
  if (reset === undefined) return headers;
  const seconds = Number(reset);
  expect(seconds).toBeGreaterThan(Date.now() / 1000 - 5);
  expect(seconds).toBeLessThanOrEqual(Date.now() / 1000 + 2 * 86_400);
  return { ...headers, 'x-ratelimit-reset': 'a time' };
}
