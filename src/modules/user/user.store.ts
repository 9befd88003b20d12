import type { Prisma } from '../../generated/prisma/client.js';
import type { UserRole } from '../../authz/authz.js';

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

/** A user as the role change and the removal lock it. */
export interface LockedUser {
  id: string;
  email: string;
  role: UserRole;
}

/**
 * Locks the org's admins and the user `userId` (when of the org) until the transaction ends, in
 * one statement and in id order, and reads them. Every role change and removal takes these locks
 * first, so of two that would each leave one admin, the second waits for the first, then finds
 * (PostgreSQL re-reads a row it waited for) that its target is the last admin. `NO KEY UPDATE`:
 * a login or a key creation, which only reference a user row, never waits on it.
 */
export function lockAdminsAndUser(tx: Tx, orgId: string, userId: string): Promise<LockedUser[]> {
  return tx.$queryRaw<LockedUser[]>`
    SELECT id::text AS id, email, role::text AS role FROM users
    WHERE org_id = ${orgId}::uuid AND (role = 'admin' OR id = ${userId}::uuid)
    ORDER BY id FOR NO KEY UPDATE`;
}

export function userById(tx: Tx, userId: string) {
  return tx.user.findUniqueOrThrow({ where: { id: userId } });
}

export function updateUserRole(tx: Tx, userId: string, role: UserRole) {
  return tx.user.update({ where: { id: userId }, data: { role } });
}

/**
 * Deletes the user; their session families and refresh tokens go with them (cascade), and what
 * they approved, decided or created keeps its row, naming no user any longer (SET NULL).
 */
export async function deleteUser(tx: Tx, userId: string): Promise<void> {
  await tx.user.delete({ where: { id: userId } });
}
