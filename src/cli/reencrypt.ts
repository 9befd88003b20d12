import type { SqlDriver } from '../db/sql.js';
import type { SecretBox } from '../lib/secret-box.js';
import { reencryptSigningKeys } from '../lib/signing-keys.js';
import { reencryptSsoSecrets } from '../modules/sso/sso.service.js';
import { reencryptConnectionSecrets } from '../modules/tool/tool-connections.service.js';
import { reencryptToolSecrets } from '../modules/tool/tool.service.js';
import { reencryptWebhookSecrets } from '../modules/webhook/webhook.service.js';

export interface ReencryptCounts {
  signingKeys: number;
  tools: number;
  webhooks: number;
  ssoClientSecrets: number;
  /** Tool connections' tokens, the clients registered at their servers, authorizations under way. */
  toolConnections: number;
}

/**
 * `agent-gateway reencrypt`: seals every secret at rest that is not yet sealed with the current
 * KEY_ENCRYPTION_KEY (plaintext rows, rows sealed with a key of KEY_ENCRYPTION_KEY_PREVIOUS), in
 * one transaction, so a value that opens with none of the keys changes nothing. The plaintext is
 * unchanged, so running services (which hold it in memory) need nothing; values sealed with the
 * current key are left alone, so running it again rewrites nothing.
 */
export function reencryptSecrets(sql: SqlDriver, secrets: SecretBox): Promise<ReencryptCounts> {
  if (!secrets.encrypting) throw new Error('reencrypt needs KEY_ENCRYPTION_KEY (the key to seal with)');
  return sql.transaction(async (tx) => ({
    signingKeys: await reencryptSigningKeys(tx, secrets),
    tools: await reencryptToolSecrets(tx, secrets),
    webhooks: await reencryptWebhookSecrets(tx, secrets),
    ssoClientSecrets: await reencryptSsoSecrets(tx, secrets),
    toolConnections: await reencryptConnectionSecrets(tx, secrets),
  }));
}
