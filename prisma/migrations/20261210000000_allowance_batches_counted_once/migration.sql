-- take_allowances_as counts a batch of executes with one write per counter instead of one per
-- execute and counter (docs/decisions/0079-allowance-batches-counted-once.md). The batch's
-- executes share their counters, so the outcome of each follows from the counts before it:
-- the function locks each counter the first time take_allowance would touch it (in the same
-- order, so no lock is taken in another order than a single execute's), works the executes out
-- in arrival order as take_allowance would one after the other, and adds the allowed ones to
-- every counter in one UPDATE. Each execute gets exactly the row take_allowance would have given
-- it, and the counters end where they would have; a batch of one still calls take_allowance.
--
-- Why it stays exact: a refused execute changes no count, and the counts only grow, so once an
-- execute is refused at a counter every later one that gets there is too; an allowed execute has
-- touched every counter, which are all then locked.
-- The count of a counter, its row locked until the transaction ends; a counter without a row gets
-- one at zero (take_allowance's first count would have made it, and a refusal taken it back to zero).
CREATE FUNCTION "locked_count"("p_bucket" TEXT, "p_start" TIMESTAMPTZ) RETURNS INTEGER
LANGUAGE plpgsql AS $$
DECLARE
    "v_count" INTEGER;
BEGIN
    SELECT "count" INTO "v_count" FROM "rate_counters"
    WHERE "bucket" = "p_bucket" AND "window_start" = "p_start" FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO "rate_counters" AS "c" ("bucket", "window_start", "count") VALUES ("p_bucket", "p_start", 0)
        ON CONFLICT ("bucket", "window_start") DO UPDATE SET "count" = "c"."count"
        RETURNING "c"."count" INTO "v_count";
    END IF;
    RETURN "v_count";
END;
$$;

CREATE OR REPLACE FUNCTION "take_allowances_as"(
    "p_owner" INTEGER, "p_times" INTEGER,
    "p_buckets" TEXT[], "p_starts" TIMESTAMPTZ[], "p_limits" INTEGER[], "p_enforced" BOOLEAN[],
    "p_day_bucket" TEXT, "p_day_start" TIMESTAMPTZ, "p_day_limit" INTEGER,
    "p_hour_bucket" TEXT, "p_hour_start" TIMESTAMPTZ, "p_hour_limit" INTEGER
) RETURNS TABLE ("ord" BIGINT, "limit_counts" INTEGER[], "refused_by" INTEGER, "day_count" INTEGER, "hour_count" INTEGER)
LANGUAGE plpgsql AS $$
DECLARE
    "n" INTEGER := coalesce(array_length("p_buckets", 1), 0);
    -- The counts of the policy counters, the day's and the hour's as the batch moves them; NULL
    -- until the counter is locked.
    "v_counts" INTEGER[] := array_fill(NULL::INTEGER, ARRAY["n"]);
    "v_day" INTEGER;
    "v_hour" INTEGER;
    "v_taken" INTEGER[];
    "v_refused" INTEGER;
    "v_allowed" INTEGER := 0;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM "gateway_journal_owners" WHERE "owner" = "p_owner") THEN
        RETURN;
    END IF;
    IF "p_times" = 1 THEN
        RETURN QUERY SELECT 1::BIGINT, "a".* FROM take_allowance(
            "p_buckets", "p_starts", "p_limits", "p_enforced",
            "p_day_bucket", "p_day_start", "p_day_limit", "p_hour_bucket", "p_hour_start", "p_hour_limit"
        ) AS "a";
        RETURN;
    END IF;
    FOR "k" IN 1.."p_times" LOOP
        "v_taken" := '{}';
        "v_refused" := 0;
        FOR "i" IN 1.."n" LOOP
            -- An enforced limit below one refuses without touching its row, as take_allowance's insert does.
            IF "p_enforced"["i"] AND "p_limits"["i"] < 1 THEN
                "v_refused" := "i";
                EXIT;
            END IF;
            IF "v_counts"["i"] IS NULL THEN
                "v_counts"["i"] := locked_count("p_buckets"["i"], "p_starts"["i"]);
            END IF;
            IF "p_enforced"["i"] AND "v_counts"["i"] >= "p_limits"["i"] THEN
                "v_refused" := "i";
                EXIT;
            END IF;
            "v_taken" := "v_taken" || ("v_counts"["i"] + 1);
        END LOOP;
        IF "v_refused" > 0 THEN
            RETURN QUERY SELECT "k"::BIGINT, "v_taken" || "p_limits"["v_refused"], "v_refused", NULL::INTEGER, NULL::INTEGER;
            CONTINUE;
        END IF;
        -- take_budget: the day's count, then the hour's; a refusal by either counts neither.
        IF "p_day_limit" < 1 THEN
            RETURN QUERY SELECT "k"::BIGINT, "v_taken", 0, NULL::INTEGER, NULL::INTEGER;
            CONTINUE;
        END IF;
        IF "v_day" IS NULL THEN
            "v_day" := locked_count("p_day_bucket", "p_day_start");
        END IF;
        IF "v_day" >= "p_day_limit" THEN
            RETURN QUERY SELECT "k"::BIGINT, "v_taken", 0, NULL::INTEGER, NULL::INTEGER;
            CONTINUE;
        END IF;
        IF "p_hour_limit" < 1 THEN
            RETURN QUERY SELECT "k"::BIGINT, "v_taken", 0, "v_day", NULL::INTEGER;
            CONTINUE;
        END IF;
        IF "v_hour" IS NULL THEN
            "v_hour" := locked_count("p_hour_bucket", "p_hour_start");
        END IF;
        IF "v_hour" >= "p_hour_limit" THEN
            RETURN QUERY SELECT "k"::BIGINT, "v_taken", 0, "v_day", NULL::INTEGER;
            CONTINUE;
        END IF;
        -- Allowed: every counter moves by one.
        FOR "i" IN 1.."n" LOOP
            "v_counts"["i"] := "v_counts"["i"] + 1;
        END LOOP;
        "v_day" := "v_day" + 1;
        "v_hour" := "v_hour" + 1;
        "v_allowed" := "v_allowed" + 1;
        RETURN QUERY SELECT "k"::BIGINT, "v_taken", 0, "v_day", "v_hour";
    END LOOP;
    IF "v_allowed" > 0 THEN
        UPDATE "rate_counters" AS "c" SET "count" = "c"."count" + "v_allowed"
        FROM unnest("p_buckets" || "p_day_bucket" || "p_hour_bucket", "p_starts" || "p_day_start" || "p_hour_start")
            AS "t"("bucket", "window_start")
        WHERE "c"."bucket" = "t"."bucket" AND "c"."window_start" = "t"."window_start";
    END IF;
END;
$$;
