import type { Deps } from '../../deps.js';
import type { Prisma } from '../../generated/prisma/client.js';
import { type AppError, FieldErrors, conflict, forbidden, isUniqueViolation, notFound } from '../../errors.js';
import { countAttempt } from '../../lib/attempt-throttle.js';
import { fixedWindow } from '../../lib/rate-counter.js';
import { actorOf } from '../audit/audit-events.js';
import { recordAudit } from '../audit/audit.service.js';
import { bumpConfigVersion } from '../../lib/config-cache.js';
import type { Principal } from '../../authz/authz.js';
import { createPasswords } from '../auth/password.js';
import { type UserService, validateEmail, validatePassword } from '../user/user.service.js';
import {
  findOrgIdBySlug,
  findOrganization,
  findOrganizationOrThrow,
  gatewaySettingsRow,
  insertOrganization,
  type OrgQuery,
  updateOrganization,
} from './org.store.js';

export interface CreateOrganizationInput {
  name: string;
  slug: string;
  admin_email: string;
  admin_password: string;
}

export interface UpdateOrganizationInput {
  name?: string | null;
  operator_rate_limit_per_minute?: number | null;
  approval_ttl_seconds?: number | null;
  record_params?: boolean | null;
}

/** The answer to every sign-up while SIGNUP=closed. */
const SIGN_UP_CLOSED_MESSAGE = 'sign-up is closed on this deployment';
const signUpClosed = () => forbidden(SIGN_UP_CLOSED_MESSAGE);

const slugPattern = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;
export const MAX_OPERATOR_RATE_LIMIT = 1_000_000;
/** How long an agent's request waits for a human: one minute to 30 days (default 24 h in the schema). */
export const MIN_APPROVAL_TTL_SECONDS = 60;
export const MAX_APPROVAL_TTL_SECONDS = 30 * 24 * 3600;

type OrgSettings = Pick<
  Prisma.OrganizationGetPayload<object>,
  'name' | 'slug' | 'operatorRateLimitPerMinute' | 'approvalTtlSeconds' | 'recordParams'
>;

/** The settings as the audit log records them. */
const settingsOf = (org: OrgSettings) => ({
  name: org.name,
  slug: org.slug,
  operator_rate_limit_per_minute: org.operatorRateLimitPerMinute,
  approval_ttl_seconds: org.approvalTtlSeconds,
  record_params: org.recordParams,
});

function validateName(errors: FieldErrors, name: string) {
  if (!name.trim()) errors.add('name', 'must not be empty');
  else if (name.length > 200) errors.add('name', 'must be at most 200 characters');
}

/**
 * The input checks of a new organization (422 VALIDATION_ERROR naming each field), the same for a
 * sign-up and for `agent-gateway create-org`, which runs them before it opens a database; answers
 * the admin's email as it is stored.
 */
export function checkNewOrganization(input: CreateOrganizationInput): string {
  const errors = new FieldErrors();
  validateName(errors, input.name);
  if (!slugPattern.test(input.slug)) {
    errors.add('slug', 'must be 1-63 lowercase letters, digits or hyphens, not starting or ending with a hyphen');
  }
  const email = validateEmail(errors, 'admin_email', input.admin_email);
  validatePassword(errors, 'admin_password', input.admin_password);
  errors.throwIfAny();
  return email;
}

/** What the gateway reads of an org on every execute. */
export interface GatewaySettings {
  /** Records keep the action's params (else only their hash). */
  recordParams: boolean;
  approvalTtlSeconds: number;
}

interface Collaborators {
  /** Sign-up checks the admin's email and creates the admin, in the org's transaction. */
  users: Pick<UserService, 'isEmailTaken' | 'createInTransaction'>;
}

export function createOrgService({ env, db, cache, telemetry }: Deps, { users }: Collaborators) {
  const passwords = createPasswords(telemetry);
  /** Cached per process; org updates are audited, which empties the cache on every process. */
  const gatewaySettings = (orgId: string): Promise<GatewaySettings> =>
    cache.get(`org-gateway-settings:${orgId}`, () => gatewaySettingsRow(db.prisma, orgId));

  /** 409 naming the field whose value is taken (the slug first), if any is. */
  async function takenConflict(slug: string, email: string): Promise<AppError | undefined> {
    const [org, emailTaken] = await Promise.all([findOrgIdBySlug(db.prisma, slug), users.isEmailTaken(email)]);
    if (org) return conflict('An organization with this slug exists', { field: 'slug' });
    if (emailTaken) return conflict('A user with this email exists', { field: 'admin_email' });
    return undefined;
  }

  /**
   * Sign-up through the API: the org and its first user, an admin, in one transaction. The work
   * goes from cheap to dear: SIGNUP=closed refuses it whole (403) before the input is read or the
   * address counted (a deployment that takes no sign-ups has no sign-ups to throttle), the input
   * checks (422, not counted), the per-address count (429), then insertChecked
   * (docs/decisions/0063-closed-sign-up-and-create-org.md).
   */
  async function signUp(input: CreateOrganizationInput, clientAddress: string, query: OrgQuery = {}) {
    if (env.signup === 'closed') throw signUpClosed();
    const email = checkNewOrganization(input);
    await countAttempt(
      db.sql,
      [{ bucket: `signups:address:${clientAddress}`, limit: env.signupMaxPerAddress }],
      fixedWindow(3600),
      {
        message: 'Too many sign-ups from this address; try again later',
        period: '1h',
      },
    );
    return insertChecked(input, email, query);
  }

  /**
   * `agent-gateway create-org`: what a sign-up creates (the org, its admin, their audit entries),
   * whatever SIGNUP says and not throttled: whoever runs it holds the database's credentials.
   */
  async function create(input: CreateOrganizationInput, query: OrgQuery = {}) {
    return insertChecked(input, checkNewOrganization(input), query);
  }

  /**
   * After the input checks: the uniqueness checks (409), then the argon2 hash of an org that can
   * be created, then the org, its admin and their audit entries in one transaction.
   */
  async function insertChecked(input: CreateOrganizationInput, email: string, query: OrgQuery) {
    const taken = await takenConflict(input.slug, email);
    if (taken) throw taken;
    const passwordHash = await passwords.hash(input.admin_password);
    let orgId: string;
    try {
      orgId = await db.prisma.$transaction(async (tx) => {
        const org = await insertOrganization(tx, { name: input.name.trim(), slug: input.slug });
        const admin = await users.createInTransaction(tx, { orgId: org.id, email, passwordHash, role: 'admin' });
        const actor = { type: 'user', id: admin.id, label: admin.email } as const;
        await recordAudit(tx, org.id, actor, {
          action: 'org.created',
          targetType: 'organization',
          targetId: org.id,
          after: settingsOf(org),
        });
        await recordAudit(tx, org.id, actor, {
          action: 'user.created',
          targetType: 'user',
          targetId: admin.id,
          after: { email: admin.email, role: admin.role },
        });
        return org.id;
      });
    } catch (error) {
      // A concurrent sign-up took the slug or the email after the check: the constraint decides.
      if (isUniqueViolation(error))
        throw (await takenConflict(input.slug, email)) ?? conflict('The slug or the email was taken meanwhile');
      throw error;
    }
    return findOrganizationOrThrow(db.prisma, orgId, query);
  }

  async function get(orgId: string, query: OrgQuery = {}) {
    const org = await findOrganization(db.prisma, orgId, query);
    if (!org) throw notFound('Organization');
    return org;
  }

  async function update(orgId: string, input: UpdateOrganizationInput, actor: Principal, query: OrgQuery = {}) {
    const errors = new FieldErrors();
    if (input.name != null) validateName(errors, input.name);
    const limit = input.operator_rate_limit_per_minute;
    if (limit != null && (!Number.isInteger(limit) || limit < 1 || limit > MAX_OPERATOR_RATE_LIMIT)) {
      errors.add('operator_rate_limit_per_minute', `must be an integer from 1 to ${MAX_OPERATOR_RATE_LIMIT}`);
    }
    const ttl = input.approval_ttl_seconds;
    if (ttl != null && (!Number.isInteger(ttl) || ttl < MIN_APPROVAL_TTL_SECONDS || ttl > MAX_APPROVAL_TTL_SECONDS)) {
      errors.add(
        'approval_ttl_seconds',
        `must be an integer from ${MIN_APPROVAL_TTL_SECONDS} to ${MAX_APPROVAL_TTL_SECONDS}`,
      );
    }
    errors.throwIfAny();
    return db.prisma.$transaction(async (tx) => {
      const before = await findOrganization(tx, orgId);
      if (!before) throw notFound('Organization');
      const after = await updateOrganization(
        tx,
        orgId,
        {
          ...(input.name != null ? { name: input.name.trim() } : {}),
          ...(limit != null ? { operatorRateLimitPerMinute: limit } : {}),
          ...(ttl != null ? { approvalTtlSeconds: ttl } : {}),
          ...(input.record_params != null ? { recordParams: input.record_params } : {}),
        },
        query,
      );
      await recordAudit(tx, orgId, actorOf(actor), {
        action: 'org.updated',
        targetType: 'organization',
        targetId: orgId,
        before: settingsOf(before),
        after: settingsOf(after),
      });
      // Every process caches the org's gateway settings.
      await bumpConfigVersion(tx);
      return after;
    });
  }

  /** Whether sign-up is open, for the sign-in page to offer it only then: nothing about any org. */
  const signUpStatus = () => ({ open: env.signup === 'open' });

  return { signUp, create, signUpStatus, get, update, gatewaySettings };
}

export type OrgService = ReturnType<typeof createOrgService>;
