import type { Deps } from '../../deps.js';
import type { NetworkAccess } from '../../lib/address-policy.js';
import { SecretUnavailableError } from '../../lib/secret-box.js';
import type { ConnectionRow } from './tool-connections.store.js';
import { type AuthorizationServer, type RegisteredClient, revokeToken } from './upstream-oauth.js';

/**
 * The revocation of a connection's tokens at its upstream's authorization server (RFC 7009), once
 * the gateway has forgotten them: at once when a user revokes a connection, in the background
 * after the commit when a tool or a user takes its connections with it, or when new tokens turn
 * out to be no one's.
 */

/** Revocations at upstreams at once, when a tool or a user takes many connections with it. */
const REVOCATION_CONCURRENCY = 4;

/** A token held, with what revoking it at its server takes. */
export interface Revocable {
  connectionId: string;
  as: AuthorizationServer;
  client: RegisteredClient;
  access: NetworkAccess;
  accessToken: string | null;
  refreshToken: string | null;
}

/** Runs `work` over `items`, `limit` at a time. */
async function eachLimited<T>(items: readonly T[], limit: number, work: (item: T) => Promise<void>): Promise<void> {
  const queue = [...items];
  const workers = Array.from({ length: Math.min(limit, queue.length) }, async () => {
    for (let item = queue.shift(); item !== undefined; item = queue.shift()) await work(item);
  });
  await Promise.all(workers);
}

/**
 * Revoking connections' tokens at their servers; `revoking` holds the revocations under way in the
 * background, for `close` to wait for.
 */
export function createConnectionRevocation(
  { secrets, logger }: Pick<Deps, 'secrets' | 'logger'>,
  revoking: Set<Promise<void>>,
) {
  /** What revoking a connection's tokens at its server takes; undefined when it holds none. */
  function revocableOf(
    row: ConnectionRow,
    client: RegisteredClient | undefined,
    access: NetworkAccess,
  ): Revocable | undefined {
    if (!row.access_token && !row.refresh_token) return undefined;
    if (!client || !row.authorization_server) return undefined;
    try {
      return {
        connectionId: row.id,
        as: row.authorization_server as unknown as AuthorizationServer,
        client,
        access,
        accessToken: row.access_token && secrets.open(row.access_token),
        refreshToken: row.refresh_token && secrets.open(row.refresh_token),
      };
    } catch (error) {
      if (!(error instanceof SecretUnavailableError)) throw error;
      logger.warn({ connection_id: row.id, reason: error.message }, 'tool connection tokens not revoked upstream');
      return undefined;
    }
  }

  /**
   * Revokes the tokens at their server (RFC 7009), the refresh token first (servers end the grant
   * with it); best effort: a failure is logged, the gateway has forgotten them either way.
   */
  async function revokeAtUpstream(revocable: Revocable): Promise<void> {
    const held = [
      [revocable.refreshToken, 'refresh_token'],
      [revocable.accessToken, 'access_token'],
    ] as const;
    for (const [token, tokenTypeHint] of held) {
      if (!token) continue;
      const revoked = await revokeToken(revocable.as, revocable.client, { token, tokenTypeHint }, revocable.access);
      if (!revoked.ok)
        logger.warn(
          { connection_id: revocable.connectionId, token_type: tokenTypeHint, reason: revoked.message },
          'revoking a tool connection’s token at its authorization server failed',
        );
      else if (!revoked.value.revoked) return;
    }
  }

  /** Revocations after a commit, in the background; `close` waits for them. */
  function revokeLater(revocables: readonly Revocable[]): void {
    if (!revocables.length) return;
    const task = eachLimited(revocables, REVOCATION_CONCURRENCY, revokeAtUpstream)
      .catch((error) => logger.warn({ err: error }, 'revoking tool connections failed'))
      .finally(() => revoking.delete(task));
    revoking.add(task);
  }

  return { revocableOf, revokeAtUpstream, revokeLater };
}

export type ConnectionRevocation = ReturnType<typeof createConnectionRevocation>;
