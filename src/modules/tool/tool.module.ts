import { type ApiModule, MAINTENANCE_EVERY_MS } from '../../api/api-module.js';
import { CONNECTION_USAGE_FLUSH_MS } from './tool-connections.service.js';
import { toolConnectionOperations } from './tool-connections.graphql.js';
import { toolOperations } from './tool.graphql.js';

/** Tools fall due every MCP_UPSTREAM_REFRESH_SECONDS; the sweep looks for them at least this often. */
const DEFINITIONS_SWEEP_MAX_SECONDS = 60;

export const toolModule: ApiModule = {
  name: 'tool',
  operations: [...toolOperations, ...toolConnectionOperations],
  jobs: [
    {
      // Reads the due mcp tools' upstream definitions; every process may run it (SKIP LOCKED claims).
      failure: 'tool definitions refresh failed',
      everyMs: (env) => Math.min(env.mcpUpstreamRefreshSeconds, DEFINITIONS_SWEEP_MAX_SECONDS) * 1000,
      run: (services) => services.tools.sweepDefinitions(),
    },
    {
      // When each connection was last used, batched: a call writes nothing of its own.
      failure: 'recording tool connection use failed',
      everyMs: () => CONNECTION_USAGE_FLUSH_MS,
      run: (services) => services.tools.flushConnectionUsage(),
    },
    {
      // Connection authorizations past their expiry.
      failure: 'maintenance failed',
      everyMs: () => MAINTENANCE_EVERY_MS,
      run: (services) => services.tools.pruneConnectionAuthorizations(),
    },
  ],
};
