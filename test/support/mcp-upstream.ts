import { randomUUID } from 'node:crypto';
import type http from 'node:http';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import type { Hit } from './recording-server.js';
import { serveWithWebHandler } from './web-handler.js';

/**
 * Upstream MCP servers of the SDK for the `mcp` connector's tests and the bench: a stateful
 * 2025-11-25 endpoint (session ids, SSE answers, as most deployed servers are) on the SDK v1, and
 * a node:http face for the SDK v2's web-standard handlers (2026-07-28).
 */

export interface StatefulEndpoint {
  /** The live sessions by id: a test may close one (the server "forgets" it) or read their count. */
  sessions: Map<string, StreamableHTTPServerTransport>;
  serve(req: http.IncomingMessage, res: http.ServerResponse, body: unknown): Promise<void>;
  /** Ends one session without the client's asking, as a server does when a session expires. */
  forget(sessionId: string): Promise<void>;
  /** Ends every session, as a restarted server would have lost them. */
  forgetAll(): Promise<void>;
}

/** What serves a session: the SDK v1's McpServer or its low-level Server. */
interface SessionServer {
  connect(transport: StreamableHTTPServerTransport): Promise<void>;
}

/** A request with an unknown session id is answered 404, as the MCP specification asks of an ended session. */
export function statefulEndpoint(newServer: () => SessionServer): StatefulEndpoint {
  const sessions = new Map<string, StreamableHTTPServerTransport>();
  async function serve(req: http.IncomingMessage, res: http.ServerResponse, body: unknown) {
    const sessionId = req.headers['mcp-session-id'];
    const existing = typeof sessionId === 'string' ? sessions.get(sessionId) : undefined;
    if (existing) return existing.handleRequest(req, res, body);
    if (sessionId !== undefined) {
      res.writeHead(404).end();
      return;
    }
    const transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (id) => void sessions.set(id, transport),
      onsessionclosed: (id) => void sessions.delete(id),
    });
    await newServer().connect(transport);
    await transport.handleRequest(req, res, body);
  }
  async function forget(sessionId: string) {
    const transport = sessions.get(sessionId);
    sessions.delete(sessionId);
    await transport?.close();
  }
  async function forgetAll() {
    const open = [...sessions.values()];
    sessions.clear();
    await Promise.all(open.map((transport) => transport.close()));
  }
  return { sessions, serve, forget, forgetAll };
}

/** Reads a request's body, then answers it with a web-standard handler (`createMcpHandler(...).fetch`). */
export function nodeHandlerOf(handler: (request: Request) => Promise<Response>) {
  return (req: http.IncomingMessage, res: http.ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const hit: Hit = {
        method: req.method!,
        path: req.url!,
        headers: req.headers,
        body: Buffer.concat(chunks).toString('utf8'),
      };
      serveWithWebHandler(handler, hit, req, res).catch(() => {
        if (!res.headersSent) res.writeHead(500);
        res.end();
      });
    });
  };
}

/**
 * A tool's answer that comes after 5 s, long past any deadline of the tests, or when `releaseAll`
 * lets every one still waiting go (so that a test file ends without open answers).
 */
export function lateAnswers() {
  const waiting = new Set<() => void>();
  const answer = () =>
    new Promise<{ content: { type: 'text'; text: string }[] }>((resolve) => {
      const release = () => resolve({ content: [{ type: 'text', text: 'late' }] });
      waiting.add(release);
      setTimeout(release, 5000).unref();
    });
  return { answer, releaseAll: () => waiting.forEach((release) => release()) };
}
