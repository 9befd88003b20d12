import { SignJWT, decodeProtectedHeader, jwtVerify, type JWTPayload } from 'jose';
import type { Deps } from '../../deps.js';
import { FieldErrors, notFound } from '../../errors.js';
import type { SqlConnection } from '../../db/sql.js';
import type { Prisma } from '../../generated/prisma/client.js';
import { actorOf } from '../audit/audit-events.js';
import { recordAudit } from '../audit/audit.service.js';
import { principalName, type Principal } from '../../authz/authz.js';
import { randomId } from '../../lib/ids.js';
import type { ManifestService } from '../manifest/manifest.service.js';
import {
  findToken,
  insertToken,
  markTokenRevoked,
  revokeTokensOfAgent,
  tokensOf,
  useToken,
} from './capability-token.store.js';

/**
 * Capability tokens: EdDSA JWTs (`typ: cap+jwt`, audience `agent-gateway`) that narrow what an
 * agent may do to `cap` ∩ the manifest's approved capabilities. Signed with the service's
 * `capability` key (public at /.well-known/jwks.json); the database row carries revocation and uses.
 */

export const CAPABILITY_TOKEN_TYPE = 'cap+jwt';
export const CAPABILITY_AUDIENCE = 'agent-gateway';
export const TOKEN_ISSUER = 'agent-gateway';
const MIN_LIFETIME = 60;
const MAX_LIFETIME = 2_592_000;

export interface IssueTokenInput {
  svc_id: string;
  capabilities: string[];
  expires_in_seconds: number;
  max_uses?: number | null;
}

export type TokenCheck =
  | { ok: true; tokenId: string; capabilities: string[]; maxUses: number | null }
  | { ok: false; message: string };

export function createCapabilityTokenService(
  { db, keys }: Deps,
  { manifests }: { manifests: Pick<ManifestService, 'current'> },
) {
  async function issue(orgId: string, input: IssueTokenInput, actor: Principal) {
    const errors = new FieldErrors();
    const lifetime = input.expires_in_seconds;
    if (!Number.isInteger(lifetime) || lifetime < MIN_LIFETIME || lifetime > MAX_LIFETIME) {
      errors.add('expires_in_seconds', `must be an integer from ${MIN_LIFETIME} to ${MAX_LIFETIME}`);
    }
    if (input.max_uses != null && (!Number.isInteger(input.max_uses) || input.max_uses < 1)) {
      errors.add('max_uses', 'must be a positive integer');
    }
    if (!input.capabilities.length) errors.add('capabilities', 'must list at least one capability');
    const current = await manifests.current(orgId, input.svc_id);
    const manifest = current?.status === 'active' ? current : null;
    if (!manifest) errors.add('svc_id', 'has no active manifest');
    input.capabilities.forEach((capability, i) => {
      if (manifest && !manifest.approvedCapabilities.includes(capability)) {
        errors.add(`capabilities[${i}]`, `"${capability}" is not approved for ${input.svc_id}`);
      }
    });
    errors.throwIfAny();

    const key = await keys.activeKey('capability');
    const tokenId = randomId('cap', 16);
    const now = Math.floor(Date.now() / 1000);
    const expiresAt = new Date((now + lifetime) * 1000);
    const capabilities = [...new Set(input.capabilities)];
    const token = await new SignJWT({
      org_id: orgId,
      cap: capabilities,
      ...(input.max_uses != null ? { max_uses: input.max_uses } : {}),
    })
      .setProtectedHeader({ alg: 'EdDSA', typ: CAPABILITY_TOKEN_TYPE, kid: key.kid })
      .setIssuer(TOKEN_ISSUER)
      .setSubject(input.svc_id)
      .setAudience(CAPABILITY_AUDIENCE)
      .setIssuedAt(now)
      .setNotBefore(now)
      .setExpirationTime(now + lifetime)
      .setJti(tokenId)
      .sign(key.privateKey);
    const row = await db.prisma.$transaction(async (tx) => {
      const created = await insertToken(tx, {
        id: tokenId,
        orgId,
        svcId: input.svc_id,
        capabilities,
        maxUses: input.max_uses ?? null,
        expiresAt,
        createdBy: principalName(actor),
      });
      await recordAudit(tx, orgId, actorOf(actor), {
        action: 'capability_token.issued',
        targetType: 'capability_token',
        targetId: tokenId,
        after: {
          svc_id: input.svc_id,
          capabilities,
          expires_at: expiresAt.toISOString(),
          max_uses: input.max_uses ?? null,
        },
      });
      return created;
    });
    return { ...row, token };
  }

  async function list(orgId: string) {
    const items = await tokensOf(db.prisma, orgId);
    return { items, total: items.length };
  }

  /** Revokes every live token of an agent, in the caller's transaction (an agent's deactivation). Returns how many. */
  function revokeAllOfAgent(tx: Prisma.TransactionClient, orgId: string, svcId: string): Promise<number> {
    return revokeTokensOfAgent(tx, orgId, svcId);
  }

  async function revoke(orgId: string, tokenId: string, actor: Principal) {
    return db.prisma.$transaction(async (tx) => {
      const existing = await findToken(tx, orgId, tokenId);
      if (!existing) throw notFound('Capability token');
      const revoked = existing.revokedAt ? existing : await markTokenRevoked(tx, tokenId);
      if (!existing.revokedAt) {
        await recordAudit(tx, orgId, actorOf(actor), {
          action: 'capability_token.revoked',
          targetType: 'capability_token',
          targetId: tokenId,
          before: {
            svc_id: existing.svcId,
            capabilities: existing.capabilities,
            expires_at: existing.expiresAt.toISOString(),
            max_uses: existing.maxUses,
          },
        });
      }
      return revoked;
    });
  }

  /** Signature, header, claims and the stored row (revocation, expiry, uses so far). */
  async function check(token: string, orgId: string, svcId: string): Promise<TokenCheck> {
    let kid: string | undefined;
    try {
      const header = decodeProtectedHeader(token);
      if (header.alg !== 'EdDSA') return { ok: false, message: 'The capability token must be signed with EdDSA' };
      kid = header.kid;
    } catch {
      return { ok: false, message: 'The capability token is not a JWT' };
    }
    const key = kid ? await keys.byId(kid) : undefined;
    if (key?.purpose !== 'capability')
      return { ok: false, message: 'The capability token was not signed by this gateway' };
    let payload: JWTPayload;
    try {
      ({ payload } = await jwtVerify(token, key.publicKey, {
        algorithms: ['EdDSA'],
        typ: CAPABILITY_TOKEN_TYPE,
        audience: CAPABILITY_AUDIENCE,
        issuer: TOKEN_ISSUER,
        requiredClaims: ['sub', 'jti', 'exp', 'cap'],
      }));
    } catch (error) {
      return { ok: false, message: `The capability token is invalid: ${(error as Error).message}` };
    }
    if (payload.org_id !== orgId) return { ok: false, message: 'The capability token belongs to another organization' };
    if (payload.sub !== svcId)
      return { ok: false, message: `The capability token was issued for agent "${payload.sub}"` };
    const row = await findToken(db.prisma, orgId, payload.jti!);
    if (!row) return { ok: false, message: 'The capability token is unknown' };
    if (row.revokedAt) return { ok: false, message: 'The capability token has been revoked' };
    if (row.expiresAt.getTime() <= Date.now()) return { ok: false, message: 'The capability token has expired' };
    if (row.maxUses !== null && row.uses >= row.maxUses) {
      return { ok: false, message: `The capability token has been used ${row.maxUses} times, its maximum` };
    }
    return { ok: true, tokenId: row.id, capabilities: row.capabilities, maxUses: row.maxUses };
  }

  /** Counts one use inside the decision's transaction; false when the token was used up meanwhile. */
  function use(tx: SqlConnection, tokenId: string): Promise<boolean> {
    return useToken(tx, tokenId);
  }

  return { issue, list, revoke, revokeAllOfAgent, check, use };
}

export type CapabilityTokenService = ReturnType<typeof createCapabilityTokenService>;
