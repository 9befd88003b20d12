-- How a tool authenticates to its upstream (docs/decisions/0068-upstream-connections.md): the
-- client secret of an OAuth or client-credentials `config.auth`, write-only and sealed with
-- KEY_ENCRYPTION_KEY like the tool's other secrets. The rest of `auth` lives in `config`.
ALTER TABLE "tools" ADD COLUMN "auth_client_secret" TEXT;
