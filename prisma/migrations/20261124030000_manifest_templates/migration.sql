-- Manifest templates of the marketplace (decisions.md § The secondary listing).

-- CreateTable
CREATE TABLE "manifest_templates" (
    "id" UUID NOT NULL,
    "org_id" UUID NOT NULL,
    "name" TEXT NOT NULL,
    "description" TEXT NOT NULL,
    "category" TEXT NOT NULL,
    "operations" JSONB NOT NULL,
    "constraints" JSONB,
    "price" DECIMAL(12,2) NOT NULL,
    "currency" TEXT NOT NULL,
    "status" TEXT NOT NULL DEFAULT 'draft',
    "version" INTEGER NOT NULL DEFAULT 1,
    "content_hash" TEXT NOT NULL,
    "created_by" TEXT NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updated_at" TIMESTAMPTZ(3) NOT NULL,
    "published_at" TIMESTAMPTZ(3),

    CONSTRAINT "manifest_templates_pkey" PRIMARY KEY ("id")
);

-- CreateIndex
CREATE INDEX "manifest_templates_org_id_created_at_idx" ON "manifest_templates"("org_id", "created_at");

-- CreateIndex
CREATE INDEX "manifest_templates_status_category_idx" ON "manifest_templates"("status", "category");

-- AddForeignKey
ALTER TABLE "manifest_templates" ADD CONSTRAINT "manifest_templates_org_id_fkey" FOREIGN KEY ("org_id") REFERENCES "organizations"("id") ON DELETE CASCADE ON UPDATE CASCADE;
