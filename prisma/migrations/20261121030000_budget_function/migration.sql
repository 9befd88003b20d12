-- Counts one action against an agent's daily and hourly budget in a single statement, so the
-- counter rows stay locked only while the statement runs instead of across several round trips
-- (every execute of an agent updates the same two rows). When either budget is used up nothing is
-- counted: the day is given back before the statement ends, still under its row lock.
-- Returns the new counts, or NULL for the budget that was exhausted (the day first).
CREATE FUNCTION "take_budget"(
    "p_day_bucket" TEXT, "p_day_start" TIMESTAMPTZ, "p_day_limit" INTEGER,
    "p_hour_bucket" TEXT, "p_hour_start" TIMESTAMPTZ, "p_hour_limit" INTEGER
) RETURNS TABLE ("day_count" INTEGER, "hour_count" INTEGER)
LANGUAGE plpgsql AS $$
DECLARE
    "v_day" INTEGER;
    "v_hour" INTEGER;
BEGIN
    IF "p_day_limit" < 1 THEN
        RETURN QUERY SELECT NULL::INTEGER, NULL::INTEGER;
        RETURN;
    END IF;
    INSERT INTO "rate_counters" AS "c" ("bucket", "window_start", "count") VALUES ("p_day_bucket", "p_day_start", 1)
    ON CONFLICT ("bucket", "window_start") DO UPDATE SET "count" = "c"."count" + 1 WHERE "c"."count" < "p_day_limit"
    RETURNING "c"."count" INTO "v_day";
    IF "v_day" IS NULL THEN
        RETURN QUERY SELECT NULL::INTEGER, NULL::INTEGER;
        RETURN;
    END IF;
    IF "p_hour_limit" >= 1 THEN
        INSERT INTO "rate_counters" AS "c" ("bucket", "window_start", "count") VALUES ("p_hour_bucket", "p_hour_start", 1)
        ON CONFLICT ("bucket", "window_start") DO UPDATE SET "count" = "c"."count" + 1 WHERE "c"."count" < "p_hour_limit"
        RETURNING "c"."count" INTO "v_hour";
    END IF;
    IF "v_hour" IS NULL THEN
        UPDATE "rate_counters" SET "count" = "count" - 1 WHERE "bucket" = "p_day_bucket" AND "window_start" = "p_day_start";
        "v_day" := "v_day" - 1;
    END IF;
    RETURN QUERY SELECT "v_day", "v_hour";
END;
$$;
