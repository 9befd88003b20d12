import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { WebStandardStreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js';
import { CallToolRequestSchema, ErrorCode, ListToolsRequestSchema, McpError } from '@modelcontextprotocol/sdk/types.js';
import { AjvJsonSchemaValidator } from '@modelcontextprotocol/sdk/validation/ajv';
import type { Plugin } from 'graphql-yoga';
import {
  ATTR_GEN_AI_OPERATION_NAME,
  ATTR_GEN_AI_TOOL_NAME,
  ATTR_JSONRPC_REQUEST_ID,
  ATTR_MCP_METHOD_NAME,
  ATTR_MCP_PROTOCOL_VERSION,
  GEN_AI_OPERATION_NAME_VALUE_EXECUTE_TOOL,
} from '@opentelemetry/semantic-conventions/incubating';
import { ATTR_ERROR_TYPE } from '@opentelemetry/semantic-conventions';
import { SpanKind, SpanStatusCode, type Telemetry } from '../observability/telemetry.js';
import type { Logger } from 'pino';
import type { Env } from '../env.js';
import { isDatabaseUnavailable } from '../db/unavailable.js';
import { AppError, DATABASE_RETRY_AFTER_SECONDS, serviceUnavailable } from '../errors.js';
import { logUnexpected } from '../logger.js';
import type { AgentPrincipal, ApiKeyPrincipal } from '../modules/auth/authz.js';
import { may } from '../modules/auth/authz.js';
import { MCP_SCOPE, protectedResourceMetadataUrl } from '../modules/oauth/oauth-metadata.js';
import type { OAuthService } from '../modules/oauth/oauth.service.js';
import { agentIdPattern } from '../modules/manifest/manifest-document.js';
import type { McpService } from '../modules/mcp/mcp.service.js';
import type { ApiKeyService } from '../modules/api-key/api-key.service.js';
import { Request, Response } from './fetch-api.js';
import type { ServerContext } from './lifecycle.js';
import type { RequestState, Turn } from './request-state.js';

/**
 * `POST /mcp/{svc_id}` (docs/decisions/0038-mcp-proxy-mode.md): the agent's tools over MCP's Streamable
 * HTTP transport, stateless with JSON responses, served by the official SDK (a low-level `Server`
 * and a web-standard transport, both made per request as the SDK's stateless mode requires). This
 * edge checks what HTTP carries (path, method, Origin, the API key) and turns errors into
 * JSON-RPC; what a tool is and what a call decides is the MCP module's and the gateway's.
 */

export const MCP_PATH_PREFIX = '/mcp/';
const ROUTE = 'POST /mcp/:svc_id';
const bearerPattern = /^Bearer\s+(\S+)\s*$/i;
/** An OAuth access token is a JWT (three base64url parts); an API key never has a dot. */
const jwtPattern = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/;

/**
 * The challenge of a 401 (RFC 6750 §3, RFC 9728 §5.1): where the agent's protected-resource
 * metadata is, so an OAuth client can find the authorization server, and the scope to ask for;
 * `error="invalid_token"` when a credential was sent and refused.
 */
function challenge(publicUrl: string, svcId: string, refusal?: string): string {
  const base = `Bearer resource_metadata="${protectedResourceMetadataUrl(publicUrl, svcId)}", scope="${MCP_SCOPE}"`;
  return refusal === undefined ? base : `${base}, error="invalid_token", error_description="${refusal.replace(/["\\]/g, '')}"`;
}

/** Gateway-defined JSON-RPC error codes (−32000…−32019 is the range left to servers). */
const RPC_UNAUTHORIZED = -32001;
const RPC_FORBIDDEN = -32003;
const RPC_NOT_FOUND = -32004;
const RPC_METHOD_NOT_ALLOWED = -32005;
const RPC_UNAVAILABLE = -32010;

function rpcError(status: number, code: number, message: string, headers: Record<string, string> = {}): Response {
  return new Response(JSON.stringify({ jsonrpc: '2.0', error: { code, message }, id: null }), {
    status,
    headers: { ...headers, 'Content-Type': 'application/json' },
  });
}

/** A handler's failure as the JSON-RPC error the SDK sends: never a stack, never a 500. */
function toMcpError(error: unknown, logger: Logger): McpError {
  if (error instanceof McpError) return error;
  if (!(error instanceof AppError) && isDatabaseUnavailable(error)) {
    logUnexpected(logger, error, {}, 'MCP request failed');
    return toMcpError(serviceUnavailable(), logger);
  }
  if (error instanceof AppError) {
    const data = { code: error.code, ...(Object.keys(error.details).length ? { details: error.details } : {}) };
    if (error.code === 'VALIDATION_ERROR' || error.code === 'NOT_FOUND' || error.code === 'BAD_REQUEST') {
      return new McpError(ErrorCode.InvalidParams, error.message, data);
    }
    if (error.code === 'SERVICE_UNAVAILABLE') {
      return new McpError(RPC_UNAVAILABLE, error.message, { ...data, retry_after_seconds: DATABASE_RETRY_AFTER_SECONDS });
    }
    if (error.code !== 'INTERNAL_ERROR') return new McpError(RPC_FORBIDDEN, error.message, data);
  }
  logger.error({ err: error }, 'MCP request failed');
  return new McpError(ErrorCode.InternalError, 'An internal error occurred');
}

interface McpEndpointDeps {
  env: Pick<Env, 'maxBodyBytes' | 'mcpAllowedOrigins' | 'publicUrl'>;
  logger: Logger;
  telemetry: Telemetry;
  version: string;
  apiKeys: Pick<ApiKeyService, 'verify'>;
  oauth: Pick<OAuthService, 'authenticateAccessToken'>;
  mcp: McpService;
  /** Waits for the org's turn to do work (the authenticator's); throws 429 when too many wait. */
  admit: (orgId: string, state: RequestState) => Promise<void>;
}

export function useMcpEndpoint({ env, logger, telemetry, version, apiKeys, oauth, mcp, admit }: McpEndpointDeps): Plugin<{}, ServerContext> {
  const allowedOrigins = new Set(env.mcpAllowedOrigins);
  // Compiling schemas is the validator's cost; one instance serves every request's server.
  const jsonSchemaValidator = new AjvJsonSchemaValidator();

  /**
   * The caller of `X-API-Key` or `Authorization: Bearer`: an API key, or an OAuth access token
   * whose audience is this agent's endpoint (docs/decisions/0047-mcp-oauth.md); else the 401/403
   * that answers instead.
   */
  async function credentialOf(request: Request, svcId: string): Promise<AgentPrincipal | Response> {
    const header = request.headers.get('x-api-key') ?? bearerPattern.exec(request.headers.get('authorization') ?? '')?.[1];
    const unauthorized = (message: string, refusal?: string) =>
      rpcError(401, RPC_UNAUTHORIZED, message, { 'WWW-Authenticate': challenge(env.publicUrl, svcId, refusal) });
    if (!header) {
      return unauthorized('Credentials are required: an OAuth access token for this agent, or an API key (X-API-Key or Authorization: Bearer)');
    }
    const credential = header.trim();
    if (jwtPattern.test(credential) && !request.headers.has('x-api-key')) {
      const grant = await oauth.authenticateAccessToken(credential, svcId);
      return 'refused' in grant ? unauthorized(grant.refused, grant.refused) : grant;
    }
    let principal: ApiKeyPrincipal;
    try {
      principal = await apiKeys.verify(credential);
    } catch (error) {
      if (!(error instanceof AppError) || error.code !== 'INVALID_TOKEN') throw error;
      return unauthorized(error.message, error.message);
    }
    if (!may(principal, 'gateway:execute')) {
      return rpcError(403, RPC_FORBIDDEN, 'The API key needs the gateway:execute scope', {
        'WWW-Authenticate': 'Bearer error="insufficient_scope", scope="gateway:execute"',
      });
    }
    return principal;
  }

  /** A server for one request: tools/list and tools/call of this agent, for this key. */
  function serverFor(principal: AgentPrincipal, svcId: string, protocolVersion: string | null, turn: Turn | undefined): Server {
    const server = new Server(
      { name: 'agent-gateway', version },
      {
        capabilities: { tools: { listChanged: false } },
        instructions:
          `The tools of agent "${svcId}": its approved capabilities. Agent Gateway decides every call by policy, counts it ` +
          'against the agent’s budget, may ask a human first, and signs a record of it.',
        jsonSchemaValidator,
      },
    );
    server.setRequestHandler(ListToolsRequestSchema, async () => {
      try {
        return { tools: await mcp.listTools(principal, svcId) };
      } catch (error) {
        throw toMcpError(error, logger);
      }
    });
    // MCP's semantic conventions: the server span `tools/call {tool}`, its decision a child.
    server.setRequestHandler(CallToolRequestSchema, (request, extra) =>
      telemetry.withSpan(
        `tools/call ${request.params.name}`,
        {
          kind: SpanKind.SERVER,
          attributes: {
            [ATTR_MCP_METHOD_NAME]: 'tools/call',
            [ATTR_GEN_AI_TOOL_NAME]: request.params.name,
            [ATTR_GEN_AI_OPERATION_NAME]: GEN_AI_OPERATION_NAME_VALUE_EXECUTE_TOOL,
            [ATTR_JSONRPC_REQUEST_ID]: String(extra.requestId),
            ...(protocolVersion ? { [ATTR_MCP_PROTOCOL_VERSION]: protocolVersion } : {}),
          },
        },
        async (span) => {
          try {
            const result = await mcp.callTool(principal, svcId, request.params, turn?.away);
            if (result.isError) span.setAttribute(ATTR_ERROR_TYPE, 'tool_error').setStatus({ code: SpanStatusCode.ERROR });
            return result;
          } catch (error) {
            const mcpError = toMcpError(error, logger);
            span.setAttribute(ATTR_ERROR_TYPE, String(mcpError.code));
            throw mcpError;
          }
        },
      ),
    );
    return server;
  }

  async function handle(request: Request, svcId: string, state: ServerContext['state'] | undefined): Promise<Response> {
    const origin = request.headers.get('origin');
    if (origin !== null && !allowedOrigins.has(origin)) {
      return rpcError(403, RPC_FORBIDDEN, `Origin ${origin} may not call this endpoint (MCP_ALLOWED_ORIGINS)`);
    }
    if (request.method !== 'POST') {
      // Stateless: no server-initiated stream (GET) and no session to end (DELETE).
      return rpcError(405, RPC_METHOD_NOT_ALLOWED, `${request.method} is not supported: this endpoint is stateless, use POST`, {
        Allow: 'POST',
      });
    }
    const principal = await credentialOf(request, svcId);
    if (principal instanceof Response) return principal;
    if (state) {
      state.orgId = principal.orgId;
      try {
        await admit(principal.orgId, state);
      } catch (error) {
        if (!(error instanceof AppError)) throw error;
        return rpcError(429, RPC_FORBIDDEN, error.message, error.extensions.http?.headers ?? {});
      }
    }
    const transport = new WebStandardStreamableHTTPServerTransport({
      sessionIdGenerator: undefined,
      enableJsonResponse: true,
      maxRequestBodySize: env.maxBodyBytes,
    });
    // The body is read here (within REST's limit, already enforced by the request lifecycle) and
    // handed over parsed: the SDK's own reader goes through a web stream and a decoder per request.
    // What does not parse goes to the SDK as text, so it answers its own JSON-RPC parse error.
    const text = await request.text();
    let parsedBody: unknown;
    try {
      parsedBody = JSON.parse(text);
    } catch {
      parsedBody = undefined;
    }
    const forSdk = parsedBody === undefined ? new Request(request.url, { method: 'POST', headers: request.headers, body: text }) : request;
    await serverFor(principal, svcId, request.headers.get('mcp-protocol-version'), state?.turn).connect(transport);
    const answer = await transport.handleRequest(forSdk, parsedBody === undefined ? undefined : { parsedBody });
    // The SDK answers with the platform's Response; the server writes its own kind much faster.
    // Nothing is closed: in stateless JSON mode every response is complete here, no stream or timer
    // is left, and closing would abort the finished handler and build an error for nothing.
    return new Response(answer.body === null ? null : await answer.text(), { status: answer.status, headers: answer.headers });
  }

  return {
    async onRequest({ request, url, serverContext, endResponse }) {
      if (!url.pathname.startsWith(MCP_PATH_PREFIX)) return;
      const state = serverContext.state;
      if (state) state.route = ROUTE;
      let svcId: string;
      try {
        svcId = decodeURIComponent(url.pathname.slice(MCP_PATH_PREFIX.length));
      } catch {
        svcId = '';
      }
      if (!agentIdPattern.test(svcId)) {
        return endResponse(rpcError(404, RPC_NOT_FOUND, 'Not found: the path is /mcp/{svc_id}, an agent id'));
      }
      try {
        endResponse(await handle(request, svcId, state));
      } catch (error) {
        // Before any JSON-RPC handler runs (the API key's lookup): the database, or a bug.
        logUnexpected(logger, error, { request_id: state?.requestId }, 'MCP request failed');
        endResponse(
          isDatabaseUnavailable(error)
            ? rpcError(503, RPC_UNAVAILABLE, serviceUnavailable().message, { 'Retry-After': String(DATABASE_RETRY_AFTER_SECONDS) })
            : rpcError(500, ErrorCode.InternalError, 'An internal error occurred'),
        );
      }
    },
  };
}
