-- AlterTable
ALTER TABLE "organizations" ADD COLUMN     "approval_ttl_seconds" INTEGER NOT NULL DEFAULT 86400;

-- AlterTable
ALTER TABLE "approvals" ADD COLUMN     "decided_by_user_id" UUID;

-- CreateIndex
CREATE INDEX "approvals_org_id_svc_id_requested_at_idx" ON "approvals"("org_id", "svc_id", "requested_at");

-- CreateIndex
CREATE INDEX "approvals_status_expires_at_idx" ON "approvals"("status", "expires_at");

-- AddForeignKey
ALTER TABLE "approvals" ADD CONSTRAINT "approvals_org_id_fkey" FOREIGN KEY ("org_id") REFERENCES "organizations"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "approvals" ADD CONSTRAINT "approvals_manifest_id_fkey" FOREIGN KEY ("manifest_id") REFERENCES "manifests"("id") ON DELETE RESTRICT ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "approvals" ADD CONSTRAINT "approvals_decided_by_user_id_fkey" FOREIGN KEY ("decided_by_user_id") REFERENCES "users"("id") ON DELETE SET NULL ON UPDATE CASCADE;
