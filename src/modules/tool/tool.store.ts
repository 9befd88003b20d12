import type { SqlConnection } from '../../db/sql.js';
import type { Prisma, Tool } from '../../generated/prisma/client.js';

/** The statements of tools (`tools`); their upstream definitions are tool-definitions.store.ts's. */

/** The Prisma client, or a transaction on it. */
type Client = Prisma.TransactionClient;

/** What a write sets: the connector, its config and its sealed write-only values. */
export type ToolColumns = Pick<
  Prisma.ToolUncheckedCreateInput,
  'actionType' | 'connector' | 'config' | 'secret' | 'secretHeaders' | 'authClientSecret' | 'allowPrivateNetwork'
>;

export function insertTool(tx: Client, tool: ToolColumns & { id: string; orgId: string }): Promise<Tool> {
  return tx.tool.create({ data: tool });
}

export function findTool(prisma: Client, orgId: string, toolId: string): Promise<Tool | null> {
  return prisma.tool.findFirst({ where: { id: toolId, orgId } });
}

export function findToolById(prisma: Client, toolId: string): Promise<Tool | null> {
  return prisma.tool.findUnique({ where: { id: toolId } });
}

/** The org's tool for an action type (at most one: a unique key). */
export function findToolForAction(prisma: Client, orgId: string, actionType: string): Promise<Tool | null> {
  return prisma.tool.findUnique({ where: { orgId_actionType: { orgId, actionType } } });
}

/** The org's tools by action type. */
export function toolsOfOrg(prisma: Client, orgId: string): Promise<Tool[]> {
  return prisma.tool.findMany({ where: { orgId }, orderBy: [{ actionType: 'asc' }] });
}

/** Throws Prisma's P2025 when the org has no such tool. */
export function updateTool(tx: Client, orgId: string, toolId: string, columns: ToolColumns): Promise<Tool> {
  return tx.tool.update({ where: { id: toolId, orgId }, data: columns });
}

/** Deletes the tool and returns it; throws Prisma's P2025 when there is none. */
export function deleteTool(tx: Client, orgId: string, toolId: string): Promise<Tool> {
  return tx.tool.delete({ where: { id: toolId, orgId } });
}

export interface SealedToolSecrets {
  id: string;
  secret: string | null;
  secret_headers: Record<string, string> | null;
  auth_client_secret: string | null;
}

/** Every tool with a secret or header values, those stored values locked until the caller's transaction ends. */
export function lockToolSecrets(conn: SqlConnection): Promise<SealedToolSecrets[]> {
  return conn.query<SealedToolSecrets>(
    'SELECT id, secret, secret_headers, auth_client_secret FROM tools ' +
      'WHERE secret IS NOT NULL OR secret_headers IS NOT NULL OR auth_client_secret IS NOT NULL ORDER BY id FOR UPDATE',
  );
}

export async function updateToolSecrets(conn: SqlConnection, sealed: SealedToolSecrets): Promise<void> {
  await conn.query('UPDATE tools SET secret = $2, secret_headers = $3::jsonb, auth_client_secret = $4 WHERE id = $1', [
    sealed.id,
    sealed.secret,
    sealed.secret_headers === null ? null : JSON.stringify(sealed.secret_headers),
    sealed.auth_client_secret,
  ]);
}
