import type { CallToolResult, Tool } from '@modelcontextprotocol/server';
import { AppError, FieldErrors } from '../../errors.js';
import type { AgentService } from '../agent/agent.service.js';
import { outOfScope, type AgentPrincipal } from '../../authz/authz.js';
import type {
  ConfirmationQuestion,
  DecisionOptions,
  ElicitationAction,
  GatewayService,
} from '../gateway/gateway.service.js';
import type { ManifestService } from '../manifest/manifest.service.js';
import type { PurchaseService } from '../marketplace/purchase.service.js';
import type { PolicyService } from '../policy/policy.service.js';
import type { ToolService } from '../tool/tool.service.js';
import type { Env } from '../../env.js';
import {
  callResultOf,
  capabilityOfToolName,
  connectRequestOf,
  type ConnectRequest,
  listedTools,
  META_APPROVAL_ID,
  META_CAPABILITY_TOKEN,
  type ConnectorDescription,
  type PinnedDefinition,
} from './mcp-tools.js';
import type { DefinitionState } from '../tool/tool-definitions.service.js';

/**
 * MCP proxy mode (docs/decisions/0038-mcp-proxy-mode.md): an agent's tools are its approved capabilities,
 * and a tools/call is the gateway's execute with channel "mcp". Nothing is decided here: the
 * call goes to the gateway service, the same code REST and GraphQL call.
 */

interface Collaborators {
  agents: Pick<AgentService, 'gate'>;
  manifests: Pick<ManifestService, 'current'>;
  tools: Pick<ToolService, 'forAction'>;
  policies: Pick<PolicyService, 'active'>;
  purchases: Pick<PurchaseService, 'operationDescriptions'>;
  gateway: Pick<GatewayService, 'decide' | 'postConfirmation' | 'confirmationStatus'>;
}

/** The definitions operators pinned (never what the upstream shows unaccepted), as tools/list takes them. */
function upstreamOf(tool: string | null, state: DefinitionState): ConnectorDescription['upstream'] {
  const pinned = new Map<string, PinnedDefinition>();
  for (const [name, kept] of state.definitions) if (kept.pinned) pinned.set(name, kept.pinned);
  return { tool, pinned };
}

export function createMcpService(
  { agents, manifests, tools, policies, purchases, gateway }: Collaborators,
  env: Pick<Env, 'mcpConfirmationsWaitingPerOrg'>,
) {
  /** The connector of each action type the manifest's capabilities use, as its tools are described. */
  async function connectorsOf(orgId: string, capabilities: readonly string[]) {
    const domains = [...new Set(capabilities.map((capability) => capability.slice(0, capability.indexOf(':'))))];
    const entries = await Promise.all(
      domains.map(async (domain): Promise<[string, ConnectorDescription | null]> => {
        const tool = await tools.forAction(orgId, domain);
        if (!tool) return [domain, null];
        const {
          description,
          input_schema,
          tool: upstreamTool,
        } = tool.config as Omit<ConnectorDescription, 'connector'> & { tool?: string | null };
        return [
          domain,
          {
            connector: tool.connector,
            description,
            input_schema,
            upstream: tool.definitions ? upstreamOf(upstreamTool ?? null, tool.definitions) : undefined,
          },
        ];
      }),
    );
    return new Map(entries);
  }

  /** tools/list. A key limited to other agents sees none (its calls are denied and recorded). */
  async function listTools(principal: AgentPrincipal, svcId: string): Promise<Tool[]> {
    if (outOfScope(principal, svcId)) return [];
    const { orgId } = principal;
    const [agent, manifest, active, templateDescriptions] = await Promise.all([
      agents.gate(orgId, svcId),
      manifests.current(orgId, svcId),
      policies.active(orgId),
      purchases.operationDescriptions(orgId, svcId),
    ]);
    const connectors = await connectorsOf(orgId, manifest?.approvedCapabilities ?? []);
    return listedTools({ svcId, agent, manifest, connectors, policies: active, templateDescriptions });
  }

  /**
   * tools/call: the execute decision of the capability the name stands for, as a tool result; and
   * when all it lacked is the user's connection to the tool's upstream, where to make it (`connect`),
   * which the edge turns into a URL elicitation for clients that accept one.
   */
  async function callTool(
    principal: AgentPrincipal,
    svcId: string,
    call: { name: string; arguments?: Record<string, unknown>; _meta?: Record<string, unknown> },
    awayWhile?: DecisionOptions['awayWhile'],
    confirmation?: DecisionOptions['confirmation'],
  ): Promise<{ result: CallToolResult; connect?: ConnectRequest; confirm?: ConfirmationQuestion }> {
    const manifest = await manifests.current(principal.orgId, svcId);
    const capability = capabilityOfToolName(call.name, manifest);
    if (!capability)
      throw new AppError('NOT_FOUND', `Unknown tool "${call.name}": tools/list names the tools of this agent`);
    const errors = new FieldErrors();
    const metaString = (key: string) => {
      const value = call._meta?.[key];
      if (value === undefined || value === null) return null;
      if (typeof value !== 'string') errors.add(`_meta.${key}`, 'must be a string');
      return typeof value === 'string' ? value : null;
    };
    const approvalId = metaString(META_APPROVAL_ID);
    const capabilityToken = metaString(META_CAPABILITY_TOKEN);
    errors.throwIfAny();
    const at = capability.indexOf(':');
    const outcome = await gateway.decide(
      principal,
      {
        svc_id: svcId,
        agent_id: manifest?.agentId ?? svcId,
        action: { type: capability.slice(0, at), tool: capability.slice(at + 1), params: call.arguments ?? {} },
        approval_id: approvalId,
        capability_token: capabilityToken,
      },
      { mode: 'execute', channel: 'mcp', awayWhile, confirmation },
    );
    const connect = connectRequestOf(outcome);
    return {
      result: callResultOf(outcome),
      ...(connect ? { connect } : {}),
      ...(outcome.confirm ? { confirm: outcome.confirm } : {}),
    };
  }

  /**
   * 2025-11-25 confirmation (docs/decisions/0089-confirmation-by-the-agents-user.md): the call that
   * asked waits here for its user's answer, which is posted separately and may reach any process.
   * An answer posted to this process wakes it at once; one posted to another is seen at the next
   * look at the question's row. It ends answered, gone (expired: the row says when), or when the
   * client went away.
   */
  const waiting = new Map<string, () => void>();
  /**
   * Calls waiting per org: a call waits up to the question's 10 minutes without its org's turn,
   * so the org's limits on requests in the process do not bound them; this does.
   */
  const waitingPerOrg = new Map<string, number>();
  const mayWait = (orgId: string) => (waitingPerOrg.get(orgId) ?? 0) < env.mcpConfirmationsWaitingPerOrg;

  async function awaitConfirmation(
    principal: AgentPrincipal,
    svcId: string,
    id: string,
    signal: AbortSignal,
  ): Promise<void> {
    const { orgId } = principal;
    waitingPerOrg.set(orgId, (waitingPerOrg.get(orgId) ?? 0) + 1);
    try {
      await lookUntilAnswered(principal, svcId, id, signal);
    } finally {
      const left = (waitingPerOrg.get(orgId) ?? 1) - 1;
      if (left) waitingPerOrg.set(orgId, left);
      else waitingPerOrg.delete(orgId);
    }
  }

  async function lookUntilAnswered(principal: AgentPrincipal, svcId: string, id: string, signal: AbortSignal) {
    for (let pause = FIRST_LOOK_MS; !signal.aborted; pause = Math.min(pause * 2, LAST_LOOK_MS)) {
      if ((await gateway.confirmationStatus(principal, svcId, id)) !== 'open') return;
      await new Promise<void>((resolve) => {
        const done = () => {
          clearTimeout(timer);
          signal.removeEventListener('abort', done);
          waiting.delete(id);
          resolve();
        };
        const timer = setTimeout(done, pause);
        signal.addEventListener('abort', done);
        waiting.set(id, done);
      });
    }
  }

  /** A client's posted answer to a question of this agent: kept, and the call waiting here woken. */
  async function postConfirmation(
    principal: AgentPrincipal,
    svcId: string,
    answer: { id: string; action: ElicitationAction },
  ): Promise<boolean> {
    const kept = await gateway.postConfirmation(principal, svcId, answer);
    if (kept) waiting.get(answer.id)?.();
    return kept;
  }

  return { listTools, callTool, mayWait, awaitConfirmation, postConfirmation };
}

/** How often a waiting call looks at its question: soon at first, then at most every second. */
const FIRST_LOOK_MS = 100;
const LAST_LOOK_MS = 1000;

export type McpService = ReturnType<typeof createMcpService>;
