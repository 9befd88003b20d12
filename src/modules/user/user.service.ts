import type { Deps } from '../../deps.js';
import { FieldErrors, conflict, isUniqueViolation } from '../../errors.js';
import { actorOf } from '../audit/audit-events.js';
import { recordAudit } from '../audit/audit.service.js';
import { userRoles, type Principal, type UserRole } from '../auth/authz.js';
import { MIN_PASSWORD_LENGTH, createPasswords } from '../auth/password.js';

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
        const user = await tx.user.create({ data: { orgId, email, passwordHash, role: input.role as UserRole } });
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
    const where = { orgId };
    const [items, total] = await Promise.all([
      db.prisma.user.findMany({ where, orderBy: [{ createdAt: 'asc' }, { id: 'asc' }] }),
      db.prisma.user.count({ where }),
    ]);
    return { items, total };
  }

  /** Users by id within one org, in one query (the dashboards' dataloader for audit actors). */
  async function byIds(orgId: string, ids: readonly string[]) {
    return db.prisma.user.findMany({ where: { orgId, id: { in: [...ids] } } });
  }

  return { create, list, byIds };
}

export type UserService = ReturnType<typeof createUserService>;
