-- An API key may act for one user of its org (docs/decisions/0068-upstream-connections.md): a
-- tool whose OAuth connections are per user then uses that user's. Removing the user removes
-- their keys with them.
ALTER TABLE "api_keys" ADD COLUMN "user_id" UUID;
ALTER TABLE "api_keys" ADD CONSTRAINT "api_keys_user_id_fkey" FOREIGN KEY ("user_id") REFERENCES "users"("id") ON DELETE CASCADE ON UPDATE CASCADE;
CREATE INDEX "api_keys_user_id_idx" ON "api_keys"("user_id");
