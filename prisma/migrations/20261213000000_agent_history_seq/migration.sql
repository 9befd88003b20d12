-- The order an agent's decisions were serialized in (its lock is held from before the read of its
-- history until its entry commits, so the sequence numbers each agent's entries in that order):
-- a process keeps an agent's recent history and reads only the entries after the newest it holds.
ALTER TABLE "agent_history" ADD COLUMN "seq" BIGSERIAL NOT NULL;

CREATE INDEX "agent_history_org_id_svc_id_seq_idx" ON "agent_history"("org_id", "svc_id", "seq");
