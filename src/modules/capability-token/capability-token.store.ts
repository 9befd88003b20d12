import type { SqlConnection } from '../../db/sql.js';
import type { CapabilityToken, Prisma, PrismaClient } from '../../generated/prisma/client.js';

/** The capability-token module's statements: the token rows that carry revocation and uses. */

type Tx = Prisma.TransactionClient;

export interface NewTokenRow {
  id: string;
  orgId: string;
  svcId: string;
  capabilities: string[];
  maxUses: number | null;
  expiresAt: Date;
  createdBy: string;
}

/**
 * Counts one use of a live token in the gateway's commit; false when it was used up, revoked or
 * expired meanwhile (the condition and the increment are one statement, so concurrent uses of a
 * token with `max_uses` allow exactly that many).
 */
export async function useToken(tx: SqlConnection, tokenId: string): Promise<boolean> {
  const rows = await tx.query(
    `UPDATE capability_tokens SET uses = uses + 1
     WHERE id = $1 AND revoked_at IS NULL AND expires_at > now() AND (max_uses IS NULL OR uses < max_uses)
     RETURNING id`,
    [tokenId],
  );
  return rows.length === 1;
}

export function insertToken(tx: Tx, row: NewTokenRow): Promise<CapabilityToken> {
  return tx.capabilityToken.create({ data: row });
}

/** The org's tokens, newest first. */
export function tokensOf(prisma: PrismaClient, orgId: string): Promise<CapabilityToken[]> {
  return prisma.capabilityToken.findMany({ where: { orgId }, orderBy: [{ createdAt: 'desc' }] });
}

/** The org's token, or null; in a transaction or not. */
export function findToken(db: Tx, orgId: string, tokenId: string): Promise<CapabilityToken | null> {
  return db.capabilityToken.findFirst({ where: { id: tokenId, orgId } });
}

export function markTokenRevoked(tx: Tx, tokenId: string): Promise<CapabilityToken> {
  return tx.capabilityToken.update({ where: { id: tokenId }, data: { revokedAt: new Date() } });
}

/** Revokes every live token of the agent; returns how many. */
export async function revokeTokensOfAgent(tx: Tx, orgId: string, svcId: string): Promise<number> {
  const revoked = await tx.capabilityToken.updateMany({
    where: { orgId, svcId, revokedAt: null },
    data: { revokedAt: new Date() },
  });
  return revoked.count;
}
