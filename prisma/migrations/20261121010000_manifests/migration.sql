-- CreateEnum
CREATE TYPE "ManifestStatus" AS ENUM ('pending', 'active', 'suspended', 'revoked', 'rejected', 'superseded');

-- CreateTable
CREATE TABLE "manifests" (
    "id" UUID NOT NULL,
    "org_id" UUID NOT NULL,
    "svc_id" TEXT NOT NULL,
    "version" TEXT NOT NULL,
    "status" "ManifestStatus" NOT NULL,
    "manifest_hash" TEXT NOT NULL,
    "document" JSONB NOT NULL,
    "team" TEXT,
    "requested_capabilities" TEXT[],
    "approved_capabilities" TEXT[],
    "created_by" TEXT NOT NULL,
    "approved_by_id" UUID,
    "approved_by" TEXT,
    "approved_at" TIMESTAMPTZ(3),
    "suspended_by" TEXT,
    "suspended_at" TIMESTAMPTZ(3),
    "rejected_by" TEXT,
    "rejected_at" TIMESTAMPTZ(3),
    "revoked_by" TEXT,
    "revoked_at" TIMESTAMPTZ(3),
    "reason" TEXT,
    "notes" TEXT,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updated_at" TIMESTAMPTZ(3) NOT NULL,

    CONSTRAINT "manifests_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "manifest_events" (
    "id" TEXT NOT NULL,
    "org_id" UUID NOT NULL,
    "svc_id" TEXT NOT NULL,
    "manifest_id" UUID NOT NULL,
    "version" TEXT NOT NULL,
    "agent_version" TEXT NOT NULL,
    "manifest_hash" TEXT NOT NULL,
    "status" "ManifestStatus" NOT NULL,
    "changed_by" TEXT NOT NULL,
    "changes" TEXT[],
    "changed_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "manifest_events_pkey" PRIMARY KEY ("id")
);

-- CreateIndex
CREATE INDEX "manifests_org_id_created_at_idx" ON "manifests"("org_id", "created_at");

-- CreateIndex
CREATE INDEX "manifests_org_id_svc_id_created_at_idx" ON "manifests"("org_id", "svc_id", "created_at");

-- CreateIndex
CREATE INDEX "manifest_events_org_id_svc_id_changed_at_idx" ON "manifest_events"("org_id", "svc_id", "changed_at");

-- CreateIndex
CREATE INDEX "manifest_events_manifest_id_idx" ON "manifest_events"("manifest_id");

-- AddForeignKey
ALTER TABLE "manifests" ADD CONSTRAINT "manifests_org_id_fkey" FOREIGN KEY ("org_id") REFERENCES "organizations"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "manifests" ADD CONSTRAINT "manifests_approved_by_id_fkey" FOREIGN KEY ("approved_by_id") REFERENCES "users"("id") ON DELETE SET NULL ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "manifest_events" ADD CONSTRAINT "manifest_events_manifest_id_fkey" FOREIGN KEY ("manifest_id") REFERENCES "manifests"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- Partial unique indexes (not expressible in schema.prisma): per org and agent id, at most one
-- manifest that is active or suspended, and at most one pending.
CREATE UNIQUE INDEX "manifests_one_current_per_svc" ON "manifests"("org_id", "svc_id") WHERE "status" IN ('active', 'suspended');
CREATE UNIQUE INDEX "manifests_one_pending_per_svc" ON "manifests"("org_id", "svc_id") WHERE "status" = 'pending';
