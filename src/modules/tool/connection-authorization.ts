import { randomBytes, timingSafeEqual } from 'node:crypto';
import type { Deps } from '../../deps.js';
import { sqlConnectionOf } from '../../db/prisma-sql.js';
import type { Tool } from '../../generated/prisma/client.js';
import { sha256Hex } from '../../lib/hash.js';
import { permissions } from '../../authz/authz.js';
import type { Actor } from '../audit/audit-events.js';
import { recordAudit } from '../audit/audit.service.js';
import type { UserService } from '../user/user.service.js';
import type { ConnectionClients } from './connection-clients.js';
import type { ConnectionRevocation } from './connection-revocation.js';
import type { ConnectionSecrets } from './connection-secrets.js';
import { CONSOLE_TOOLS_PATH, oauthAuthOf, snapshotOf, UpstreamAuthorizationUnavailable } from './tool-connections.js';
import {
  bindBrowser,
  lockConnection,
  noteConnectionError,
  storeConnected,
  takeAuthorization,
} from './tool-connections.store.js';
import { findToolById } from './tool.store.js';
import { type AuthorizationServer, finishAuthorization } from './upstream-oauth.js';

/**
 * The browser's side of connecting a tool: `/oauth/upstream/start` binds the authorization that
 * `POST …/connections` began (tool-connections.service.ts) to the browser that opens it and sends
 * it on to the authorization server; `/oauth/upstream/callback` takes the server's answer once,
 * from that browser, exchanges the code and keeps the tokens, sealed.
 */

const MAX_SUBJECT_LENGTH = 255;
const BROWSER_SECRET_PATTERN = /^[A-Za-z0-9_-]{43}$/;
const STATE_PATTERN = /^[A-Za-z0-9_-]{16,128}$/;

/** Where `/oauth/upstream/start` sends the browser, with the cookie that binds it; or why not. */
export type UpstreamStart = { redirect: string; browserSecret: string } | { refused: string };

const random = () => randomBytes(32).toString('base64url');
const sameHash = (a: string, b: string) =>
  a.length === b.length && timingSafeEqual(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8'));

/**
 * The account the tokens are for, when the server says: the `sub` of an access token that is a
 * JWT of this issuer (RFC 9068). Informational (shown, audited); the gateway verifies nothing with
 * it, and an opaque token leaves it unknown.
 */
function subjectOf(accessToken: string, issuer: string): string | null {
  const parts = accessToken.split('.');
  if (parts.length !== 3) return null;
  try {
    const claims = JSON.parse(Buffer.from(parts[1], 'base64url').toString('utf8')) as Record<string, unknown>;
    return claims.iss === issuer && typeof claims.sub === 'string' && claims.sub.length <= MAX_SUBJECT_LENGTH
      ? claims.sub
      : null;
  } catch {
    return null;
  }
}

interface AuthorizationCollaborators {
  users: Pick<UserService, 'byIds'>;
  /** Told of each connection made (not awaited): an mcp tool's definitions can be read now. */
  connected: (tool: Tool, actor: Actor) => void;
  clients: Pick<ConnectionClients, 'redirectUri' | 'accessOf' | 'clientOfTokens'>;
  sealed: Pick<ConnectionSecrets, 'open' | 'sealTokens'>;
  revocation: Pick<ConnectionRevocation, 'revocableOf' | 'revokeLater'>;
}

/** `start` and `callback`, with what the service hands them: its clients, secrets and revocation. */
export function createConnectionAuthorization(
  { db, logger }: Pick<Deps, 'db' | 'logger'>,
  {
    users,
    connected,
    clients: { redirectUri, accessOf, clientOfTokens },
    sealed: { open, sealTokens },
    revocation: { revocableOf, revokeLater },
  }: AuthorizationCollaborators,
) {
  /**
   * `GET /oauth/upstream/start?state=…`: binds the authorization to this browser (the first to
   * open it) with a cookie, and sends it to the authorization server. A browser that already has
   * the cookie keeps it, so that several authorizations can be under way in one browser.
   */
  async function start(state: string | undefined, browserCookie: string | undefined): Promise<UpstreamStart> {
    const refused = {
      refused:
        'This connection link is unknown, has expired (links last 10 minutes) or was already opened: start again from the console',
    };
    if (!state || !STATE_PATTERN.test(state)) return refused;
    const browserSecret = browserCookie && BROWSER_SECRET_PATTERN.test(browserCookie) ? browserCookie : random();
    const requestUrl = await bindBrowser(db.sql, sha256Hex(state), sha256Hex(browserSecret));
    if (!requestUrl) return refused;
    const target = new URL(requestUrl);
    target.searchParams.set('state', state);
    return { redirect: target.href, browserSecret };
  }

  /**
   * `GET /oauth/upstream/callback?code&state[&iss]`: the authorization server's answer, taken once
   * by its state, from the browser that opened the authorization, checked (`iss` against the
   * server this authorization went to, never one the callback names) and exchanged. Answers where
   * the browser goes: the console's tool page, saying connected or why not.
   */
  async function callback(search: string, browserSecret: string | undefined): Promise<{ location: string }> {
    const parameters = new URLSearchParams(search);
    const toolsPage = (reason: string) => ({
      location: `${CONSOLE_TOOLS_PATH}?${new URLSearchParams({ result: 'error', reason })}`,
    });
    const states = parameters.getAll('state');
    if (states.length !== 1) return toolsPage('invalid_request');
    const taken = await takeAuthorization(db.sql, sha256Hex(states[0]));
    if (!taken) return toolsPage('unknown_state');
    const page = (result: 'connected' | 'error', reason?: string) => ({
      location: `${CONSOLE_TOOLS_PATH}/${encodeURIComponent(taken.tool_id)}?${new URLSearchParams({
        connection: taken.connection_id,
        result,
        ...(reason ? { reason } : {}),
      })}`,
    });
    const fail = async (reason: string, message: string) => {
      await noteConnectionError(db.sql, taken.connection_id, message);
      logger.warn(
        { connection_id: taken.connection_id, tool_id: taken.tool_id, reason },
        `tool connection refused: ${message}`,
      );
      return page('error', reason);
    };
    if (!taken.live) return fail('expired', 'The authorization took longer than 10 minutes; connect again');
    if (!taken.browser_hash || !browserSecret || !sameHash(sha256Hex(browserSecret), taken.browser_hash))
      return fail(
        'browser_mismatch',
        'The authorization came back to another browser than the one that opened it; connect again',
      );
    const tool = await findToolById(db.prisma, taken.tool_id);
    const auth = tool && oauthAuthOf(tool);
    if (!tool || !auth) return fail('tool_changed', 'The tool no longer authenticates with an OAuth connection');
    const [user] = await users.byIds(tool.orgId, [taken.user_id]);
    const managers: readonly string[] = permissions['tool_connection:manage'].roles;
    if (!user || (auth.connection === 'org' && !managers.includes(user.role)))
      return fail('forbidden', 'The user who started the authorization may no longer connect the tool');
    const client = await clientOfTokens(db.sql, tool, taken);
    if (!client)
      return fail('client_changed', "The tool's OAuth client changed during the authorization; connect again");
    const as = taken.authorization_server as unknown as AuthorizationServer;
    const access = accessOf(tool);
    let codeVerifier: string;
    try {
      codeVerifier = open(taken.code_verifier, taken.connection_id);
    } catch (error) {
      if (!(error instanceof UpstreamAuthorizationUnavailable)) throw error;
      return fail('secret_unavailable', error.message);
    }
    const check = {
      callbackUrl: `${redirectUri}?${parameters}`,
      expectedState: states[0],
      codeVerifier,
      redirectUri,
      resource: taken.resource,
    };
    const tokens = await finishAuthorization(as, client, check, access);
    if (!tokens.ok) return fail(tokens.error, tokens.message);
    const actor: Actor = { type: 'user', id: user.id, label: user.email };
    const replaced = await db.prisma.$transaction(async (tx) => {
      const sql = sqlConnectionOf(tx);
      const before = await lockConnection(sql, taken.connection_id);
      if (!before) return undefined;
      const previousClient = await clientOfTokens(sql, tool, before);
      const connected = await storeConnected(sql, before.id, {
        ...sealTokens(tokens.value, auth.scopes ?? undefined),
        issuer: taken.issuer,
        clientId: taken.client_id,
        registration: taken.registration,
        authorizationServer: taken.authorization_server,
        resource: taken.resource,
        subject: subjectOf(tokens.value.access_token, as.issuer),
      });
      await recordAudit(tx, tool.orgId, actor, {
        action: 'tool.connection_created',
        targetType: 'tool_connection',
        targetId: connected.id,
        ...(before.status === 'connected' ? { before: snapshotOf(before, tool) } : {}),
        after: snapshotOf(connected, tool),
      });
      return { revocable: revocableOf(before, previousClient, access) };
    });
    if (!replaced) {
      // Revoked with its tool or user meanwhile: the new tokens are not kept, so they go too.
      revokeLater([
        {
          connectionId: taken.connection_id,
          as,
          client,
          access,
          accessToken: tokens.value.access_token,
          refreshToken: tokens.value.refresh_token ?? null,
        },
      ]);
      return page('error', 'connection_removed');
    }
    // A connection authorized again: the grant it held before is no longer used.
    if (replaced.revocable) revokeLater([replaced.revocable]);
    connected(tool, actor);
    return page('connected');
  }

  return { start, callback };
}
