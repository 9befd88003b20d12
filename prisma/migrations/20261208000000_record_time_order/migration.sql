-- Records are stamped in seq order: an append stamps each record no earlier than the head's last
-- (docs/decisions/0073-record-time-order.md), so an org's records by seq are in time order and a
-- `from`/`to` window is the one seq range between its first and last record. The head remembers
-- its record's time so that the next append can read it with the head it already reads.

-- AlterTable
ALTER TABLE "record_chain_heads" ADD COLUMN "last_created_at" TIMESTAMPTZ(3);

-- The heads of existing chains take their last record's time.
UPDATE "record_chain_heads" h
SET "last_created_at" = r."created_at"
FROM "interaction_records" r
WHERE r."org_id" = h."org_id" AND r."seq" = h."seq";
