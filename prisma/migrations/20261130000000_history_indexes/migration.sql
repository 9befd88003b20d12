-- Listings of records and audit entries read a page in the order of an index, whatever the
-- filter, instead of every match sorted: each filter gets an index that ends in the listing's order
-- (a record's seq; an audit entry's created_at and id).

-- Records: by agent, by action type, by action type and tool, by status; all newest seq first.
DROP INDEX "interaction_records_org_id_agent_id_created_at_idx";
CREATE INDEX "interaction_records_org_id_agent_id_seq_idx" ON "interaction_records"("org_id", "agent_id", "seq");
CREATE INDEX "interaction_records_org_id_action_type_seq_idx" ON "interaction_records"("org_id", "action_type", "seq");
CREATE INDEX "interaction_records_org_id_action_type_tool_seq_idx" ON "interaction_records"("org_id", "action_type", "tool", "seq");
CREATE INDEX "interaction_records_org_id_status_seq_idx" ON "interaction_records"("org_id", "status", "seq");

-- Audit entries: unfiltered, by action, by action family (`manifest` for every `manifest.…`), by
-- actor id, by actor label, by target; each then newest first with the id breaking ties.
DROP INDEX "audit_logs_org_id_created_at_idx";
CREATE INDEX "audit_logs_org_id_created_at_id_idx" ON "audit_logs"("org_id", "created_at", "id");
CREATE INDEX "audit_logs_org_id_action_created_at_id_idx" ON "audit_logs"("org_id", "action", "created_at", "id");
-- With the action itself: PostgreSQL reads an expression index alone only when the query's columns are in it.
CREATE INDEX "audit_logs_org_id_action_family_created_at_id_idx" ON "audit_logs"("org_id", split_part("action", '.', 1), "created_at", "id") INCLUDE ("action");
CREATE INDEX "audit_logs_org_id_actor_id_created_at_id_idx" ON "audit_logs"("org_id", "actor_id", "created_at", "id");
-- With the actor id, which a label's match excludes when the id matched already: counted from the index alone.
CREATE INDEX "audit_logs_org_id_actor_label_created_at_id_idx" ON "audit_logs"("org_id", "actor_label", "created_at", "id") INCLUDE ("actor_id");
DROP INDEX "audit_logs_org_id_target_type_target_id_idx";
CREATE INDEX "audit_logs_org_id_target_type_target_id_created_at_id_idx" ON "audit_logs"("org_id", "target_type", "target_id", "created_at", "id");
CREATE INDEX "audit_logs_org_id_target_type_created_at_id_idx" ON "audit_logs"("org_id", "target_type", "created_at", "id");
