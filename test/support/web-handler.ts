import type http from 'node:http';
import type { Hit } from './recording-server.js';

/**
 * Serves a recorded request with a web-standard handler (`Request` in, `Response` out), the shape
 * of the MCP SDK v2's `createMcpHandler(...).fetch`, on a node:http response: upstream MCP servers
 * of the 2026-07-28 revision in tests. The answer is streamed as it comes (JSON or SSE).
 */
export async function serveWithWebHandler(
  handler: (request: Request) => Promise<Response>,
  hit: Hit,
  req: http.IncomingMessage,
  res: http.ServerResponse,
): Promise<void> {
  const headers = new Headers();
  for (const [name, value] of Object.entries(req.headers)) {
    for (const item of Array.isArray(value) ? value : value === undefined ? [] : [value]) headers.append(name, item);
  }
  const hasBody = hit.method !== 'GET' && hit.method !== 'HEAD';
  const request = new Request(`http://127.0.0.1${hit.path}`, {
    method: hit.method,
    headers,
    body: hasBody ? hit.body : undefined,
  });
  const answer = await handler(request);
  res.writeHead(answer.status, Object.fromEntries(answer.headers));
  if (!answer.body) return void res.end();
  const reader = answer.body.getReader();
  res.on('close', () => void reader.cancel().catch(() => undefined));
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    res.write(value);
  }
  res.end();
}
