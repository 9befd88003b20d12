import type { connectors } from './tool.service.js';

/**
 * A tool's `config` as OpenAPI schemas, one per connector kind (GraphQL takes and shows it as JSON).
 * As read, write-only values show as "[redacted]"; as written, they are given in full (or as
 * "[redacted]" to keep the stored one). The kinds tell themselves apart by their required keys:
 * an http config always shows `secret`, an mcp config `tool`, a mock config neither.
 */

const described = {
  description: {
    type: 'string',
    maxLength: 1024,
    description: 'What the tools of this connector do (MCP tools/list).',
  },
  input_schema: {
    type: 'object',
    additionalProperties: true,
    description: 'JSON Schema (type object) of the params (MCP tools/list).',
  },
};
const scopes = {
  type: 'array',
  items: { type: 'string', maxLength: 200 },
  maxItems: 50,
  nullable: true,
  description: "OAuth scopes to ask for; the upstream's advertised ones when null.",
};
const clientSecret = { type: 'string', nullable: true, description: 'Write-only: read as "[redacted]".' };
/** `config.auth` (tool-auth.ts): how the gateway authenticates to the upstream. */
const auth = {
  oneOf: [
    {
      type: 'object',
      title: 'headers',
      description: 'The static `headers` alone (the default).',
      required: ['type'],
      properties: { type: { type: 'string', enum: ['headers'] } },
      additionalProperties: false,
    },
    {
      type: 'object',
      title: 'oauth',
      description:
        'An OAuth connection the gateway holds, one for the organization (`org`) or one per user (`user`); ' +
        'the gateway registers itself at the authorization server unless `client_id` is given.',
      required: ['type', 'connection'],
      properties: {
        type: { type: 'string', enum: ['oauth'] },
        connection: { type: 'string', enum: ['org', 'user'] },
        scopes,
        client_id: { type: 'string', maxLength: 255, nullable: true },
        client_secret: clientSecret,
      },
      additionalProperties: false,
    },
    {
      type: 'object',
      title: 'client_credentials',
      description: 'A client-credentials grant for machine APIs.',
      required: ['type', 'token_url', 'client_id'],
      properties: {
        type: { type: 'string', enum: ['client_credentials'] },
        token_url: { type: 'string', format: 'uri', maxLength: 2048 },
        client_id: { type: 'string', maxLength: 255 },
        client_secret: clientSecret,
        scopes,
        audience: { type: 'string', maxLength: 2048, nullable: true },
      },
      additionalProperties: false,
    },
  ],
};
const endpoint = {
  url: { type: 'string', format: 'uri', maxLength: 2048 },
  timeout_ms: { type: 'integer', minimum: 1, maximum: 60000, default: 10000 },
  allow_private_network: { type: 'boolean', default: false },
  headers: {
    type: 'object',
    additionalProperties: { type: 'string' },
    description: 'Values are write-only: read as "[redacted]".',
  },
  auth,
};
const secret = {
  type: 'string',
  description: 'HMAC-SHA256 signing secret, at least 16 characters; write-only: read as "[redacted]".',
};
const tool = {
  type: 'string',
  pattern: '^[A-Za-z0-9_.-]{1,128}$',
  description: "The upstream tool; the action's <action> part when null.",
};
const response = { description: 'What the mock returns as `result.data` (the action params when absent).' };

function kinds(read: boolean) {
  const nullable = (schema: Record<string, unknown>) => (read ? { ...schema, nullable: true } : schema);
  return {
    http: {
      type: 'object',
      title: 'http',
      required: read ? ['url', 'timeout_ms', 'allow_private_network', 'headers', 'auth', 'secret'] : ['url'],
      properties: { ...endpoint, secret: nullable(secret), ...described },
      additionalProperties: false,
    },
    mcp: {
      type: 'object',
      title: 'mcp',
      required: read ? ['url', 'timeout_ms', 'allow_private_network', 'headers', 'auth', 'tool'] : ['url'],
      properties: { ...endpoint, tool: { ...tool, nullable: true }, ...described },
      additionalProperties: false,
    },
    mock: { type: 'object', title: 'mock', properties: { response, ...described }, additionalProperties: false },
  } satisfies Record<(typeof connectors)[number], unknown>;
}

/** `config` as the API shows it: exactly one kind matches. */
export const toolConfigSchema = { oneOf: Object.values(kinds(true)) };

/** `config` as written: the kind is the `connector` beside it, so any of them may be given. */
export const toolConfigInputSchema = { anyOf: Object.values(kinds(false)) };
