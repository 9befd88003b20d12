import type { ApiModule } from '../../api/api-module.js';
import { toolOperations } from './tool.graphql.js';

/** Tools fall due every MCP_UPSTREAM_REFRESH_SECONDS; the sweep looks for them at least this often. */
const DEFINITIONS_SWEEP_MAX_SECONDS = 60;

export const toolModule: ApiModule = {
  name: 'tool',
  operations: toolOperations,
  jobs: [
    {
      // Reads the due mcp tools' upstream definitions; every process may run it (SKIP LOCKED claims).
      failure: 'tool definitions refresh failed',
      everyMs: (env) => Math.min(env.mcpUpstreamRefreshSeconds, DEFINITIONS_SWEEP_MAX_SECONDS) * 1000,
      run: (services) => services.tools.sweepDefinitions(),
    },
  ],
};
