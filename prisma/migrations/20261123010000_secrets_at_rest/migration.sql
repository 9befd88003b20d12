-- Secrets at rest: http tool header values become write-only secrets, stored apart from `config`
-- (which the API shows and the audit log records) and sealed like the tool and webhook secrets
-- when KEY_ENCRYPTION_KEY is set (src/lib/secret-box.ts). Values moved here stay plaintext until
-- `agent-gateway reencrypt` seals them.

-- AlterTable
ALTER TABLE "tools" ADD COLUMN "secret_headers" JSONB;

-- Header values move out of the config.
UPDATE "tools"
SET "secret_headers" = CASE WHEN jsonb_typeof("config"->'headers') = 'object' THEN "config"->'headers' ELSE '{}'::jsonb END,
    "config" = "config" - 'headers'
WHERE "connector" = 'http';

-- Plaintext that would read as secret-box's own forms (`agw:…`) is escaped, as secret-box writes it.
UPDATE "tools" SET "secret" = 'agw:plain:' || "secret" WHERE "secret" LIKE 'agw:%';
UPDATE "webhooks" SET "secret" = 'agw:plain:' || "secret" WHERE "secret" LIKE 'agw:%';
UPDATE "tools"
SET "secret_headers" = (
  SELECT jsonb_object_agg(h.key, CASE WHEN h.value #>> '{}' LIKE 'agw:%' THEN to_jsonb('agw:plain:' || (h.value #>> '{}')) ELSE h.value END)
  FROM jsonb_each("secret_headers") AS h
)
WHERE "secret_headers" IS NOT NULL AND EXISTS (SELECT 1 FROM jsonb_each_text("secret_headers") AS h WHERE h.value LIKE 'agw:%');

-- Audit entries of tools recorded header values in full, readable by viewers and logs:read keys:
-- keep the header names, redact the values, as entries are written from now on.
UPDATE "audit_logs"
SET "before" = jsonb_set("before", '{config,headers}', (
  SELECT coalesce(jsonb_object_agg(h.key, '"[redacted]"'::jsonb), '{}'::jsonb) FROM jsonb_each("before"->'config'->'headers') AS h
))
WHERE "target_type" = 'tool' AND jsonb_typeof("before"->'config'->'headers') = 'object';
UPDATE "audit_logs"
SET "after" = jsonb_set("after", '{config,headers}', (
  SELECT coalesce(jsonb_object_agg(h.key, '"[redacted]"'::jsonb), '{}'::jsonb) FROM jsonb_each("after"->'config'->'headers') AS h
))
WHERE "target_type" = 'tool' AND jsonb_typeof("after"->'config'->'headers') = 'object';
