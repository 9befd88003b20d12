import type { Logger } from 'pino';
import type { Database } from './db/database.js';
import type { Env } from './env.js';
import type { ConfigCache } from './lib/config-cache.js';
import type { SecretBox } from './lib/secret-box.js';
import type { SigningKeyStore } from './lib/signing-keys.js';
import type { Telemetry } from './observability/telemetry.js';

/** What every service is built from; created once per app. */
export interface Deps {
  env: Env;
  db: Database;
  logger: Logger;
  keys: SigningKeyStore;
  cache: ConfigCache;
  /** Seals and opens secrets at rest (KEY_ENCRYPTION_KEY). */
  secrets: SecretBox;
  /** Metrics and spans (src/observability/telemetry.ts); one per app. */
  telemetry: Telemetry;
}
