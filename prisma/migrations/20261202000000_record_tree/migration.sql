-- Records as a transparency log (docs/decisions/0059-records-as-a-transparency-log.md): each org's
-- records are the leaves of a Merkle tree (RFC 9162), in seq order.
--
-- A node at level L ≥ 1, index i covers leaves [i·2^L, (i+1)·2^L) and is complete once the record
-- with seq (i+1)·2^L is appended: that record keeps it, in `tree_nodes` (the 32-byte hashes of the
-- nodes it completed, level 1 first; NULL when it completed none). Leaves are not stored: a leaf
-- is SHA-256(0x00 ‖ the 32 bytes of record_hash).
ALTER TABLE "interaction_records" ADD COLUMN "tree_nodes" BYTEA;

-- The tree's right edge at the head: the roots of its complete subtrees, largest first, one per
-- bit set in seq. An append needs nothing else, and writes it with the head in the same statement.
ALTER TABLE "record_chain_heads" ADD COLUMN "tree_frontier" BYTEA NOT NULL DEFAULT '\x'::BYTEA;

-- Signed checkpoints (C2SP tlog-checkpoint in a signed note), at most one per org every
-- CHECKPOINT_SECONDS while its tree grows. Kept: proofs are asked for at a checkpoint's size.
CREATE TABLE "record_checkpoints" (
    "org_id" UUID NOT NULL,
    "tree_size" BIGINT NOT NULL,
    "root_hash" BYTEA NOT NULL,
    "note" TEXT NOT NULL,
    "key_id" TEXT NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "record_checkpoints_pkey" PRIMARY KEY ("org_id", "tree_size")
);

-- The trees of the chains appended before this migration, record by record in seq order, as an
-- append computes them.
DO $$
DECLARE
    "head" RECORD;
    "rec" RECORD;
    "edge" BYTEA[];
    "node" BYTEA;
    "completed" BYTEA;
    "level" INT;
    "size" BIGINT;
BEGIN
    FOR "head" IN SELECT "org_id", "seq" FROM "record_chain_heads" LOOP
        "edge" := '{}';
        "size" := 0;
        FOR "rec" IN
            SELECT "id", "record_hash" FROM "interaction_records" WHERE "org_id" = "head"."org_id" ORDER BY "seq"
        LOOP
            "node" := sha256('\x00'::BYTEA || decode(substr("rec"."record_hash", 8), 'hex'));
            "completed" := '\x'::BYTEA;
            "level" := 0;
            WHILE ("size" >> "level") & 1 = 1 LOOP
                "node" := sha256('\x01'::BYTEA || "edge"[cardinality("edge")] || "node");
                "edge" := "edge"[1:cardinality("edge") - 1];
                "completed" := "completed" || "node";
                "level" := "level" + 1;
            END LOOP;
            "edge" := "edge" || "node";
            "size" := "size" + 1;
            IF "level" > 0 THEN
                UPDATE "interaction_records" SET "tree_nodes" = "completed" WHERE "id" = "rec"."id";
            END IF;
        END LOOP;
        IF "size" <> "head"."seq" THEN
            RAISE EXCEPTION 'org % has % records but its chain head is at seq %', "head"."org_id", "size", "head"."seq";
        END IF;
        UPDATE "record_chain_heads"
        SET "tree_frontier" = COALESCE((SELECT string_agg("e", '\x'::BYTEA ORDER BY "n") FROM unnest("edge") WITH ORDINALITY AS "t"("e", "n")), '\x'::BYTEA)
        WHERE "org_id" = "head"."org_id";
    END LOOP;
END $$;
