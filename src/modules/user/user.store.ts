import type { Prisma } from '../../generated/prisma/client.js';
import type { UserRole } from '../auth/authz.js';

/** The user module's statements. */

type Tx = Prisma.TransactionClient;

export interface NewUserRow {
  orgId: string;
  email: string;
  /** Null for a user provisioned by single sign-on: no password matches. */
  passwordHash: string | null;
  role: UserRole;
}

export function insertUser(tx: Tx, row: NewUserRow) {
  return tx.user.create({ data: row });
}

export function usersOfOrg(prisma: Tx, orgId: string) {
  return prisma.user.findMany({ where: { orgId }, orderBy: [{ createdAt: 'asc' }, { id: 'asc' }] });
}

export function countUsersOfOrg(prisma: Tx, orgId: string) {
  return prisma.user.count({ where: { orgId } });
}

export function usersByIds(prisma: Tx, orgId: string, ids: readonly string[]) {
  return prisma.user.findMany({ where: { orgId, id: { in: [...ids] } } });
}

/** `email` as stored: trimmed and lower-cased. */
export function findUserByEmail(prisma: Tx, email: string) {
  return prisma.user.findUnique({ where: { email } });
}

export function findUserIdByEmail(prisma: Tx, email: string) {
  return prisma.user.findUnique({ where: { email }, select: { id: true } });
}
