-- Policies that see more than one call (docs/decisions/0086-policy-history-and-labels.md).

-- A `label` policy's labels, a `redact` policy's detectors, and the history window a policy's
-- condition sees (null: no history).
ALTER TABLE "policies" ADD COLUMN "labels" TEXT[];
ALTER TABLE "policies" ADD COLUMN "detectors" TEXT[];
ALTER TABLE "policies" ADD COLUMN "history_window_seconds" INTEGER;

-- The labels of a decision, signed into its record's body (null when none, as on every older record),
-- and kept by the journal so that a record written on recovery carries them too.
ALTER TABLE "interaction_records" ADD COLUMN "labels" TEXT[];
-- After a redact policy changed the result: the SHA-256 of the original, and what was replaced.
ALTER TABLE "interaction_records" ADD COLUMN "original_result_hash" TEXT;
ALTER TABLE "interaction_records" ADD COLUMN "redactions" JSONB;
ALTER TABLE "gateway_executions" ADD COLUMN "labels" TEXT[];

-- The records listing's `label` filter reads only labelled records, in seq order: a partial index
-- costs nothing on the inserts of unlabelled records, the gateway's usual case.
CREATE INDEX "interaction_records_labelled_idx" ON "interaction_records" ("org_id", "seq") WHERE "labels" IS NOT NULL;

-- What a history policy's condition sees of an agent's earlier decisions: written, under the
-- agent's advisory lock, only for agents that an enabled history policy targets; an agent's
-- entries older than the longest window (one day) are deleted by its next write.
CREATE TABLE "agent_history" (
    "org_id" UUID NOT NULL,
    "svc_id" TEXT NOT NULL,
    "at" TIMESTAMPTZ(3) NOT NULL,
    "id" TEXT NOT NULL,
    "action_type" TEXT NOT NULL,
    "tool" TEXT NOT NULL,
    "capability" TEXT NOT NULL,
    "decision" TEXT NOT NULL,
    "executed" BOOLEAN NOT NULL,
    "labels" TEXT[] DEFAULT ARRAY[]::TEXT[],

    CONSTRAINT "agent_history_pkey" PRIMARY KEY ("org_id", "svc_id", "at", "id")
);

ALTER TABLE "agent_history" ADD CONSTRAINT "agent_history_org_id_fkey" FOREIGN KEY ("org_id") REFERENCES "organizations"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- Confirmations of calls by the MCP client's user (effect require_confirmation): one row per
-- question asked, bound to the call's hash, answered at most once, on any process.
CREATE TABLE "call_confirmations" (
    "id" TEXT NOT NULL,
    "org_id" UUID NOT NULL,
    "svc_id" TEXT NOT NULL,
    "call_hash" TEXT NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "expires_at" TIMESTAMPTZ(3) NOT NULL,
    "answered_at" TIMESTAMPTZ(3),
    "action" TEXT,
    "answered_by" TEXT,

    CONSTRAINT "call_confirmations_pkey" PRIMARY KEY ("id")
);

CREATE INDEX "call_confirmations_org_id_svc_id_expires_at_idx" ON "call_confirmations"("org_id", "svc_id", "expires_at");

ALTER TABLE "call_confirmations" ADD CONSTRAINT "call_confirmations_org_id_fkey" FOREIGN KEY ("org_id") REFERENCES "organizations"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- The confirmation a record's call ran with ({id, by}), signed into its body; null without one.
ALTER TABLE "interaction_records" ADD COLUMN "confirmation" JSONB;
