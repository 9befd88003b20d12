import {
  callResultOf,
  capabilityOfToolName,
  listedTools,
  type AgentTools,
} from '../../../src/modules/mcp/mcp-tools.js';
import { capabilityOfPlainName, TOOL_NAME_PATTERN, toolNameOf } from '../../../src/modules/mcp/tool-names.js';
import type { DecisionOutcome } from '../../../src/modules/gateway/gateway.service.js';
import type { CurrentManifest } from '../../../src/modules/manifest/manifest.service.js';
import type { ActivePolicy } from '../../../src/modules/policy/policy-rules.js';

/** MCP proxy mode without a database or a network: tool names, the tool list and result shapes. */

describe('tool names', () => {
  test('plain capabilities read as themselves and turn back into them', () => {
    expect(toolNameOf('billing:refund')).toBe('billing__refund');
    expect(toolNameOf('crm-v2:add-note')).toBe('crm-v2__add-note');
    expect(capabilityOfPlainName('billing__refund')).toBe('billing:refund');
    expect(capabilityOfPlainName('billing_refund')).toBeUndefined();
  });

  test('every capability gets a name providers accept, stable and distinct', () => {
    const capabilities = [
      'billing:refund',
      'payments.v2:send',
      'payments_v2:send',
      'payments:v2_send',
      'payments.v2_:send',
      'a_:b',
      'a:_b',
      'a__b:c',
      'a:__b',
      '_:_',
      `${'x'.repeat(60)}:read`,
      `${'x'.repeat(60)}:write`,
      `${'d'.repeat(63)}:${'a'.repeat(63)}`,
    ];
    const names = capabilities.map(toolNameOf);
    for (const name of names) expect(name).toMatch(TOOL_NAME_PATTERN);
    expect(new Set(names).size).toBe(capabilities.length);
    expect(capabilities.map(toolNameOf)).toEqual(names);
    // A hashed name is never mistaken for a plain one.
    for (const [i, name] of names.entries()) {
      const plain = capabilityOfPlainName(name);
      if (plain !== undefined) expect(plain).toBe(capabilities[i]);
    }
    expect(capabilityOfPlainName(toolNameOf('payments.v2:send'))).toBeUndefined();
  });
});

const manifest: CurrentManifest = {
  id: 'm-1',
  status: 'active',
  agentId: 'billing-agent',
  agent: { name: 'Billing agent', version: '1.0.0', team: '' },
  approvedCapabilities: ['billing:read', 'billing:refund', 'email:send', 'crm.v2:note'],
  requireHumanApproval: ['billing:refund'],
  limits: { maxActionsPerHour: 10, maxActionsPerDay: 100 },
};

const deny = (overrides: Partial<ActivePolicy>): ActivePolicy => ({
  id: 'p',
  name: 'p',
  version: 1,
  mode: 'enforce',
  priority: 100,
  effect: 'deny',
  svcIds: null,
  capabilities: ['billing:read'],
  condition: null,
  rateLimit: null,
  message: null,
  labels: [],
  historyWindowSeconds: null,
  detectors: [],
  ...overrides,
});

function source(overrides: Partial<AgentTools> = {}): AgentTools {
  return {
    svcId: 'billing-agent',
    agent: { status: 'active', deactivationReason: null },
    manifest,
    connectors: new Map([
      [
        'billing',
        {
          connector: 'http',
          description: 'The billing API.',
          input_schema: { type: 'object', properties: { amount: { type: 'number' } } },
        },
      ],
      ['email', null],
      ['crm.v2', { connector: 'mcp' }],
    ]),
    policies: [],
    templateDescriptions: new Map([['billing:read', 'Read an invoice.']]),
    ...overrides,
  };
}

describe('the tool list', () => {
  test('approved capabilities with a connector, described by the template, then the connector, then the manifest', () => {
    const tools = listedTools(source());
    expect(tools.map((tool) => tool.title)).toEqual(['billing:read', 'billing:refund', 'crm.v2:note']);
    expect(tools[0]).toMatchObject({
      name: 'billing__read',
      description: 'Read an invoice.',
      inputSchema: { properties: { amount: {} } },
    });
    expect(tools[1].description).toMatch(/^The billing API\. A human must approve/);
    expect(tools[2]).toMatchObject({
      name: toolNameOf('crm.v2:note'),
      description: expect.stringContaining('Billing agent'),
      inputSchema: { type: 'object' },
    });
  });

  test('an unconditional enforced deny hides a tool; shadow, conditional or other agents’ policies do not', () => {
    const titles = (policies: ActivePolicy[]) => listedTools(source({ policies })).map((tool) => tool.title);
    expect(titles([deny({})])).toEqual(['billing:refund', 'crm.v2:note']);
    expect(titles([deny({ capabilities: ['billing:*'] })])).toEqual(['crm.v2:note']);
    expect(titles([deny({ mode: 'shadow' })])).toHaveLength(3);
    expect(titles([deny({ svcIds: ['another'] })])).toHaveLength(3);
    expect(titles([deny({ effect: 'require_approval' })])).toHaveLength(3);
    expect(titles([deny({ condition: {} as ActivePolicy['condition'] })])).toHaveLength(3);
  });

  test('no tools without an active manifest or for a deactivated agent', () => {
    expect(listedTools(source({ manifest: { ...manifest, status: 'suspended' } }))).toEqual([]);
    expect(listedTools(source({ manifest: null }))).toEqual([]);
    expect(listedTools(source({ agent: { status: 'deactivated', deactivationReason: 'x' } }))).toEqual([]);
  });

  test('names resolve to approved capabilities, or plain names to what they spell', () => {
    expect(capabilityOfToolName(toolNameOf('crm.v2:note'), manifest)).toBe('crm.v2:note');
    expect(capabilityOfToolName('billing__delete', manifest)).toBe('billing:delete');
    expect(capabilityOfToolName(toolNameOf('other.x:y'), manifest)).toBeUndefined();
  });
});

describe('results', () => {
  const decision = { interaction_id: 'int_1', approval_id: null, policies: [], labels: [], redactions: [] };
  test('executed: data as structuredContent and text; a failed tool is an error with its code', () => {
    const ok: DecisionOutcome = {
      decision: {
        ...decision,
        decision: 'allow',
        executed: true,
        reasons: [],
        result: { success: true, data: { id: 7 } },
      },
      budget: null,
      rateLimited: null,
    };
    expect(callResultOf(ok)).toEqual({
      content: [{ type: 'text', text: '{"id":7}' }],
      structuredContent: { id: 7 },
      isError: false,
      _meta: { 'agent-gateway/interaction_id': 'int_1' },
    });
    const failed = callResultOf({
      ...ok,
      decision: {
        ...ok.decision,
        result: { success: false, data: {}, error: { code: 'TOOL_TIMEOUT', message: 'late' } },
      },
    });
    expect(failed.isError).toBe(true);
    expect(failed.content).toContainEqual({ type: 'text', text: 'The tool failed: TOOL_TIMEOUT: late' });
  });

  test('denied or rate-limited: isError with the reasons in words and as structuredContent', () => {
    const reason = {
      code: 'POLICY_VIOLATION' as const,
      message: 'The hourly limit of 2 actions is reached',
      details: { limit: 2 },
    };
    const limited = callResultOf({
      decision: { ...decision, decision: 'deny', executed: false, reasons: [reason], result: null },
      budget: null,
      rateLimited: { reason, limit: 2, resetAt: 0, retryAfterSeconds: 42 },
    });
    expect(limited.isError).toBe(true);
    expect(limited.structuredContent).toEqual({
      decision: 'deny',
      reasons: [reason],
      interaction_id: 'int_1',
      approval_id: null,
      retry_after_seconds: 42,
    });
    expect((limited.content[0] as { text: string }).text).toMatch(
      /POLICY_VIOLATION: The hourly limit[\s\S]*Retry after 42 s/,
    );
  });
});
