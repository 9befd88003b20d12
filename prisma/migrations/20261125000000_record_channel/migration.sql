-- The channel an interaction came through (rest, graphql, mcp), signed into the record body.
-- Null on records (and journal entries) from before channels were recorded.

-- AlterTable
ALTER TABLE "interaction_records" ADD COLUMN "channel" TEXT;

-- AlterTable
ALTER TABLE "gateway_executions" ADD COLUMN "channel" TEXT;
