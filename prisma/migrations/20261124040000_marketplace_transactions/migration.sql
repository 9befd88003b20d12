-- Purchases of marketplace templates (decisions.md § The secondary listing).

-- CreateTable
CREATE TABLE "marketplace_transactions" (
    "id" TEXT NOT NULL,
    "buyer_org_id" UUID NOT NULL,
    "publisher_org_id" UUID NOT NULL,
    "template_id" UUID NOT NULL,
    "template_version" INTEGER NOT NULL,
    "content_hash" TEXT NOT NULL,
    "amount" DECIMAL(12,2) NOT NULL,
    "currency" TEXT NOT NULL,
    "payment_method" TEXT NOT NULL,
    "status" TEXT NOT NULL,
    "agent_id" TEXT NOT NULL,
    "manifest_id" UUID,
    "idempotency_key" TEXT,
    "purchased_by" TEXT NOT NULL,
    "purchased_by_user_id" UUID NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "completed_at" TIMESTAMPTZ(3),
    "confirmed_by" TEXT,

    CONSTRAINT "marketplace_transactions_pkey" PRIMARY KEY ("id")
);

-- CreateIndex
CREATE UNIQUE INDEX "marketplace_transactions_buyer_org_id_idempotency_key_key" ON "marketplace_transactions"("buyer_org_id", "idempotency_key");

-- CreateIndex
CREATE INDEX "marketplace_transactions_buyer_org_id_created_at_idx" ON "marketplace_transactions"("buyer_org_id", "created_at");

-- CreateIndex
CREATE INDEX "marketplace_transactions_publisher_org_id_created_at_idx" ON "marketplace_transactions"("publisher_org_id", "created_at");

-- CreateIndex
CREATE INDEX "marketplace_transactions_template_id_status_idx" ON "marketplace_transactions"("template_id", "status");
