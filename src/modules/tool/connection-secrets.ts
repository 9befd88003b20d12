import type { Deps } from '../../deps.js';
import type { SqlConnection } from '../../db/sql.js';
import { type SecretBox, SecretUnavailableError } from '../../lib/secret-box.js';
import { UpstreamAuthorizationUnavailable } from './tool-connections.js';
import { lockConnectionSecrets, type SealedTokens, updateConnectionSecrets } from './tool-connections.store.js';
import type { UpstreamTokens } from './upstream-oauth.js';

/**
 * The tool connections' secrets at rest: their tokens sealed as they are stored and opened as they
 * are used (a value this service's key cannot open is its connection's failure,
 * UpstreamAuthorizationUnavailable), and every sealed value sealed again with the current key
 * (`agent-gateway reencrypt`).
 */

const scopesOf = (tokens: UpstreamTokens, asked: string[] | undefined) =>
  tokens.scope !== undefined ? tokens.scope.split(' ').filter(Boolean) : (asked ?? []);

/**
 * Seals every connection token, registered client secret and pending code verifier not yet sealed
 * with the current key (`agent-gateway reencrypt`, in the caller's transaction); answers how many
 * rows it rewrote.
 */
export async function reencryptConnectionSecrets(conn: SqlConnection, secrets: SecretBox): Promise<number> {
  const stale = (await lockConnectionSecrets(conn)).filter((row) =>
    row.values.some((value) => value !== null && !secrets.isCurrent(value)),
  );
  for (const row of stale) {
    await updateConnectionSecrets(conn, {
      ...row,
      values: row.values.map((value) => (value === null ? null : secrets.reseal(value))),
    });
  }
  return stale.length;
}

/** A connection's tokens opened and sealed with this service's key (deps.secrets). */
export function createConnectionSecrets({ secrets, logger }: Pick<Deps, 'secrets' | 'logger'>) {
  /** A stored secret opened; a value this service's key cannot open is the connection's failure. */
  function open(stored: string, connectionId: string): string {
    try {
      return secrets.open(stored);
    } catch (error) {
      if (!(error instanceof SecretUnavailableError)) throw error;
      logger.error({ connection_id: connectionId, reason: error.message }, 'a tool connection’s secrets do not open');
      throw new UpstreamAuthorizationUnavailable(
        connectionId,
        "The connection's tokens cannot be decrypted with this service's KEY_ENCRYPTION_KEY",
        false,
      );
    }
  }

  function sealTokens(tokens: UpstreamTokens, asked?: string[]): SealedTokens {
    return {
      accessToken: secrets.seal(tokens.access_token),
      refreshToken: tokens.refresh_token ? secrets.seal(tokens.refresh_token) : null,
      expiresAt: tokens.expires_at !== undefined ? new Date(tokens.expires_at) : null,
      scopes: scopesOf(tokens, asked),
    };
  }

  return { open, sealTokens };
}

export type ConnectionSecrets = ReturnType<typeof createConnectionSecrets>;
