-- Journal owners hold a lease instead of a session-level advisory lock. A session lock lives on
-- one server connection: a pooler in transaction mode moves a client between server connections
-- (the lock is lost or leaks), and every terminated or reset connection dropped it. A lease is a
-- row renewed by its process every third of its length; an owner whose lease ran out is gone,
-- and another process adopts its journal entries (execution-journal.ts).
-- CreateTable
CREATE TABLE "gateway_journal_owners" (
    "owner" INTEGER NOT NULL,
    "lease_expires_at" TIMESTAMPTZ(3) NOT NULL,
    "started_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "gateway_journal_owners_pkey" PRIMARY KEY ("owner")
);

-- take_allowance for a journal owner: an owner whose lease row is gone (declared stopped, its
-- entries adopted by another process) counts nothing and gets no row back, so it cannot journal
-- an execution that nobody would recover. The check is in the function, not in the statement
-- around it, so that it runs before anything is counted whatever plan the statement gets.
CREATE FUNCTION "take_allowance_as"(
    "p_owner" INTEGER,
    "p_buckets" TEXT[], "p_starts" TIMESTAMPTZ[], "p_limits" INTEGER[], "p_enforced" BOOLEAN[],
    "p_day_bucket" TEXT, "p_day_start" TIMESTAMPTZ, "p_day_limit" INTEGER,
    "p_hour_bucket" TEXT, "p_hour_start" TIMESTAMPTZ, "p_hour_limit" INTEGER
) RETURNS TABLE ("limit_counts" INTEGER[], "refused_by" INTEGER, "day_count" INTEGER, "hour_count" INTEGER)
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM "gateway_journal_owners" WHERE "owner" = "p_owner") THEN
        RETURN;
    END IF;
    RETURN QUERY SELECT * FROM take_allowance(
        "p_buckets", "p_starts", "p_limits", "p_enforced",
        "p_day_bucket", "p_day_start", "p_day_limit", "p_hour_bucket", "p_hour_start", "p_hour_limit"
    );
END;
$$;
