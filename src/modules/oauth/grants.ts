import type { Deps } from '../../deps.js';
import { notFound } from '../../errors.js';
import type { OAuthGrant, Prisma } from '../../generated/prisma/client.js';
import { actorOf, type Actor, type OAuthGrantSnapshot } from '../audit/audit-events.js';
import { recordAudit } from '../audit/audit.service.js';
import { bumpConfigVersion } from '../../lib/config-cache.js';
import { principalName, type OAuthGrantPrincipal, type Principal } from '../../authz/authz.js';
import { mcpResourceUrl } from './oauth-metadata.js';
import { kidOf, verifyAccessToken, type VerifiedAccessToken } from './oauth-tokens.js';
import {
  findGrant,
  revokeGrants,
  standingGrants,
  touchGrant,
  type GrantRow,
  type RevokedGrant,
} from './oauth.store.js';

/**
 * OAuth grants (docs/decisions/0047-mcp-oauth.md): listing and revoking them, and the check of an
 * access token at `/mcp/{svc_id}`. Revocation is a database write with an audit entry, and the
 * audit entry bumps the config version: every process drops its cached grants within a poll of
 * the config cache (250 ms), so a revoked grant's access tokens stop working everywhere within a
 * second, without a database read per request.
 */

/** Verified tokens kept per process, so a token's signature is checked once, not on every call. */
const MAX_VERIFIED_TOKENS = 10_000;
/** last_used_at is written at most this often per grant and process. */
const LAST_USED_INTERVAL_MS = 60_000;

export const snapshotOfGrant = (grant: RevokedGrant): OAuthGrantSnapshot => ({
  svc_id: grant.svc_id,
  client_id: grant.client_id,
  client_name: grant.client_name,
  redirect_uri: grant.redirect_uri,
  scope: grant.scope,
  approved_by: grant.approved_by,
});

/** The principal of an MCP client acting under its grant (audit actor, approvals, policy facts). */
export const grantPrincipal = (
  grant: Pick<GrantRow, 'id' | 'org_id' | 'svc_id' | 'client_id' | 'client_name' | 'scope' | 'user_id'>,
): OAuthGrantPrincipal => ({
  type: 'oauth_grant',
  grantId: grant.id,
  orgId: grant.org_id,
  svcId: grant.svc_id,
  clientId: grant.client_id,
  clientLabel: grant.client_name ?? grant.client_id,
  scopes: grant.scope.split(' '),
  userId: grant.user_id,
});

/** An access token the gateway refuses, and why (the 401's `error_description`). */
export interface RefusedToken {
  refused: string;
}

export function createGrants({ db, env, cache, keys, logger }: Pick<Deps, 'db' | 'env' | 'cache' | 'keys' | 'logger'>) {
  const verified = new Map<string, VerifiedAccessToken>();
  const lastTouched = new Map<string, number>();

  /** Revokes and audits, in the caller's transaction; how many grants it revoked. */
  async function revokeAudited(
    tx: Prisma.TransactionClient,
    orgId: string,
    where: Parameters<typeof revokeGrants>[1],
    actor: Actor,
    reason: string,
  ): Promise<RevokedGrant[]> {
    const revoked = await revokeGrants(tx, where, actor.label, reason);
    for (const grant of revoked) {
      await recordAudit(tx, orgId, actor, {
        action: 'oauth.grant_revoked',
        targetType: 'oauth_grant',
        targetId: grant.id,
        before: snapshotOfGrant(grant),
        reason,
      });
      await bumpConfigVersion(tx);
    }
    return revoked;
  }

  /** A grant as the gateway sees it, cached per process until the next audited write anywhere. */
  const standing = (grantId: string): Promise<GrantRow | undefined> =>
    cache.get(`oauth-grant:${grantId}`, () => findGrant(db.sql, grantId));

  /** The signature, type, issuer and expiry of an access token, checked once per process and token. */
  async function checkedSignature(token: string): Promise<VerifiedAccessToken | RefusedToken> {
    const known = verified.get(token);
    if (known && known.exp * 1000 > Date.now()) return known;
    const kid = kidOf(token);
    const key = kid ? await keys.byId(kid) : undefined;
    if (key?.purpose !== 'oauth') return { refused: 'The access token is invalid' };
    const check = await verifyAccessToken(token, key.publicKey, env.publicUrl);
    if (!check.ok) return { refused: check.reason };
    if (verified.size >= MAX_VERIFIED_TOKENS) verified.delete(verified.keys().next().value!);
    verified.set(token, check.claims);
    return check.claims;
  }

  function touch(grantId: string): void {
    const now = Date.now();
    if (now - (lastTouched.get(grantId) ?? 0) < LAST_USED_INTERVAL_MS) return;
    if (lastTouched.size >= MAX_VERIFIED_TOKENS) lastTouched.clear();
    lastTouched.set(grantId, now);
    touchGrant(db.sql, grantId).catch((error: unknown) =>
      logger.warn({ err: error, grant_id: grantId }, 'could not record OAuth grant use'),
    );
  }

  return {
    standing,

    /**
     * The principal of an access token presented at `/mcp/{svcId}`, or why it is refused: it must
     * verify, name exactly this endpoint as its audience, and its grant must stand.
     */
    async authenticate(token: string, svcId: string): Promise<OAuthGrantPrincipal | RefusedToken> {
      const claims = await checkedSignature(token);
      if ('refused' in claims) return claims;
      if (claims.aud !== mcpResourceUrl(env.publicUrl, svcId)) {
        return {
          refused:
            'The access token is for another resource: it is accepted only at the MCP endpoint it was issued for',
        };
      }
      const grant = await standing(claims.grant_id);
      if (!grant || grant.revoked) return { refused: 'The grant of this access token has been revoked' };
      if (grant.org_id !== claims.org_id || grant.svc_id !== svcId || grant.client_id !== claims.client_id) {
        return { refused: 'The access token is invalid' };
      }
      touch(grant.id);
      return grantPrincipal(grant);
    },

    /** The agent's standing grants, newest first. */
    list: (orgId: string, svcId: string): Promise<OAuthGrant[]> => standingGrants(db.prisma, orgId, svcId),

    /** Revokes one standing grant of the agent; 404 when there is none (of concurrent revocations one wins). */
    async revoke(orgId: string, svcId: string, grantId: string, principal: Principal): Promise<void> {
      const revoked = await db.prisma.$transaction((tx) =>
        revokeAudited(
          tx,
          orgId,
          { grantId, orgId, svcId },
          actorOf(principal),
          `revoked by ${principalName(principal)}`,
        ),
      );
      if (revoked.length === 0) throw notFound('Grant');
    },

    /** Every standing grant of the agent, in the caller's transaction (the agent's deactivation). */
    async revokeAllOfAgent(
      tx: Prisma.TransactionClient,
      orgId: string,
      svcId: string,
      principal: Principal,
      reason: string,
    ): Promise<number> {
      return (await revokeAudited(tx, orgId, { orgId, svcId }, actorOf(principal), reason)).length;
    },

    /**
     * Revokes a grant for what happened to its tokens (a code or refresh token used twice, the
     * client's own RFC 7009 request); true when this call revoked it.
     */
    async revokeForTokens(grant: Pick<GrantRow, 'id' | 'org_id'>, actor: Actor, reason: string): Promise<boolean> {
      const revoked = await db.prisma.$transaction((tx) =>
        revokeAudited(tx, grant.org_id, { grantId: grant.id }, actor, reason),
      );
      return revoked.length > 0;
    },
  };
}

export type Grants = ReturnType<typeof createGrants>;
