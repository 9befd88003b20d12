-- Upstream MCP tool definitions and their pins (docs/decisions/0050-upstream-tool-definitions.md).
-- An `mcp` tool reads its upstream's tools/list; each definition is kept with the SHA-256 of its
-- RFC 8785 canonical JSON. `pinned` is what an operator accepted (the first read after the tool
-- was saved, later ones only by accepting), `current` what the upstream showed last. A row with no
-- pin is a tool that appeared upstream later; a pin with no current one is a tool gone upstream.
-- `definitions_pinned` on the tool: whether the first read happened (until then nothing is pinned
-- and calls are not held to definitions).

-- AlterTable
ALTER TABLE "tools" ADD COLUMN "definitions_pinned" BOOLEAN NOT NULL DEFAULT false,
ADD COLUMN "definitions_checked_at" TIMESTAMPTZ(3),
ADD COLUMN "definitions_error" TEXT;

-- CreateTable
CREATE TABLE "tool_definitions" (
    "tool_id" TEXT NOT NULL,
    "name" TEXT NOT NULL,
    "pinned" JSONB,
    "pinned_hash" TEXT,
    "pinned_at" TIMESTAMPTZ(3),
    "current" JSONB,
    "current_hash" TEXT,
    "changed_at" TIMESTAMPTZ(3),

    CONSTRAINT "tool_definitions_pkey" PRIMARY KEY ("tool_id","name")
);

-- AddForeignKey
ALTER TABLE "tool_definitions" ADD CONSTRAINT "tool_definitions_tool_id_fkey" FOREIGN KEY ("tool_id") REFERENCES "tools"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- The periodic refresh picks the mcp tools read longest ago.
CREATE INDEX "tools_definitions_checked_at_idx" ON "tools"("definitions_checked_at") WHERE "connector" = 'mcp';
