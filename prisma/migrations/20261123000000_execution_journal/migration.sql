-- The gateway's write-ahead journal: an allowed execute writes its row in the statement that
-- counts its budget, before the tool is called; the row goes once the interaction's record is
-- written. A row left by a process that died (its advisory lock on `owner` is free) becomes a
-- record marked as interrupted, so every tool invocation has a record after any crash.
-- No index besides the key: the table holds only executions in flight (a few per connection), and
-- every index would be one more write on each execute's commit and on its deletion.
-- CreateTable
CREATE TABLE "gateway_executions" (
    "id" TEXT NOT NULL,
    "org_id" UUID NOT NULL,
    "owner" INTEGER NOT NULL,
    "svc_id" TEXT NOT NULL,
    "agent_id" TEXT NOT NULL,
    "action_type" TEXT NOT NULL,
    "tool" TEXT NOT NULL,
    "capability" TEXT NOT NULL,
    "params_hash" TEXT NOT NULL,
    "params" JSONB,
    "approval_id" TEXT,
    "started_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "gateway_executions_pkey" PRIMARY KEY ("id")
);
