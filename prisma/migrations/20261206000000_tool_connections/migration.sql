-- A tool's OAuth connections to its upstream (docs/decisions/0068-upstream-connections.md).

-- The client the gateway registered at a tool's upstream authorization server, reused by later
-- connections; its secret sealed with KEY_ENCRYPTION_KEY.
CREATE TABLE "tool_oauth_clients" (
    "tool_id" TEXT NOT NULL,
    "issuer" TEXT NOT NULL,
    "redirect_uri" TEXT NOT NULL,
    "client_id" TEXT NOT NULL,
    "client_secret" TEXT,
    "client_secret_expires_at" TIMESTAMPTZ(3),
    "token_endpoint_auth_method" TEXT NOT NULL,
    "registration" TEXT NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "tool_oauth_clients_pkey" PRIMARY KEY ("tool_id", "issuer"),
    CONSTRAINT "tool_oauth_clients_method_check" CHECK ("token_endpoint_auth_method" IN ('none', 'client_secret_basic', 'client_secret_post')),
    CONSTRAINT "tool_oauth_clients_registration_check" CHECK ("registration" IN ('dynamic', 'metadata_document'))
);
ALTER TABLE "tool_oauth_clients" ADD CONSTRAINT "tool_oauth_clients_tool_id_fkey" FOREIGN KEY ("tool_id") REFERENCES "tools"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- The org's connection of a tool (user_id null) or a user's; the tokens sealed.
CREATE TABLE "tool_connections" (
    "id" TEXT NOT NULL,
    "org_id" UUID NOT NULL,
    "tool_id" TEXT NOT NULL,
    "user_id" UUID,
    "scope" TEXT NOT NULL,
    "status" TEXT NOT NULL,
    "created_by_id" UUID,
    "issuer" TEXT,
    "authorization_server" JSONB,
    "resource" TEXT,
    "client_id" TEXT,
    "registration" TEXT,
    "access_token" TEXT,
    "refresh_token" TEXT,
    "token_expires_at" TIMESTAMPTZ(3),
    "token_version" INTEGER NOT NULL DEFAULT 0,
    "scopes" TEXT[],
    "subject" TEXT,
    "error" TEXT,
    "connected_at" TIMESTAMPTZ(3),
    "last_refreshed_at" TIMESTAMPTZ(3),
    "last_used_at" TIMESTAMPTZ(3),
    "refresh_lease_owner" TEXT,
    "refresh_lease_until" TIMESTAMPTZ(3),
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updated_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "tool_connections_pkey" PRIMARY KEY ("id"),
    CONSTRAINT "tool_connections_scope_check" CHECK (("scope" = 'org' AND "user_id" IS NULL) OR ("scope" = 'user' AND "user_id" IS NOT NULL)),
    CONSTRAINT "tool_connections_status_check" CHECK ("status" IN ('pending', 'connected', 'reauthorization_required', 'revoked'))
);
CREATE UNIQUE INDEX "tool_connections_tool_id_user_id_key" ON "tool_connections"("tool_id", "user_id");
-- At most one org connection per tool (the unique key above lets NULLs repeat).
CREATE UNIQUE INDEX "tool_connections_org_connection_key" ON "tool_connections"("tool_id") WHERE "user_id" IS NULL;
CREATE INDEX "tool_connections_org_id_idx" ON "tool_connections"("org_id");
CREATE INDEX "tool_connections_user_id_idx" ON "tool_connections"("user_id");
ALTER TABLE "tool_connections" ADD CONSTRAINT "tool_connections_org_id_fkey" FOREIGN KEY ("org_id") REFERENCES "organizations"("id") ON DELETE CASCADE ON UPDATE CASCADE;
ALTER TABLE "tool_connections" ADD CONSTRAINT "tool_connections_tool_id_fkey" FOREIGN KEY ("tool_id") REFERENCES "tools"("id") ON DELETE CASCADE ON UPDATE CASCADE;
ALTER TABLE "tool_connections" ADD CONSTRAINT "tool_connections_user_id_fkey" FOREIGN KEY ("user_id") REFERENCES "users"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- An authorization on its way through the upstream's server: by the SHA-256 of its state, used
-- once, 10 minutes, bound to the user who asked and to the browser that opened it.
CREATE TABLE "tool_connection_authorizations" (
    "state_hash" TEXT NOT NULL,
    "connection_id" TEXT NOT NULL,
    "user_id" UUID NOT NULL,
    "browser_hash" TEXT,
    "code_verifier" TEXT NOT NULL,
    "request_url" TEXT NOT NULL,
    "issuer" TEXT NOT NULL,
    "authorization_server" JSONB NOT NULL,
    "resource" TEXT NOT NULL,
    "client_id" TEXT NOT NULL,
    "registration" TEXT NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "expires_at" TIMESTAMPTZ(3) NOT NULL,

    CONSTRAINT "tool_connection_authorizations_pkey" PRIMARY KEY ("state_hash")
);
CREATE INDEX "tool_connection_authorizations_expires_at_idx" ON "tool_connection_authorizations"("expires_at");
CREATE INDEX "tool_connection_authorizations_connection_id_idx" ON "tool_connection_authorizations"("connection_id");
ALTER TABLE "tool_connection_authorizations" ADD CONSTRAINT "tool_connection_authorizations_connection_id_fkey" FOREIGN KEY ("connection_id") REFERENCES "tool_connections"("id") ON DELETE CASCADE ON UPDATE CASCADE;
ALTER TABLE "tool_connection_authorizations" ADD CONSTRAINT "tool_connection_authorizations_user_id_fkey" FOREIGN KEY ("user_id") REFERENCES "users"("id") ON DELETE CASCADE ON UPDATE CASCADE;
