-- The user's confirmation a journaled call runs with ({confirmation_id, by}): a record written on
-- recovery names it as the record written after the tool would have.
ALTER TABLE "gateway_executions" ADD COLUMN "confirmation" JSONB;
