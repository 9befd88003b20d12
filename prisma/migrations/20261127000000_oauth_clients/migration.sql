-- OAuth clients of the MCP endpoints (docs/decisions/0047-mcp-oauth.md), registered through
-- Dynamic Client Registration (RFC 7591). Public clients: there is no secret to store.
-- `metadata` is the registration as accepted (client_name, client_uri, …) and as it is answered.
-- A registration unused for 30 days expires: it is deleted and its client_id is unknown from then
-- on; `last_used_at` moves when the client is used (at most once an hour).

-- CreateTable
CREATE TABLE "oauth_clients" (
    "client_id" TEXT NOT NULL,
    "redirect_uris" TEXT[],
    "metadata" JSONB NOT NULL,
    "registered_from" TEXT,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "last_used_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "oauth_clients_pkey" PRIMARY KEY ("client_id")
);

-- CreateIndex
CREATE INDEX "oauth_clients_last_used_at_idx" ON "oauth_clients"("last_used_at");
