-- Idempotency-Key of marketplace purchases, claimed before the purchase runs. While the first
-- request runs the key has no transaction (a retry answers 409); once it completed, the key names
-- the transaction it made and the hash of the request that made it (the same request answers that
-- transaction, another one 422 IDEMPOTENCY_KEY_REUSED). A failed first request deletes its claim.
-- A null request_hash marks keys recorded before request hashes were kept: they answer their
-- transaction whatever the request, as they did.

-- CreateTable
CREATE TABLE "purchase_idempotency_keys" (
    "org_id" UUID NOT NULL,
    "key" TEXT NOT NULL,
    "request_hash" TEXT,
    "transaction_id" TEXT,
    "claimed_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "purchase_idempotency_keys_pkey" PRIMARY KEY ("org_id","key")
);

-- CreateIndex
CREATE UNIQUE INDEX "purchase_idempotency_keys_transaction_id_key" ON "purchase_idempotency_keys"("transaction_id");

-- AddForeignKey
ALTER TABLE "purchase_idempotency_keys" ADD CONSTRAINT "purchase_idempotency_keys_org_id_fkey" FOREIGN KEY ("org_id") REFERENCES "organizations"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "purchase_idempotency_keys" ADD CONSTRAINT "purchase_idempotency_keys_transaction_id_fkey" FOREIGN KEY ("transaction_id") REFERENCES "marketplace_transactions"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- The keys of purchases made before this table: completed, their request unknown.
INSERT INTO "purchase_idempotency_keys" ("org_id", "key", "request_hash", "transaction_id", "claimed_at")
SELECT t."buyer_org_id", t."idempotency_key", NULL, t."id", t."created_at"
FROM "marketplace_transactions" t
JOIN "organizations" o ON o."id" = t."buyer_org_id"
WHERE t."idempotency_key" IS NOT NULL;
