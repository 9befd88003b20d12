-- The OAuth connection a call reached its tool's upstream through, signed into the record body as
-- {"connection_id", "user_id"} (docs/decisions/0068-upstream-connections.md): records name the
-- connection and its user, never a token. Null on records of calls to tools without a connection,
-- and on records (and journal entries) from before connections were recorded; the journal keeps it
-- so that a record written on recovery names the connection too.

-- AlterTable
ALTER TABLE "interaction_records" ADD COLUMN "connection" JSONB;

-- AlterTable
ALTER TABLE "gateway_executions" ADD COLUMN "connection" JSONB;
