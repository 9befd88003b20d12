import type { Deps } from '../../deps.js';
import { AppError, FieldErrors, notFoundIfGone } from '../../errors.js';
import { actorOf } from '../audit/audit-events.js';
import { recordAudit } from '../audit/audit.service.js';
import { bumpConfigVersion } from '../../lib/config-cache.js';
import { isUuid } from '../../lib/ids.js';
import { apiKeyScopes, type ApiKeyPrincipal, type ApiKeyScope, type Principal } from '../../authz/authz.js';
import { agentIdPattern } from '../manifest/manifest-document.js';
import { generateApiKey, hashApiKey, isWellFormedApiKey, newKeyId } from './api-key-format.js';
import {
  apiKeysOfOrg,
  countApiKeysOfOrg,
  deleteApiKey,
  findApiKeyByHash,
  insertApiKey,
  touchApiKey,
} from './api-key.store.js';

export interface CreateApiKeyInput {
  name: string;
  description?: string | null;
  scopes: string[];
  expires_in_days?: number | null;
  svc_ids?: string[] | null;
  /** A user of the org whose upstream connections the key's calls use. */
  user_id?: string | null;
}

/** What the service needs of the users: whether an id names a user of the org. */
interface Collaborators {
  users: { byIds(orgId: string, ids: readonly string[]): Promise<Array<{ id: string }>> };
}

const DEFAULT_LIFETIME_DAYS = 90;
const MAX_LIFETIME_DAYS = 3650;
// `last_used_at` is a hint for operators, not an audit trail: one write a minute per key at most.
const LAST_USED_RESOLUTION_MS = 60_000;

const invalidKey = () => new AppError('INVALID_TOKEN', 'The API key is invalid, expired or deleted');

export function createApiKeyService({ db, logger, cache }: Deps, { users }: Collaborators) {
  const lastTouched = new Map<string, number>();

  function validate(input: CreateApiKeyInput) {
    const errors = new FieldErrors();
    if (!input.name.trim()) errors.add('name', 'must not be empty');
    if (input.name.length > 200) errors.add('name', 'must be at most 200 characters');
    if ((input.description ?? '').length > 2000) errors.add('description', 'must be at most 2000 characters');
    if (!input.scopes.length) errors.add('scopes', 'must list at least one scope');
    input.scopes.forEach((scope, i) => {
      if (!apiKeyScopes.includes(scope as ApiKeyScope)) {
        errors.add(`scopes[${i}]`, `unknown scope "${scope}"; allowed: ${apiKeyScopes.join(', ')}`);
      }
    });
    if (new Set(input.scopes).size !== input.scopes.length) errors.add('scopes', 'must not repeat a scope');
    const days = input.expires_in_days ?? DEFAULT_LIFETIME_DAYS;
    if (!Number.isInteger(days) || days < 1 || days > MAX_LIFETIME_DAYS) {
      errors.add('expires_in_days', `must be an integer from 1 to ${MAX_LIFETIME_DAYS}`);
    }
    (input.svc_ids ?? []).forEach((svcId, i) => {
      if (!agentIdPattern.test(svcId))
        errors.add(`svc_ids[${i}]`, 'must be an agent id (lowercase letters, digits, hyphens)');
    });
    errors.throwIfAny();
    return days;
  }

  /** The user a key is bound to, when given: a user of this org, else 422 (another org's is unknown here). */
  async function boundUser(orgId: string, userId: string | null | undefined): Promise<string | null> {
    if (userId == null) return null;
    const id = userId.toLowerCase();
    const found = isUuid(id) ? await users.byIds(orgId, [id]) : [];
    if (!found.length) {
      const errors = new FieldErrors();
      errors.add('user_id', 'must be the id of a user of this organization');
      errors.throwIfAny();
    }
    return id;
  }

  async function create(orgId: string, input: CreateApiKeyInput, creator: Principal) {
    const days = validate(input);
    const userId = await boundUser(orgId, input.user_id);
    const { key, hash, prefix } = generateApiKey();
    const expiresAt = new Date(Date.now() + days * 86_400_000);
    const scopes = [...input.scopes];
    const svcIds = [...new Set(input.svc_ids ?? [])];
    const row = await db.prisma.$transaction(async (tx) => {
      const created = await insertApiKey(tx, {
        id: newKeyId(),
        orgId,
        name: input.name.trim(),
        description: input.description ?? '',
        keyHash: hash,
        keyPrefix: prefix,
        scopes,
        svcIds,
        userId,
        createdById: creator.type === 'user' ? creator.userId : null,
        expiresAt,
      });
      await recordAudit(tx, orgId, actorOf(creator), {
        action: 'api_key.created',
        targetType: 'api_key',
        targetId: created.id,
        after: {
          name: created.name,
          key_prefix: prefix,
          scopes,
          svc_ids: svcIds,
          user_id: userId,
          expires_at: expiresAt.toISOString(),
        },
      });
      await bumpConfigVersion(tx);
      return created;
    });
    return { ...row, key };
  }

  async function list(orgId: string) {
    const [items, total] = await Promise.all([apiKeysOfOrg(db.prisma, orgId), countApiKeysOfOrg(db.prisma, orgId)]);
    return { items, total };
  }

  /** One statement deletes and returns the row, so of concurrent deletes one wins and the rest are 404. */
  async function remove(orgId: string, keyId: string, actor: Principal): Promise<void> {
    await notFoundIfGone(
      'API key',
      db.prisma.$transaction(async (tx) => {
        const deleted = await deleteApiKey(tx, orgId, keyId);
        await recordAudit(tx, orgId, actorOf(actor), {
          action: 'api_key.deleted',
          targetType: 'api_key',
          targetId: keyId,
          before: {
            name: deleted.name,
            key_prefix: deleted.keyPrefix,
            scopes: deleted.scopes,
            svc_ids: deleted.svcIds,
            user_id: deleted.userId,
            expires_at: deleted.expiresAt.toISOString(),
          },
        });
        await bumpConfigVersion(tx);
      }),
    );
    lastTouched.delete(keyId);
  }

  /**
   * Resolves a presented key to its principal: a malformed key costs no database read, a known
   * one is served from the config cache (dropped on every audited write, e.g. a deletion).
   */
  async function verify(key: string): Promise<ApiKeyPrincipal> {
    if (!isWellFormedApiKey(key)) throw invalidKey();
    const hash = hashApiKey(key);
    const row = await cache.get(`api-key:${hash}`, () => findApiKeyByHash(db.sql, hash));
    if (!row || new Date(row.expires_at).getTime() <= Date.now()) throw invalidKey();
    touch(row.id);
    return {
      type: 'api_key',
      keyId: row.id,
      orgId: row.org_id,
      keyPrefix: row.key_prefix,
      scopes: row.scopes as ApiKeyScope[],
      svcIds: row.svc_ids,
      userId: row.user_id,
    };
  }

  function touch(keyId: string): void {
    const now = Date.now();
    if (now - (lastTouched.get(keyId) ?? 0) < LAST_USED_RESOLUTION_MS) return;
    lastTouched.set(keyId, now);
    // Conditional, so several processes together still write about once a minute.
    touchApiKey(db.sql, keyId).catch((error) => logger.warn({ err: error, keyId }, 'could not record API key use'));
  }

  return { create, list, remove, verify };
}

export type ApiKeyService = ReturnType<typeof createApiKeyService>;
