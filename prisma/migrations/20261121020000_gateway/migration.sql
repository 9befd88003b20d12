-- CreateEnum
CREATE TYPE "ApprovalStatus" AS ENUM ('pending', 'approved', 'denied', 'expired', 'consumed');

-- CreateEnum
CREATE TYPE "RecordStatus" AS ENUM ('approved', 'denied');

-- AlterTable
ALTER TABLE "organizations" ADD COLUMN "record_params" BOOLEAN NOT NULL DEFAULT true;

-- CreateTable
CREATE TABLE "tools" (
    "id" TEXT NOT NULL,
    "org_id" UUID NOT NULL,
    "action_type" TEXT NOT NULL,
    "connector" TEXT NOT NULL,
    "config" JSONB NOT NULL,
    "secret" TEXT,
    "allow_private_network" BOOLEAN NOT NULL DEFAULT false,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updated_at" TIMESTAMPTZ(3) NOT NULL,

    CONSTRAINT "tools_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "capability_tokens" (
    "id" TEXT NOT NULL,
    "org_id" UUID NOT NULL,
    "svc_id" TEXT NOT NULL,
    "capabilities" TEXT[],
    "max_uses" INTEGER,
    "uses" INTEGER NOT NULL DEFAULT 0,
    "expires_at" TIMESTAMPTZ(3) NOT NULL,
    "revoked_at" TIMESTAMPTZ(3),
    "created_by" TEXT NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "capability_tokens_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "approvals" (
    "id" TEXT NOT NULL,
    "org_id" UUID NOT NULL,
    "svc_id" TEXT NOT NULL,
    "agent_id" TEXT NOT NULL,
    "manifest_id" UUID NOT NULL,
    "capability" TEXT NOT NULL,
    "action" JSONB NOT NULL,
    "action_hash" TEXT NOT NULL,
    "reasons" JSONB NOT NULL,
    "status" "ApprovalStatus" NOT NULL,
    "requested_by" TEXT NOT NULL,
    "requested_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "expires_at" TIMESTAMPTZ(3) NOT NULL,
    "decided_by" TEXT,
    "decided_at" TIMESTAMPTZ(3),
    "notes" TEXT,
    "reason" TEXT,
    "consumed_at" TIMESTAMPTZ(3),

    CONSTRAINT "approvals_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "interaction_records" (
    "id" TEXT NOT NULL,
    "org_id" UUID NOT NULL,
    "seq" BIGINT NOT NULL,
    "svc_id" TEXT NOT NULL,
    "agent_id" TEXT NOT NULL,
    "action_type" TEXT NOT NULL,
    "tool" TEXT NOT NULL,
    "capability" TEXT NOT NULL,
    "params_hash" TEXT NOT NULL,
    "params" JSONB,
    "status" "RecordStatus" NOT NULL,
    "executed" BOOLEAN NOT NULL,
    "reasons" JSONB NOT NULL,
    "result_hash" TEXT,
    "approval_id" TEXT,
    "prev_hash" TEXT NOT NULL,
    "record_hash" TEXT NOT NULL,
    "signature" TEXT NOT NULL,
    "key_id" TEXT NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL,

    CONSTRAINT "interaction_records_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "record_chain_heads" (
    "org_id" UUID NOT NULL,
    "seq" BIGINT NOT NULL,
    "head_hash" TEXT NOT NULL,
    "updated_at" TIMESTAMPTZ(3) NOT NULL,

    CONSTRAINT "record_chain_heads_pkey" PRIMARY KEY ("org_id")
);

-- CreateTable
CREATE TABLE "config_versions" (
    "id" INTEGER NOT NULL,
    "version" BIGINT NOT NULL,

    CONSTRAINT "config_versions_pkey" PRIMARY KEY ("id")
);

INSERT INTO "config_versions" ("id", "version") VALUES (1, 0);

-- CreateIndex
CREATE UNIQUE INDEX "tools_org_id_action_type_key" ON "tools"("org_id", "action_type");

-- CreateIndex
CREATE INDEX "capability_tokens_org_id_created_at_idx" ON "capability_tokens"("org_id", "created_at");

-- CreateIndex
CREATE INDEX "approvals_org_id_status_requested_at_idx" ON "approvals"("org_id", "status", "requested_at");

-- CreateIndex
CREATE INDEX "interaction_records_org_id_created_at_idx" ON "interaction_records"("org_id", "created_at");

-- CreateIndex
CREATE INDEX "interaction_records_org_id_agent_id_created_at_idx" ON "interaction_records"("org_id", "agent_id", "created_at");

-- CreateIndex
CREATE UNIQUE INDEX "interaction_records_org_id_seq_key" ON "interaction_records"("org_id", "seq");

-- AddForeignKey
ALTER TABLE "tools" ADD CONSTRAINT "tools_org_id_fkey" FOREIGN KEY ("org_id") REFERENCES "organizations"("id") ON DELETE CASCADE ON UPDATE CASCADE;
