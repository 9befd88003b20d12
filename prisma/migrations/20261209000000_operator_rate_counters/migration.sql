-- The operator rate limit's counts move out of rate_counters into a table of their own, UNLOGGED
-- (docs/decisions/0074-operator-counts-unlogged.md): every operator request upserts its org's
-- count, and the commit of a logged write waits for the WAL to reach the disk, which was most of
-- an operator read's tail. A crash empties an unlogged table: the org's current minute starts
-- again from zero. Agent budgets and login throttling stay in rate_counters, logged. The counts in
-- flight when this runs are dropped with the old rows: at most a minute's.

-- CreateTable
CREATE UNLOGGED TABLE "operator_rate_counters" (
    "org_id" UUID NOT NULL,
    "window_start" TIMESTAMPTZ(3) NOT NULL,
    "count" INTEGER NOT NULL DEFAULT 0,

    CONSTRAINT "operator_rate_counters_pkey" PRIMARY KEY ("org_id","window_start")
);

-- CreateIndex
CREATE INDEX "operator_rate_counters_window_start_idx" ON "operator_rate_counters"("window_start");

DELETE FROM "rate_counters" WHERE "bucket" LIKE 'operator:%';
