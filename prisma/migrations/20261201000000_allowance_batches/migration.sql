-- take_allowance_as, `p_times` times in order in one statement: the commit of several executes of
-- one agent that arrived together and count against the same counters (execute's commit batches
-- them, gateway.service.ts). Each gets the answer it would have had alone, in arrival order, so
-- limits stay exact; the batch costs one commit instead of one per execute, which matters because
-- the agent's counter rows are locked from its first count until that commit is durable.
-- Every call locks the same rows as the first, so a batch takes no lock in another order than a
-- single execute does. An owner whose lease row is gone gets no rows, as with take_allowance_as.
CREATE FUNCTION "take_allowances_as"(
    "p_owner" INTEGER, "p_times" INTEGER,
    "p_buckets" TEXT[], "p_starts" TIMESTAMPTZ[], "p_limits" INTEGER[], "p_enforced" BOOLEAN[],
    "p_day_bucket" TEXT, "p_day_start" TIMESTAMPTZ, "p_day_limit" INTEGER,
    "p_hour_bucket" TEXT, "p_hour_start" TIMESTAMPTZ, "p_hour_limit" INTEGER
) RETURNS TABLE ("ord" BIGINT, "limit_counts" INTEGER[], "refused_by" INTEGER, "day_count" INTEGER, "hour_count" INTEGER)
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM "gateway_journal_owners" WHERE "owner" = "p_owner") THEN
        RETURN;
    END IF;
    FOR "k" IN 1.."p_times" LOOP
        RETURN QUERY SELECT "k"::BIGINT, "a".* FROM take_allowance(
            "p_buckets", "p_starts", "p_limits", "p_enforced",
            "p_day_bucket", "p_day_start", "p_day_limit", "p_hour_bucket", "p_hour_start", "p_hour_limit"
        ) AS "a";
    END LOOP;
END;
$$;
