import type { CallToolResult, Tool } from '@modelcontextprotocol/server';
import { withoutHiddenCharacters } from '../../lib/hidden-characters.js';
import type { AgentGate } from '../agent/agent.service.js';
import type { DecisionOutcome } from '../gateway/gateway.service.js';
import type { CurrentManifest } from '../manifest/manifest.service.js';
import { deniedUnconditionally, type ActivePolicy } from '../policy/policy-rules.js';
import { capabilityOfPlainName, toolNameOf } from './tool-names.js';

/**
 * What MCP shows of an agent and how a decision reads to a model (docs/decisions/0038-mcp-proxy-mode.md),
 * as pure functions: mcp.service.ts loads the agent, its manifest, connectors, policies and
 * descriptions, and the decision comes from the gateway service like any other channel's.
 */

/** `_meta` keys of a tools/call that carry what REST and GraphQL take as body fields. */
export const META_APPROVAL_ID = 'agent-gateway/approval_id';
export const META_CAPABILITY_TOKEN = 'agent-gateway/capability_token';
/** `_meta` key of every tools/call result: the interaction (and record) id. */
export const META_INTERACTION_ID = 'agent-gateway/interaction_id';
/** In a tools/call result's `_meta`: the decision's labels, when it has any. */
export const META_LABELS = 'agent-gateway/labels';
/** In a tools/call result's `_meta`: what a redaction replaced in the result, when anything was. */
export const META_REDACTIONS = 'agent-gateway/redactions';

/** The parts of a connector's stored config that describe its tools (any connector kind). */
export interface ConnectorDescription {
  connector: string;
  description?: string;
  input_schema?: Record<string, unknown>;
  /** An mcp connector's upstream: the tool it calls (null: the action) and the definitions operators pinned, by name. */
  upstream?: { tool: string | null; pinned: ReadonlyMap<string, PinnedDefinition> };
}

/** What tools/list takes from a pinned upstream definition. */
export interface PinnedDefinition {
  description?: string;
  inputSchema: Record<string, unknown>;
  annotations?: Record<string, unknown>;
}

export interface AgentTools {
  svcId: string;
  agent: AgentGate | null;
  manifest: CurrentManifest | null;
  /** The org's connector by action type (the capability's `<domain>`); null: none configured. */
  connectors: ReadonlyMap<string, ConnectorDescription | null>;
  policies: readonly ActivePolicy[];
  /** Descriptions of capabilities from the marketplace template the agent was acquired from. */
  templateDescriptions: ReadonlyMap<string, string>;
}

const domainOf = (capability: string) => capability.slice(0, capability.indexOf(':'));
const ANY_OBJECT = { type: 'object' } as const;

/**
 * One tool per approved capability of the agent's active manifest that has a connector, except
 * what an unconditional enforced deny blocks; none while the agent is deactivated or its manifest
 * is not active (a call still gets its recorded denial).
 */
export function listedTools(source: AgentTools): Tool[] {
  const { manifest, agent } = source;
  if (manifest?.status !== 'active' || agent?.status === 'deactivated') return [];
  const tools: Tool[] = [];
  for (const capability of manifest.approvedCapabilities) {
    const connector = source.connectors.get(domainOf(capability));
    if (!connector || deniedUnconditionally(source.policies, source.svcId, capability)) continue;
    const needsHuman = manifest.requireHumanApproval.includes(capability);
    const pinned = connector.upstream?.pinned.get(
      connector.upstream.tool ?? capability.slice(capability.indexOf(':') + 1),
    );
    const description =
      source.templateDescriptions.get(capability) ??
      connector.description ??
      pinned?.description ??
      `The \`${capability}\` capability of ${manifest.agent.name}.`;
    // What an upstream or a tenant wrote reaches the model without the characters a reader cannot
    // see (an instruction smuggled in tag characters, text reordered by bidi controls).
    const described = withoutHiddenCharacters({
      description,
      inputSchema: ((connector.input_schema ?? pinned?.inputSchema) as Tool['inputSchema'] | undefined) ?? ANY_OBJECT,
      annotations: pinned?.annotations,
    });
    tools.push({
      name: toolNameOf(capability),
      title: capability,
      description: needsHuman
        ? `${described.description} A human must approve each call: the first call answers with an approval_id.`
        : described.description,
      inputSchema: described.inputSchema,
      ...(described.annotations ? { annotations: described.annotations } : {}),
      _meta: { 'agent-gateway/capability': capability, 'agent-gateway/connector': connector.connector },
    });
  }
  return tools;
}

/**
 * The capability a tools/call name stands for: one of the manifest's approved capabilities, or
 * the capability a plain name spells (its call is then denied with a record, as REST would deny
 * it); undefined for a name that stands for nothing.
 */
export function capabilityOfToolName(name: string, manifest: CurrentManifest | null): string | undefined {
  const approved = manifest?.approvedCapabilities.find((capability) => toolNameOf(capability) === name);
  return approved ?? capabilityOfPlainName(name);
}

const json = (value: unknown) => JSON.stringify(value);

/**
 * A decision as a tools/call result. Executed: the tool's data as `structuredContent` and as JSON
 * text, `isError` when the tool failed (with its error as text, for the model). Denied, waiting
 * for a human or rate-limited: `isError` with the reasons in words and as `structuredContent`.
 */
export function callResultOf(outcome: DecisionOutcome): CallToolResult {
  const { decision, rateLimited } = outcome;
  const _meta = {
    [META_INTERACTION_ID]: decision.interaction_id,
    ...(decision.labels.length ? { [META_LABELS]: decision.labels } : {}),
    ...(decision.redactions.length ? { [META_REDACTIONS]: decision.redactions } : {}),
  };
  const { result } = decision;
  if (decision.executed && result) {
    const content: CallToolResult['content'] = [{ type: 'text', text: json(result.data) }];
    if (!result.success)
      content.push({ type: 'text', text: `The tool failed: ${result.error.code}: ${result.error.message}` });
    return { content, structuredContent: result.data, isError: !result.success, _meta };
  }
  const reasons = decision.reasons.map((r) => ({ code: r.code, message: r.message, details: r.details ?? null }));
  const lines = ['Agent Gateway denied this call.', ...reasons.map((r) => `- ${r.code}: ${r.message}`)];
  const asked = decision.approval_id && decision.reasons.some((r) => r.code === 'APPROVAL_REQUIRED');
  if (asked) {
    lines.push(
      `A human has been asked to approve it (approval_id ${decision.approval_id}). Once approved, call the tool again with the ` +
        `same arguments and _meta {"${META_APPROVAL_ID}": "${decision.approval_id}"}.`,
    );
  }
  if (rateLimited) lines.push(`Retry after ${rateLimited.retryAfterSeconds} s.`);
  return {
    content: [{ type: 'text', text: lines.join('\n') }],
    structuredContent: {
      decision: decision.decision,
      reasons,
      interaction_id: decision.interaction_id,
      approval_id: decision.approval_id,
      ...(rateLimited ? { retry_after_seconds: rateLimited.retryAfterSeconds } : {}),
    },
    isError: true,
    _meta,
  };
}

/**
 * What an MCP client that accepts URL elicitation is asked to open instead of getting the
 * denial as a tool error: the page where its user connects the tool's account
 * (docs/decisions/0069-connect-by-url-elicitation.md). Only when that connection is all the call
 * lacks; `elicitationId` is the denied call's interaction id.
 */
export interface ConnectRequest {
  url: string;
  message: string;
  elicitationId: string;
}

export function connectRequestOf({ decision }: DecisionOutcome): ConnectRequest | undefined {
  const [reason, ...others] = decision.reasons;
  if (decision.executed || others.length || reason?.code !== 'UPSTREAM_AUTHORIZATION_REQUIRED') return undefined;
  const url = reason.details?.connect_url;
  if (typeof url !== 'string') return undefined;
  return {
    url,
    message: `${reason.message}. Open the page, connect the account, then call the tool again.`,
    elicitationId: decision.interaction_id,
  };
}
