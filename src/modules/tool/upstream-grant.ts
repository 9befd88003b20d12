import type { Tool } from '../../generated/prisma/client.js';
import type { PrivateNetworks } from '../../lib/address-policy.js';
import { failure, type HttpToolConfig, type ToolCredentials, type ToolResult } from './connectors.js';
import { HEADERS_AUTH } from './tool-auth.js';
import { clientCredentialsToken, needsRefresh, type UpstreamTokens } from './upstream-oauth.js';

/**
 * What a request to a tool's upstream carries besides its body: the tool's static headers, and
 * for a grant the `Authorization` header of a token the gateway holds
 * (docs/decisions/0068-upstream-connections.md). A client-credentials token is asked for once
 * per process and tool, shared by the calls that need it meanwhile, and reused until a minute
 * before it expires; an upstream's 401 asks for a new one once (`renew`).
 */

/** How many tools' tokens a process keeps; past it, the longest unused goes (it is asked again when needed). */
const MAX_HELD_TOKENS = 10_000;

interface Held {
  /** What the token was asked with: a changed tool asks again. */
  version: string;
  tokens?: UpstreamTokens;
  pending?: Promise<OAuthAnswer>;
}

/** A failed call's result: what the agent gets when no token could be had. */
type Refusal = Extract<ToolResult, { success: false }>;
type OAuthAnswer = { ok: true; tokens: UpstreamTokens } | { ok: false; failure: Refusal };
export type UpstreamCredentials = { ok: true; credentials: ToolCredentials } | { ok: false; failure: Refusal };

const versionOf = (tool: Tool, config: HttpToolConfig) =>
  JSON.stringify([tool.updatedAt.getTime(), config.url, config.auth]);

/** The agent sees why the grant failed in the authorization server's words we chose, never a secret. */
const refusal = (message: string) => failure('TOOL_AUTHORIZATION_FAILED', message) as Refusal;
const grantFailure = (message: string) => refusal(`The tool's authorization server did not grant a token: ${message}`);

export function createUpstreamGrants({
  privateNetworks,
  now = Date.now,
}: {
  privateNetworks: PrivateNetworks;
  now?: () => number;
}) {
  const held = new Map<string, Held>();

  function keep(toolId: string, entry: Held): Held {
    held.delete(toolId);
    held.set(toolId, entry);
    if (held.size > MAX_HELD_TOKENS) held.delete(held.keys().next().value!);
    return entry;
  }

  async function ask(config: HttpToolConfig, clientSecret: string | null): Promise<OAuthAnswer> {
    const auth = config.auth;
    if (auth?.type !== 'client_credentials' || clientSecret === null) {
      return { ok: false, failure: grantFailure('the tool has no client secret') };
    }
    const answer = await clientCredentialsToken(
      {
        token_url: auth.token_url,
        client_id: auth.client_id,
        client_secret: clientSecret,
        ...(auth.scopes ? { scopes: auth.scopes } : {}),
        ...(auth.audience ? { audience: auth.audience } : {}),
      },
      { privateNetworks, allowPrivateNetwork: config.allow_private_network },
      { resource: config.url, now },
    );
    return answer.ok ? { ok: true, tokens: answer.value } : { ok: false, failure: grantFailure(answer.message) };
  }

  /** The tool's token: held while fresh, else asked for, one request at a time per tool. */
  async function tokenOf(tool: Tool, config: HttpToolConfig, clientSecret: string | null, renew: boolean) {
    const version = versionOf(tool, config);
    const current = held.get(tool.id);
    const usable = current?.version === version ? current : undefined;
    if (usable?.pending) return usable.pending;
    if (usable?.tokens && !renew && !needsRefresh(usable.tokens, now())) {
      keep(tool.id, usable);
      return { ok: true as const, tokens: usable.tokens };
    }
    const entry = keep(tool.id, { version });
    entry.pending = ask(config, clientSecret).then((answer) => {
      entry.pending = undefined;
      if (answer.ok) entry.tokens = answer.tokens;
      else if (held.get(tool.id) === entry) held.delete(tool.id);
      return answer;
    });
    return entry.pending;
  }

  /**
   * The credentials a request to the tool's upstream carries. `renew`: the upstream refused the
   * last token (401), so a held one is not used again.
   */
  async function credentialsFor(
    tool: Tool,
    credentials: ToolCredentials,
    { renew = false }: { renew?: boolean } = {},
  ): Promise<UpstreamCredentials> {
    const config = tool.config as unknown as HttpToolConfig;
    const auth = config.auth ?? HEADERS_AUTH;
    if (auth.type === 'headers') return { ok: true, credentials };
    if (auth.type === 'oauth') {
      return {
        ok: false,
        failure: refusal('The tool needs an OAuth connection, and it has none that works'),
      };
    }
    const answer = await tokenOf(tool, config, credentials.clientSecret, renew);
    if (!answer.ok) return answer;
    const headers = { ...credentials.headers, Authorization: `Bearer ${answer.tokens.access_token}` };
    return { ok: true, credentials: { ...credentials, headers } };
  }

  /** Whether a grant may answer a 401 with a new token (the static headers cannot). */
  const renewable = (tool: Tool) => {
    const auth = (tool.config as unknown as HttpToolConfig).auth;
    return auth !== undefined && auth.type !== 'headers';
  };

  return { credentialsFor, renewable };
}

export type UpstreamGrants = ReturnType<typeof createUpstreamGrants>;
