import type { SqlConnection } from '../../db/sql.js';
import type { Prisma } from '../../generated/prisma/client.js';

/** The API key module's statements. */

type Tx = Prisma.TransactionClient;

export function insertApiKey(tx: Tx, data: Prisma.ApiKeyUncheckedCreateInput) {
  return tx.apiKey.create({ data });
}

export function apiKeysOfOrg(prisma: Tx, orgId: string) {
  return prisma.apiKey.findMany({ where: { orgId }, orderBy: [{ createdAt: 'desc' }, { id: 'asc' }] });
}

export function countApiKeysOfOrg(prisma: Tx, orgId: string) {
  return prisma.apiKey.count({ where: { orgId } });
}

/** Deletes and returns the key in one statement; throws Prisma's not-found when it is gone. */
export function deleteApiKey(tx: Tx, orgId: string, keyId: string) {
  return tx.apiKey.delete({ where: { id: keyId, orgId } });
}

/** What verifying a presented key reads. */
export interface ApiKeyRow {
  id: string;
  org_id: string;
  key_prefix: string;
  scopes: string[];
  svc_ids: string[];
  user_id: string | null;
  expires_at: Date;
}

export async function findApiKeyByHash(sql: SqlConnection, keyHash: string): Promise<ApiKeyRow | undefined> {
  const [row] = await sql.query<ApiKeyRow>(
    'SELECT id, org_id, key_prefix, scopes, svc_ids, user_id, expires_at FROM api_keys WHERE key_hash = $1',
    [keyHash],
  );
  return row;
}

/** Sets last_used_at unless it was set within the last minute (by any process). */
export async function touchApiKey(sql: SqlConnection, keyId: string): Promise<void> {
  await sql.query(
    `UPDATE api_keys SET last_used_at = now() WHERE id = $1
     AND (last_used_at IS NULL OR last_used_at < now() - interval '1 minute')`,
    [keyId],
  );
}
