-- Policies (decisions.md § Policies): an org's rules over gateway actions, and the matched
-- policies in the signed record (null on records from before: their bodies hash without them).

-- CreateTable
CREATE TABLE "policies" (
    "id" TEXT NOT NULL,
    "org_id" UUID NOT NULL,
    "name" TEXT NOT NULL,
    "description" TEXT NOT NULL DEFAULT '',
    "enabled" BOOLEAN NOT NULL DEFAULT true,
    "mode" TEXT NOT NULL,
    "priority" INTEGER NOT NULL,
    "effect" TEXT NOT NULL,
    "target" JSONB NOT NULL,
    "condition" TEXT,
    "rate_limit" JSONB,
    "message" TEXT,
    "version" INTEGER NOT NULL DEFAULT 1,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updated_at" TIMESTAMPTZ(3) NOT NULL,
    "created_by" TEXT NOT NULL,
    "updated_by" TEXT NOT NULL,

    CONSTRAINT "policies_pkey" PRIMARY KEY ("id")
);

-- CreateIndex
CREATE UNIQUE INDEX "policies_org_id_name_key" ON "policies"("org_id", "name");

-- CreateIndex
CREATE INDEX "policies_org_id_priority_idx" ON "policies"("org_id", "priority");

-- AddForeignKey
ALTER TABLE "policies" ADD CONSTRAINT "policies_org_id_fkey" FOREIGN KEY ("org_id") REFERENCES "organizations"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- AlterTable
ALTER TABLE "interaction_records" ADD COLUMN "policies" JSONB;

-- AlterTable
ALTER TABLE "gateway_executions" ADD COLUMN "policies" JSONB NOT NULL DEFAULT '[]';

-- Counts one allowed action against the rate limits of the enforced and shadow `rate_limit`
-- policies that matched it and against the agent's budget (take_budget), in one statement, so
-- that every counter row stays locked only while it runs. The policy buckets come sorted by name
-- (gateway.store.ts), and every caller takes them before the budget rows: concurrent statements
-- lock rows in one order and cannot deadlock. An enforced limit increments only below its limit
-- (the budgets' rule: N concurrent requests against R remaining allow exactly min(N, R)); a
-- shadow one always counts, so its count says whether it would have refused. When an enforced
-- limit or the budget refuses, everything this statement counted is given back before it ends.
-- Returns the new counts of the policy buckets (in their order) and of the budget; `refused_by`
-- is the 1-based index of the enforced limit that refused (its count is then its limit), 0 when
-- none did; the budget's counts are NULL as take_budget answers them.
CREATE FUNCTION "take_allowance"(
    "p_buckets" TEXT[], "p_starts" TIMESTAMPTZ[], "p_limits" INTEGER[], "p_enforced" BOOLEAN[],
    "p_day_bucket" TEXT, "p_day_start" TIMESTAMPTZ, "p_day_limit" INTEGER,
    "p_hour_bucket" TEXT, "p_hour_start" TIMESTAMPTZ, "p_hour_limit" INTEGER
) RETURNS TABLE ("limit_counts" INTEGER[], "refused_by" INTEGER, "day_count" INTEGER, "hour_count" INTEGER)
LANGUAGE plpgsql AS $$
DECLARE
    "v_counts" INTEGER[] := '{}';
    "v_count" INTEGER;
    "v_day" INTEGER;
    "v_hour" INTEGER;
    "n" INTEGER := coalesce(array_length("p_buckets", 1), 0);
BEGIN
    FOR "i" IN 1.."n" LOOP
        IF "p_enforced"["i"] THEN
            INSERT INTO "rate_counters" AS "c" ("bucket", "window_start", "count")
            SELECT "p_buckets"["i"], "p_starts"["i"], 1 WHERE "p_limits"["i"] >= 1
            ON CONFLICT ("bucket", "window_start") DO UPDATE SET "count" = "c"."count" + 1 WHERE "c"."count" < "p_limits"["i"]
            RETURNING "c"."count" INTO "v_count";
        ELSE
            INSERT INTO "rate_counters" AS "c" ("bucket", "window_start", "count") VALUES ("p_buckets"["i"], "p_starts"["i"], 1)
            ON CONFLICT ("bucket", "window_start") DO UPDATE SET "count" = "c"."count" + 1
            RETURNING "c"."count" INTO "v_count";
        END IF;
        IF "v_count" IS NULL THEN
            FOR "j" IN 1..("i" - 1) LOOP
                UPDATE "rate_counters" SET "count" = "count" - 1 WHERE "bucket" = "p_buckets"["j"] AND "window_start" = "p_starts"["j"];
            END LOOP;
            RETURN QUERY SELECT "v_counts" || "p_limits"["i"], "i", NULL::INTEGER, NULL::INTEGER;
            RETURN;
        END IF;
        "v_counts" := "v_counts" || "v_count";
    END LOOP;
    SELECT "b"."day_count", "b"."hour_count" INTO "v_day", "v_hour"
    FROM take_budget("p_day_bucket", "p_day_start", "p_day_limit", "p_hour_bucket", "p_hour_start", "p_hour_limit") AS "b";
    IF "v_day" IS NULL OR "v_hour" IS NULL THEN
        FOR "j" IN 1.."n" LOOP
            UPDATE "rate_counters" SET "count" = "count" - 1 WHERE "bucket" = "p_buckets"["j"] AND "window_start" = "p_starts"["j"];
        END LOOP;
    END IF;
    RETURN QUERY SELECT "v_counts", 0, "v_day", "v_hour";
END;
$$;
