-- Agents (decisions.md § Agents): the identity behind a svc_id across its manifest versions.

-- CreateTable
CREATE TABLE "agents" (
    "org_id" UUID NOT NULL,
    "id" TEXT NOT NULL,
    "name" TEXT NOT NULL,
    "description" TEXT NOT NULL DEFAULT '',
    "team" TEXT,
    "owner_email" TEXT,
    "labels" JSONB NOT NULL DEFAULT '{}',
    "status" TEXT NOT NULL DEFAULT 'active',
    "last_seen_at" TIMESTAMPTZ(3),
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "created_by" TEXT NOT NULL,
    "deactivated_at" TIMESTAMPTZ(3),
    "deactivated_by" TEXT,
    "deactivation_reason" TEXT,

    CONSTRAINT "agents_pkey" PRIMARY KEY ("org_id","id")
);

-- CreateIndex
CREATE INDEX "agents_org_id_created_at_idx" ON "agents"("org_id", "created_at");

-- AddForeignKey
ALTER TABLE "agents" ADD CONSTRAINT "agents_org_id_fkey" FOREIGN KEY ("org_id") REFERENCES "organizations"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- Every agent id that already has manifests becomes an agent, as registering its first manifest
-- now does: named and described by its newest manifest's `agent` block, created when and by whom
-- its first manifest was registered. The owner is the registrant when that was a user (an email).
INSERT INTO "agents" ("org_id", "id", "name", "description", "team", "owner_email", "created_at", "created_by")
SELECT DISTINCT ON (newest."org_id", newest."svc_id")
    newest."org_id",
    newest."svc_id",
    coalesce(newest."document"->'agent'->>'name', newest."svc_id"),
    coalesce(newest."document"->'agent'->>'description', ''),
    newest."document"->'agent'->>'team',
    CASE WHEN first."created_by" LIKE '%@%' THEN first."created_by" END,
    first."created_at",
    first."created_by"
FROM "manifests" AS newest
JOIN LATERAL (
    SELECT f."created_at", f."created_by" FROM "manifests" AS f
    WHERE f."org_id" = newest."org_id" AND f."svc_id" = newest."svc_id"
    ORDER BY f."created_at", f."id" LIMIT 1
) AS first ON true
ORDER BY newest."org_id", newest."svc_id", newest."created_at" DESC, newest."id" DESC;
