import type { Prisma } from '../generated/prisma/client.js';
import type { SqlConnection } from './sql.js';

/**
 * A Prisma interactive transaction seen as a `SqlConnection`, so raw-SQL helpers that take a
 * connection (e.g. `enqueueWebhookEvent`) can join a transaction that also records audit entries
 * through Prisma. `exec` runs one statement (Prisma sends no multi-statement scripts).
 */
export function sqlConnectionOf(tx: Prisma.TransactionClient): SqlConnection {
  return {
    async exec(script) {
      await tx.$executeRawUnsafe(script);
    },
    query<Row>(text: string, params: unknown[] = []) {
      return tx.$queryRawUnsafe<Row[]>(text, ...params);
    },
  };
}
