import {
  createMcpHandler,
  isLegacyRequest,
  PROTOCOL_VERSION_META_KEY,
  ProtocolError,
  ProtocolErrorCode,
  Server,
  SUPPORTED_PROTOCOL_VERSIONS,
  WebStandardStreamableHTTPServerTransport,
  type JSONRPCRequest,
  type RequestId,
} from '@modelcontextprotocol/server';
import { AjvJsonSchemaValidator } from '@modelcontextprotocol/server/validators/ajv';
import type { Plugin } from 'graphql-yoga';
import {
  ATTR_GEN_AI_OPERATION_NAME,
  ATTR_GEN_AI_TOOL_NAME,
  ATTR_JSONRPC_REQUEST_ID,
  ATTR_MCP_METHOD_NAME,
  ATTR_MCP_PROTOCOL_VERSION,
  GEN_AI_OPERATION_NAME_VALUE_EXECUTE_TOOL,
} from '../observability/semantic-conventions.js';
import { ATTR_ERROR_TYPE } from '@opentelemetry/semantic-conventions';
import { SpanKind, SpanStatusCode, type Telemetry } from '../observability/telemetry.js';
import type { Logger } from 'pino';
import type { Env } from '../env.js';
import { isDatabaseUnavailable } from '../db/unavailable.js';
import { AppError, DATABASE_RETRY_AFTER_SECONDS, serviceUnavailable } from '../errors.js';
import { logUnexpected } from '../logger.js';
import type { AgentPrincipal, ApiKeyPrincipal } from '../authz/authz.js';
import { may } from '../authz/authz.js';
import { MCP_SCOPE, protectedResourceMetadataUrl } from '../modules/oauth/oauth-metadata.js';
import type { OAuthService } from '../modules/oauth/oauth.service.js';
import { agentIdPattern } from '../modules/manifest/manifest-document.js';
import type { McpService } from '../modules/mcp/mcp.service.js';
import type { ConfirmationQuestion, ElicitationAction } from '../modules/gateway/gateway.service.js';
import type { ApiKeyService } from '../modules/api-key/api-key.service.js';
import { Request, Response } from '../api/fetch-api.js';
import type { ServerContext } from './lifecycle.js';
import type { RequestState, Turn } from '../api/request-state.js';
import {
  connectElicitation,
  declaresFormElicitation,
  declaresUrlElicitation,
  elicitationSessionId,
  type ElicitationModes,
  sessionElicitation,
  confirmationElicitation,
  confirmationOf,
  confirmationRequest,
  postedConfirmation,
} from './mcp-elicitation.js';

/**
 * `POST /mcp/{svc_id}` (docs/decisions/0038-mcp-proxy-mode.md, 0048-mcp-protocol-revisions.md): the
 * agent's tools over MCP's Streamable HTTP transport, stateless with JSON responses, served by the
 * official SDK's v2 server in both protocol eras. 2026-07-28 requests (a `_meta` envelope naming
 * the revision) go to the SDK's own entry, `createMcpHandler`, which checks the envelope, the
 * `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name` headers against the body and answers
 * `server/discover`; 2025-era requests (with `initialize`) go to a web-standard transport, as
 * before. Either way a low-level `Server` made per request serves this agent's tools/list and
 * tools/call. This edge checks what HTTP carries (path, method, Origin, the API key) and turns
 * errors into JSON-RPC; what a tool is and what a call decides is the MCP module's and the gateway's.
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
  return refusal === undefined
    ? base
    : `${base}, error="invalid_token", error_description="${refusal.replace(/["\\]/g, '')}"`;
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
function toMcpError(error: unknown, logger: Logger): ProtocolError {
  if (error instanceof ProtocolError) return error;
  if (!(error instanceof AppError) && isDatabaseUnavailable(error)) {
    logUnexpected(logger, error, {}, 'MCP request failed');
    return toMcpError(serviceUnavailable(), logger);
  }
  if (error instanceof AppError) {
    const data = { code: error.code, ...(Object.keys(error.details).length ? { details: error.details } : {}) };
    if (error.code === 'VALIDATION_ERROR' || error.code === 'NOT_FOUND' || error.code === 'BAD_REQUEST') {
      return new ProtocolError(ProtocolErrorCode.InvalidParams, error.message, data);
    }
    if (error.code === 'SERVICE_UNAVAILABLE') {
      return new ProtocolError(RPC_UNAVAILABLE, error.message, {
        ...data,
        retry_after_seconds: DATABASE_RETRY_AFTER_SECONDS,
      });
    }
    if (error.code !== 'INTERNAL_ERROR') return new ProtocolError(RPC_FORBIDDEN, error.message, data);
  }
  logger.error({ err: error }, 'MCP request failed');
  return new ProtocolError(ProtocolErrorCode.InternalError, 'An internal error occurred');
}

/** Who a request's server serves: the key's principal, the agent, and the request's turn. */
interface McpCaller {
  principal: AgentPrincipal;
  svcId: string;
  /** The `MCP-Protocol-Version` header (on 2026-07-28 the SDK has checked it against the body). */
  protocolVersion: string | null;
  turn: Turn | undefined;
  /** The revision family: the 2025 one (`initialize`) or 2026-07-28's stateless one. */
  era: Leg;
  /** 2025 family: the elicitation modes the client declared, as its session id says (mcp-elicitation.ts). */
  elicitation: ElicitationModes;
  /** The client went away: a call waiting on its user stops waiting. */
  signal: AbortSignal;
}

/**
 * 2025 family: sends a request to the client on the stream of the request being answered (the
 * transport's, when it answers with a stream); absent when it answers with JSON.
 */
type SendRelated = (message: JSONRPCRequest, relatedRequestId: RequestId) => Promise<void>;

/** A tool list is the caller's own (see `serverFor`); `ttlMs` 0: no change is announced, ask again. */
const TOOL_LIST_CACHE = { cacheScope: 'private', ttlMs: 0 } as const;

interface RequestBody {
  text: string;
  /** The JSON value, or undefined when the text is not JSON. */
  parsed: unknown;
}

/**
 * The body is read here (within REST's limit, already enforced by the request lifecycle) and
 * handed over parsed: the SDK's own reader goes through a web stream and a decoder per request.
 */
async function bodyOf(request: Request): Promise<RequestBody> {
  const text = await request.text();
  try {
    return { text, parsed: JSON.parse(text) };
  } catch {
    return { text, parsed: undefined };
  }
}

/** The first revision without `initialize`, whose requests each carry a `_meta` envelope naming it. */
const STATELESS_REVISION = '2026-07-28';
const olderRevisions = new Set(SUPPORTED_PROTOCOL_VERSIONS.filter((version) => version < STATELESS_REVISION));
const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

type Leg = 'older' | 'stateless';

/**
 * The leg a request goes to where that is plain without the SDK's classifier, which parses the
 * whole body against three schemas (≈25 µs a call) and, on 2026-07-28, runs again in the SDK's
 * entry anyway. Plain are one JSON-RPC object whose params claim the envelope (`_meta` key
 * `io.modelcontextprotocol/protocolVersion`) and whose method is not `initialize`, which the SDK
 * never routes to the 2025 family; and one that claims no envelope, with no
 * `MCP-Protocol-Version` or one of the older revisions the SDK supports, which it always does.
 * Anything else (batches, an `initialize` with an envelope, other headers) is the SDK's to route.
 */
function plainLeg(request: Request, parsed: unknown): Leg | undefined {
  if (!isObject(parsed)) return undefined;
  const meta = isObject(parsed.params) ? parsed.params._meta : undefined;
  if (isObject(meta) && PROTOCOL_VERSION_META_KEY in meta) {
    return typeof parsed.method === 'string' && parsed.method !== 'initialize' ? 'stateless' : undefined;
  }
  const version = request.headers.get('mcp-protocol-version');
  return version === null || olderRevisions.has(version) ? 'older' : undefined;
}

/** The elicitation modes an `initialize` declares: its answer carries the session id that remembers them. */
function elicitationAtInitialize(parsed: unknown): ElicitationModes {
  const capabilities =
    isObject(parsed) && parsed.method === 'initialize' && isObject(parsed.params) ? parsed.params.capabilities : {};
  return { url: declaresUrlElicitation(capabilities), form: declaresFormElicitation(capabilities) };
}

/**
 * 2025 family: a tools/call of a client that declared form elicitation is answered with a stream,
 * which a confirmation question can go out on before the result (when the client takes one).
 */
const mayAskOnStream = (request: Request, parsed: unknown, caller: McpCaller) =>
  caller.elicitation.form &&
  isObject(parsed) &&
  parsed.method === 'tools/call' &&
  (request.headers.get('accept') ?? '').includes('text/event-stream');

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

export function useMcpEndpoint({
  env,
  logger,
  telemetry,
  version,
  apiKeys,
  oauth,
  mcp,
  admit,
}: McpEndpointDeps): Plugin<{}, ServerContext> {
  const allowedOrigins = new Set(env.mcpAllowedOrigins);
  // Compiling schemas is the validator's cost; one instance serves every request's server.
  const jsonSchemaValidator = new AjvJsonSchemaValidator();

  /**
   * The caller of `X-API-Key` or `Authorization: Bearer`: an API key, or an OAuth access token
   * whose audience is this agent's endpoint (docs/decisions/0047-mcp-oauth.md); else the 401/403
   * that answers instead.
   */
  async function credentialOf(request: Request, svcId: string): Promise<AgentPrincipal | Response> {
    const header =
      request.headers.get('x-api-key') ?? bearerPattern.exec(request.headers.get('authorization') ?? '')?.[1];
    const unauthorized = (message: string, refusal?: string) =>
      rpcError(401, RPC_UNAUTHORIZED, message, { 'WWW-Authenticate': challenge(env.publicUrl, svcId, refusal) });
    if (!header) {
      return unauthorized(
        'Credentials are required: an OAuth access token for this agent, or an API key (X-API-Key or Authorization: Bearer)',
      );
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
  function serverFor(
    { principal, svcId, protocolVersion, turn, era, elicitation, signal }: McpCaller,
    sendRelated?: SendRelated,
  ): Server {
    const server = new Server(
      { name: 'agent-gateway', version },
      {
        capabilities: { tools: { listChanged: false } },
        instructions:
          `The tools of agent "${svcId}": its approved capabilities. Agent Gateway decides every call by policy, counts it ` +
          'against the agent’s budget, may ask a human first, and signs a record of it.',
        jsonSchemaValidator,
        // 2026-07-28 results say who may cache them: a tool list depends on the key (its agents),
        // the manifest and the policies, so no shared cache may keep it. 2025-era answers carry no
        // such field (the SDK adds it only on the 2026-07-28 wire).
        cacheHints: { 'tools/list': TOOL_LIST_CACHE },
      },
    );
    server.setRequestHandler('tools/list', async () => {
      try {
        return { tools: await mcp.listTools(principal, svcId) };
      } catch (error) {
        throw toMcpError(error, logger);
      }
    });
    // MCP's semantic conventions: the server span `tools/call {tool}`, its decision a child.
    server.setRequestHandler('tools/call', (request, ctx) =>
      telemetry.withSpan(
        `tools/call ${request.params.name}`,
        {
          kind: SpanKind.SERVER,
          attributes: {
            [ATTR_MCP_METHOD_NAME]: 'tools/call',
            [ATTR_GEN_AI_TOOL_NAME]: request.params.name,
            [ATTR_GEN_AI_OPERATION_NAME]: GEN_AI_OPERATION_NAME_VALUE_EXECUTE_TOOL,
            [ATTR_JSONRPC_REQUEST_ID]: String(ctx.mcpReq.id),
            ...(protocolVersion ? { [ATTR_MCP_PROTOCOL_VERSION]: protocolVersion } : {}),
          },
        },
        async (span) => {
          try {
            // On 2026-07-28 `_meta` may hold the protocol's envelope beside the gateway's own keys,
            // the only ones the call reads.
            // A client that accepts form elicitation can be asked to confirm a call: on 2026-07-28
            // its retry carries the answer; on 2025-11-25 the question goes out on this call's
            // stream, and the call waits for the answer the client posts (to any process).
            const confirmation =
              era === 'stateless'
                ? confirmationOf(ctx.mcpReq)
                : { canAsk: sendRelated !== undefined && mcp.mayWait(principal.orgId), answer: null };
            const asked = await mcp.callTool(principal, svcId, request.params, turn?.away, confirmation);
            if (asked.confirm && era === 'stateless') return confirmationElicitation(asked.confirm);
            const { result, connect } =
              asked.confirm && sendRelated
                ? await askOnStream(asked.confirm, request.params, (message) => sendRelated(message, ctx.mcpReq.id))
                : asked;
            // All the call lacks is the user's connection: a client that accepts it is asked to open the page.
            const connecting = connect && connectElicitation(connect, era, elicitation.url, ctx.mcpReq);
            if (connecting) return connecting;
            if (result.isError)
              span.setAttribute(ATTR_ERROR_TYPE, 'tool_error').setStatus({ code: SpanStatusCode.ERROR });
            // The result as the request's revision shapes it (the SDK's one place for that).
            return server.projectCallToolResult(result, undefined);
          } catch (error) {
            const mcpError = toMcpError(error, logger);
            span.setAttribute(ATTR_ERROR_TYPE, String(mcpError.code));
            throw mcpError;
          }
        },
      ),
    );
    return server;

    /** 2025-11-25: asks the user on the call's stream, waits for the posted answer, and decides the call with it. */
    async function askOnStream(
      question: ConfirmationQuestion,
      params: Parameters<McpService['callTool']>[2],
      send: (message: JSONRPCRequest) => Promise<void>,
    ) {
      await send(confirmationRequest(question));
      const wait = () => mcp.awaitConfirmation(principal, svcId, question.id, signal);
      await (turn ? turn.away(wait) : wait());
      return mcp.callTool(principal, svcId, params, turn?.away, {
        canAsk: false,
        answer: { id: question.id, action: 'posted' },
      });
    }
  }

  // 2026-07-28: the SDK's entry, strict (`legacy: 'reject'`): 2025-era requests never reach it,
  // they are routed to `serveLegacy` below with the SDK's own predicate. Its factory builds the
  // server of the request it is given, whose caller `serveModern` left in `callers`.
  const callers = new WeakMap<object, McpCaller>();
  const modern = createMcpHandler(
    ({ requestInfo }) => {
      const caller = requestInfo && callers.get(requestInfo);
      if (!caller) throw new Error('An MCP request reached the server factory without its caller');
      return serverFor(caller);
    },
    {
      legacy: 'reject',
      maxRequestBodySize: env.maxBodyBytes,
      // The entry reports every request it refuses (a header that disagrees with the body, an
      // unsupported revision): the client's mistake, answered with a 4xx; its own failures answer 500.
      onerror: (error) => logger.debug({ err: error }, 'MCP request refused or failed in the SDK'),
    },
  );

  async function serveModern(request: Request, parsedBody: unknown, caller: McpCaller): Promise<globalThis.Response> {
    callers.set(request, caller);
    try {
      const answer = await modern.fetch(request, { parsedBody });
      if (answer.status >= 500) logger.error({ status: answer.status }, 'MCP request failed in the SDK');
      return answer;
    } finally {
      callers.delete(request);
    }
  }

  /** The 2025 family: `initialize`, then stateless requests, over the SDK's web-standard transport. */
  async function serveLegacy(request: Request, body: RequestBody, caller: McpCaller): Promise<globalThis.Response> {
    const stream = mayAskOnStream(request, body.parsed, caller);
    const transport = new WebStandardStreamableHTTPServerTransport({
      sessionIdGenerator: undefined,
      enableJsonResponse: !stream,
      maxRequestBodySize: env.maxBodyBytes,
    });
    // What does not parse goes to the SDK as text, so it answers its own JSON-RPC parse error.
    const forSdk =
      body.parsed === undefined
        ? new Request(request.url, { method: 'POST', headers: request.headers, body: body.text })
        : request;
    const sendRelated: SendRelated = (message, relatedRequestId) => transport.send(message, { relatedRequestId });
    await serverFor(caller, stream ? sendRelated : undefined).connect(transport);
    return transport.handleRequest(forSdk, body.parsed === undefined ? undefined : { parsedBody: body.parsed });
  }

  async function handle(request: Request, svcId: string, state: ServerContext['state'] | undefined): Promise<Response> {
    const origin = request.headers.get('origin');
    if (origin !== null && !allowedOrigins.has(origin)) {
      return rpcError(403, RPC_FORBIDDEN, `Origin ${origin} may not call this endpoint (MCP_ALLOWED_ORIGINS)`);
    }
    if (request.method !== 'POST') {
      // Stateless: no server-initiated stream (GET) and no session to end (DELETE).
      return rpcError(
        405,
        RPC_METHOD_NOT_ALLOWED,
        `${request.method} is not supported: this endpoint is stateless, use POST`,
        {
          Allow: 'POST',
        },
      );
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
    const body = await bodyOf(request);
    const posted = postedConfirmation(body.parsed);
    if (posted) return takePostedAnswer(principal, svcId, posted);
    // The SDK's own routing rule (a body that claims the 2026-07-28 envelope is modern, and so is
    // a header naming it), so the two legs can never disagree with what the SDK would do itself.
    const leg: Leg =
      body.parsed === undefined
        ? 'older'
        : (plainLeg(request, body.parsed) ?? ((await isLegacyRequest(request, body.parsed)) ? 'older' : 'stateless'));
    const caller: McpCaller = {
      principal,
      svcId,
      protocolVersion: request.headers.get('mcp-protocol-version'),
      turn: state?.turn,
      era: leg,
      elicitation: sessionElicitation(request.headers.get('mcp-session-id')),
      signal: request.signal,
    };
    const answer =
      leg === 'older' ? await serveLegacy(request, body, caller) : await serveModern(request, body.parsed, caller);
    const headers = new Headers(answer.headers);
    const sessionId =
      leg === 'older' && answer.status === 200 && elicitationSessionId(elicitationAtInitialize(body.parsed));
    if (sessionId) headers.set('mcp-session-id', sessionId);
    // A stream (a 2025 tools/call that may ask its user) goes out as it is written.
    if (headers.get('content-type')?.startsWith('text/event-stream'))
      return new Response(answer.body, { status: answer.status, headers });
    // The SDK answers with the platform's Response; the server writes its own kind much faster.
    // Nothing is closed: in stateless JSON mode every response is complete here, no stream or timer
    // is left, and closing would abort the finished handler and build an error for nothing.
    return new Response(answer.body === null ? null : await answer.text(), { status: answer.status, headers });
  }

  /**
   * 2025-11-25: a client's response to a confirmation question, posted on its own to whichever
   * process: kept for the call waiting on it (202, as the transport answers a posted response), or
   * a 400 saying why not; never given to the SDK, whose per-request server did not ask it.
   */
  async function takePostedAnswer(
    principal: AgentPrincipal,
    svcId: string,
    answer: { id: string; action: ElicitationAction },
  ): Promise<Response> {
    if (await mcp.postConfirmation(principal, svcId, answer)) return new Response(null, { status: 202 });
    return rpcError(
      400,
      ProtocolErrorCode.InvalidRequest,
      `Confirmation ${answer.id} is not open to this answer: it was answered already, expired, or is not this agent's`,
    );
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
            ? rpcError(503, RPC_UNAVAILABLE, serviceUnavailable().message, {
                'Retry-After': String(DATABASE_RETRY_AFTER_SECONDS),
              })
            : rpcError(500, ProtocolErrorCode.InternalError, 'An internal error occurred'),
        );
      }
    },
  };
}
