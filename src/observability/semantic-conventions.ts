/**
 * The OpenTelemetry semantic conventions the service uses that are still in development (GenAI,
 * MCP, JSON-RPC), copied from `@opentelemetry/semantic-conventions/incubating` 1.45 as its README
 * asks of runtime code: that entry point may change its exports in a minor version. Importing it
 * also held every incubating definition's source in the heap (about 2 MB). The stable ones come
 * from the package's main entry point.
 */
export const ATTR_GEN_AI_OPERATION_NAME = 'gen_ai.operation.name' as const;
export const ATTR_GEN_AI_TOOL_NAME = 'gen_ai.tool.name' as const;
export const GEN_AI_OPERATION_NAME_VALUE_EXECUTE_TOOL = 'execute_tool' as const;
export const ATTR_MCP_METHOD_NAME = 'mcp.method.name' as const;
export const ATTR_MCP_PROTOCOL_VERSION = 'mcp.protocol.version' as const;
export const ATTR_JSONRPC_REQUEST_ID = 'jsonrpc.request.id' as const;
