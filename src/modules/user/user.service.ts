import type { Deps } from '../../deps.js';
import type { Prisma } from '../../generated/prisma/client.js';
import { FieldErrors, conflict, isUniqueViolation, notFound } from '../../errors.js';
import { isUuid } from '../../lib/ids.js';
import { bumpConfigVersion } from '../../lib/config-cache.js';
import { type Actor, actorOf } from '../audit/audit-events.js';
import { recordAudit } from '../audit/audit.service.js';
import { userRoles, type Principal, type UserRole } from '../../authz/authz.js';
import { MIN_PASSWORD_LENGTH, createPasswords } from '../auth/password.js';
import {
  countUsersOfOrg,
  deleteUser,
  findUserByEmail,
  findUserIdByEmail,
  insertUser,
  lockAdminsAndUser,
  type LockedUser,
  type NewUserRow,
  updateUserRole,
  userById,
  usersByIds,
  usersOfOrg,
} from './user.store.js';

export interface CreateUserInput {
  email: string;
  password: string;
  role: string;
}

const emailPattern = /^[^\s@]+@[^\s@]+\.[^\s@]+$/;

/** Emails are compared case-insensitively: stored trimmed and lower-cased. */
export function validateEmail(errors: FieldErrors, field: string, email: string): string {
  const normalized = email.trim().toLowerCase();
  if (!emailPattern.test(normalized) || normalized.length > 254) errors.add(field, 'must be an email address');
  return normalized;
}

/** A user of another org is as unknown as one that never existed. */
const userNotFound = () => notFound('User');

const lastAdmin = (what: string, details?: Record<string, unknown>) =>
  conflict(`The organization's last admin cannot be ${what}: make another user admin first`, details);

export function validatePassword(errors: FieldErrors, field: string, password: string): void {
  if (password.length < MIN_PASSWORD_LENGTH) errors.add(field, `must be at least ${MIN_PASSWORD_LENGTH} characters`);
  // argon2 accepts long inputs, but a megabyte password is a denial-of-service vector, not a secret.
  if (password.length > 1024) errors.add(field, 'must be at most 1024 characters');
}

/** What removing a user does to their tools' OAuth connections (the tool module's). */
interface UserConnections {
  /** Deletes the user's connections in `tx`, audited; answers what to run after the commit (revocation upstream). */
  removeAllOfUser(tx: Prisma.TransactionClient, userId: string, actor: Actor): Promise<() => void>;
}

export function createUserService({ db, telemetry }: Deps, { connections }: { connections: UserConnections }) {
  const passwords = createPasswords(telemetry);
  async function create(orgId: string, input: CreateUserInput, actor: Principal) {
    const errors = new FieldErrors();
    const email = validateEmail(errors, 'email', input.email);
    validatePassword(errors, 'password', input.password);
    if (!userRoles.includes(input.role as UserRole)) errors.add('role', `must be one of ${userRoles.join(', ')}`);
    errors.throwIfAny();
    const passwordHash = await passwords.hash(input.password);
    try {
      return await db.prisma.$transaction(async (tx) => {
        const user = await insertUser(tx, { orgId, email, passwordHash, role: input.role as UserRole });
        await recordAudit(tx, orgId, actorOf(actor), {
          action: 'user.created',
          targetType: 'user',
          targetId: user.id,
          after: { email: user.email, role: user.role },
        });
        return user;
      });
    } catch (error) {
      if (isUniqueViolation(error)) throw conflict('A user with this email exists', { field: 'email' });
      throw error;
    }
  }

  /**
   * Runs `change` on the user `userId` of the org with the org's admins and the user locked
   * (lockAdminsAndUser): `admins` counts the admins as they are once every concurrent change
   * before this one committed, so the last admin check cannot be raced.
   */
  async function withUserLocked<T>(
    orgId: string,
    userId: string,
    change: (tx: Prisma.TransactionClient, user: LockedUser, admins: number) => Promise<T>,
  ): Promise<T> {
    // Not a UUID: no user has that id, and PostgreSQL would refuse to compare it.
    if (!isUuid(userId)) throw userNotFound();
    const id = userId.toLowerCase();
    return db.prisma.$transaction(async (tx) => {
      const locked = await lockAdminsAndUser(tx, orgId, id);
      const user = locked.find((row) => row.id === id);
      if (!user) throw userNotFound();
      return change(tx, user, locked.filter((row) => row.role === 'admin').length);
    });
  }

  /**
   * Gives the user `role`. The org's last admin cannot lose theirs (409); the same role again
   * changes and audits nothing. Sessions carry the new role from their next request on every
   * process: the bearer check and the refresh token rotation read it from the database.
   */
  async function changeRole(orgId: string, userId: string, role: string, actor: Principal) {
    if (!userRoles.includes(role as UserRole)) {
      const errors = new FieldErrors();
      errors.add('role', `must be one of ${userRoles.join(', ')}`);
      errors.throwIfAny();
    }
    return withUserLocked(orgId, userId, async (tx, user, admins) => {
      if (user.role === role) return userById(tx, user.id);
      if (user.role === 'admin' && admins === 1) throw lastAdmin('demoted', { field: 'role' });
      const updated = await updateUserRole(tx, user.id, role as UserRole);
      await recordAudit(tx, orgId, actorOf(actor), {
        action: 'user.role_changed',
        targetType: 'user',
        targetId: user.id,
        before: { email: user.email, role: user.role },
        after: { email: updated.email, role: updated.role },
      });
      return updated;
    });
  }

  /**
   * Removes the user from the org; the org's last admin cannot be removed (409). Their sessions
   * end with them, and their tools' OAuth connections (revoked at the upstreams after the commit). API keys they created, OAuth grants they allowed, manifests they approved and
   * approvals they decided stay the org's (docs/decisions/0060-user-roles-and-removal.md).
   */
  async function remove(orgId: string, userId: string, actor: Principal): Promise<void> {
    const revokeConnections = await withUserLocked(orgId, userId, async (tx, user, admins) => {
      if (user.role === 'admin' && admins === 1) throw lastAdmin('removed');
      const afterCommit = await connections.removeAllOfUser(tx, user.id, actorOf(actor));
      await deleteUser(tx, user.id);
      // The keys bound to the user go with it; every process drops the ones it has cached.
      await bumpConfigVersion(tx);
      await recordAudit(tx, orgId, actorOf(actor), {
        action: 'user.removed',
        targetType: 'user',
        targetId: user.id,
        before: { email: user.email, role: user.role },
      });
      return afterCommit;
    });
    revokeConnections();
  }

  async function list(orgId: string) {
    const [items, total] = await Promise.all([usersOfOrg(db.prisma, orgId), countUsersOfOrg(db.prisma, orgId)]);
    return { items, total };
  }

  /** Users by id within one org, in one query (the dashboards' dataloader for audit actors). */
  async function byIds(orgId: string, ids: readonly string[]) {
    return usersByIds(db.prisma, orgId, ids);
  }

  /**
   * A user row in the caller's transaction, checked and hashed already and audited by the caller
   * (sign-up creates its org's first admin this way, with the org).
   */
  const createInTransaction = (tx: Prisma.TransactionClient, row: NewUserRow) => insertUser(tx, row);

  /** The user signing in with `email` (already normalized), password hash included; null when none. */
  const findByEmail = (email: string) => findUserByEmail(db.prisma, email);

  /** Whether a user (of any org) has `email` (already normalized): emails are unique across orgs. */
  const isEmailTaken = async (email: string) => (await findUserIdByEmail(db.prisma, email)) !== null;

  return { create, changeRole, remove, list, byIds, createInTransaction, findByEmail, isEmailTaken };
}

export type UserService = ReturnType<typeof createUserService>;
