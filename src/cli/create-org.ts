import type { Database } from '../db/database.js';
import type { Env } from '../env.js';
import { ConfigCache } from '../lib/config-cache.js';
import type { SecretBox } from '../lib/secret-box.js';
import { SigningKeyStore } from '../lib/signing-keys.js';
import { createLogger } from '../logger.js';
import { createTelemetry } from '../observability/telemetry.js';
import { type CreateOrganizationInput, createOrgService } from '../modules/org/org.service.js';
import { createUserService } from '../modules/user/user.service.js';

/**
 * `agent-gateway create-org`: the organization and its admin, made by the org module's service as a
 * sign-up makes them (the same checks, the admin, the audit entries, one transaction), without the
 * HTTP edge and its throttle, whatever SIGNUP says
 * (docs/decisions/0063-closed-sign-up-and-create-org.md). Answers the new org's id; throws the
 * service's errors (VALIDATION_ERROR, CONFLICT) for the command line to word.
 */
export async function createOrganization(
  { env, db, secrets }: { env: Env; db: Database; secrets: SecretBox },
  input: CreateOrganizationInput,
): Promise<string> {
  const deps = {
    env,
    db,
    // Standard output is the org id alone: whatever the services log goes to stderr.
    logger: createLogger('warn', process.stderr),
    keys: new SigningKeyStore(db.sql, secrets),
    // Not started: a command that exits after one write has nothing to keep fresh.
    cache: new ConfigCache(db.sql),
    secrets,
    // No metrics listener and no traces for a one-off command.
    telemetry: createTelemetry({ metrics: false }),
  };
  // Creating an org removes no user: the users' tool connections are never reached.
  const connections = {
    removeAllOfUser: () => Promise.reject(new Error('create-org removes no user')),
  };
  const orgs = createOrgService(deps, { users: createUserService(deps, { connections }) });
  const org = await orgs.create(input);
  return org.id;
}
