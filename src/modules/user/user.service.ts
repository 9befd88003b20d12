import type { Deps } from '../../deps.js';
import type { Prisma } from '../../generated/prisma/client.js';
import { FieldErrors, conflict, isUniqueViolation } from '../../errors.js';
import { actorOf } from '../audit/audit-events.js';
import { recordAudit } from '../audit/audit.service.js';
import { userRoles, type Principal, type UserRole } from '../auth/authz.js';
import { MIN_PASSWORD_LENGTH, createPasswords } from '../auth/password.js';
import {
  countUsersOfOrg,
  findUserByEmail,
  findUserIdByEmail,
  insertUser,
  type NewUserRow,
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

export function validatePassword(errors: FieldErrors, field: string, password: string): void {
  if (password.length < MIN_PASSWORD_LENGTH) errors.add(field, `must be at least ${MIN_PASSWORD_LENGTH} characters`);
  // argon2 accepts long inputs, but a megabyte password is a denial-of-service vector, not a secret.
  if (password.length > 1024) errors.add(field, 'must be at most 1024 characters');
}

export function createUserService({ db, telemetry }: Deps) {
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

  return { create, list, byIds, createInTransaction, findByEmail, isEmailTaken };
}

export type UserService = ReturnType<typeof createUserService>;
