import { budgetState, budgetWindows } from '../../../src/modules/gateway/budget.js';
import {
  checkDecision,
  parseGatewayRequest,
  shouldAskHuman,
  type DecisionContext,
  type GatewayCall,
} from '../../../src/modules/gateway/decision.js';
import type { CurrentManifest } from '../../../src/modules/manifest/manifest.service.js';

/** The decision's rules without a database: every check of docs/reference/gateway.md, in its order. */

const manifest: CurrentManifest = {
  id: 'm-1',
  status: 'active',
  agentId: 'billing-agent',
  agent: { name: 'Billing agent', version: '1.0.0', team: 'payments' },
  approvedCapabilities: ['billing:read', 'billing:refund'],
  requireHumanApproval: ['billing:refund'],
  limits: { maxActionsPerHour: 10, maxActionsPerDay: 100 },
};

function call(overrides: Partial<GatewayCall> = {}): GatewayCall {
  return {
    svcId: 'billing-agent',
    agentId: 'billing-agent',
    action: { type: 'billing', tool: 'read', params: {} },
    capability: 'billing:read',
    capabilityToken: null,
    approvalId: null,
    ...overrides,
  };
}

function context(overrides: Partial<DecisionContext> = {}): DecisionContext {
  return {
    call: call(),
    mode: 'execute',
    keySvcIds: [],
    agent: { status: 'active', deactivationReason: null },
    manifest,
    token: null,
    approval: null,
    toolConfigured: true,
    budget: null,
    policies: [],
    limits: null,
    ...overrides,
  };
}

const codes = (c: DecisionContext) => checkDecision(c).reasons.map((r) => r.code);
const windows = budgetWindows('org', 'billing-agent', Date.UTC(2026, 10, 23, 10, 30));

describe('parseGatewayRequest', () => {
  test('builds the call and its capability', () => {
    const parsed = parseGatewayRequest({ svc_id: 's', agent_id: 'a', action: { type: 'billing', tool: 'read' } });
    expect(parsed).toEqual({
      call: {
        svcId: 's',
        agentId: 'a',
        action: { type: 'billing', tool: 'read', params: {} },
        capability: 'billing:read',
        capabilityToken: null,
        approvalId: null,
      },
    });
  });

  test('names every problem of the request', () => {
    const parsed = parseGatewayRequest({
      svc_id: '',
      agent_id: '',
      action: { type: 'Billing', tool: 'a:b', params: [] },
    });
    expect('errors' in parsed && parsed.errors.map((e) => e.field)).toEqual([
      'svc_id',
      'agent_id',
      'action.type',
      'action.tool',
      'action.params',
    ]);
  });

  test('refuses what a record cannot store, whichever channel it came through', () => {
    const deep = JSON.parse('{"a":'.repeat(70) + '1' + '}'.repeat(70));
    const tooDeep = parseGatewayRequest({
      svc_id: 's',
      agent_id: 'a',
      action: { type: 'billing', tool: 'read', params: deep },
    });
    expect('errors' in tooDeep && tooDeep.errors[0]).toMatchObject({
      field: expect.stringMatching(/^action\.params\.a/),
      message: expect.stringMatching(/deeper/),
    });
    const nul = parseGatewayRequest({
      svc_id: 's',
      agent_id: 'a',
      action: { type: 'billing', tool: 'read' },
      approval_id: 'x\u0000y',
    });
    expect('errors' in nul && nul.errors).toEqual([{ field: 'approval_id', message: expect.stringContaining('NUL') }]);
  });
});

describe('checkDecision', () => {
  test('allows an approved capability of an active manifest with a tool', () => {
    expect(checkDecision(context())).toEqual({ reasons: [], needsHuman: false });
  });

  test('reports every failing check in the order of docs/reference/gateway.md', () => {
    const c = context({
      call: call({ agentId: 'other', action: { type: 'email', tool: 'send', params: {} }, capability: 'email:send' }),
      keySvcIds: ['someone-else'],
      agent: { status: 'deactivated', deactivationReason: 'incident 42' },
      manifest: { ...manifest, status: 'suspended' },
      token: { ok: false, message: 'The capability token has expired' },
      toolConfigured: false,
    });
    expect(codes(c)).toEqual([
      'SVC_NOT_ALLOWED_FOR_KEY',
      'AGENT_DEACTIVATED',
      'MANIFEST_NOT_ACTIVE',
      'AGENT_MISMATCH',
      'CAPABILITY_NOT_APPROVED',
      'CAPABILITY_TOKEN_INVALID',
      'TOOL_NOT_CONFIGURED',
    ]);
  });

  test('a tool whose user has no connection to use: UPSTREAM_AUTHORIZATION_REQUIRED with where to connect, after the tool checks', () => {
    const upstreamAuthorization = {
      connectUrl: 'https://gw.example/console/tools/tool_1',
      reason: 'reauthorization_required',
    };
    expect(checkDecision(context({ upstreamAuthorization })).reasons).toEqual([
      {
        code: 'UPSTREAM_AUTHORIZATION_REQUIRED',
        message:
          'The tool for "billing" acts with an account its user connects, and there is none to use (reauthorization required): connect it at https://gw.example/console/tools/tool_1',
        details: { connect_url: 'https://gw.example/console/tools/tool_1', reason: 'reauthorization_required' },
      },
    ]);
    const held = { code: 'TOOL_NOT_FOUND_UPSTREAM' as const, message: 'gone', details: { tool: 'read' } };
    expect(
      codes(context({ upstreamAuthorization, toolHold: held, manifest: { ...manifest, status: 'suspended' } })),
    ).toEqual(['MANIFEST_NOT_ACTIVE', 'TOOL_NOT_FOUND_UPSTREAM', 'UPSTREAM_AUTHORIZATION_REQUIRED']);
  });

  test('a deactivated agent is denied, with the reason it was given', () => {
    const c = context({ agent: { status: 'deactivated', deactivationReason: 'incident 42' } });
    expect(checkDecision(c).reasons).toEqual([
      { code: 'AGENT_DEACTIVATED', message: 'Agent "billing-agent" is deactivated: incident 42' },
    ]);
    expect(
      checkDecision(context({ agent: { status: 'deactivated', deactivationReason: null } })).reasons[0].message,
    ).toBe('Agent "billing-agent" is deactivated');
  });

  test('no manifest', () => {
    expect(codes(context({ manifest: null }))).toEqual(['MANIFEST_NOT_FOUND']);
  });

  test('a valid token must grant the capability, and only what the manifest approves counts', () => {
    const token = (capabilities: string[]) => ({ ok: true as const, tokenId: 'cap_1', capabilities, maxUses: null });
    expect(codes(context({ token: token(['billing:read']) }))).toEqual([]);
    expect(codes(context({ token: token(['billing:refund']) }))).toEqual(['CAPABILITY_NOT_IN_TOKEN']);
    expect(
      codes(
        context({
          manifest: { ...manifest, approvedCapabilities: ['billing:refund'] },
          token: token(['billing:read']),
        }),
      ),
    ).toEqual(['CAPABILITY_NOT_APPROVED', 'CAPABILITY_NOT_IN_TOKEN']);
  });

  test('a used-up day is BUDGET_EXCEEDED with its reset time; a full hour denies evaluate only', () => {
    const day = context({ budget: budgetState(windows, manifest.limits, { day: 100, hour: 0 }) });
    const [reason] = checkDecision(day).reasons;
    expect(reason).toMatchObject({
      code: 'BUDGET_EXCEEDED',
      details: { limit: 100, current: 100, period: '1d', resets_at: '2026-11-24T00:00:00.000Z' },
    });
    const hour = budgetState(windows, manifest.limits, { day: 10, hour: 10 });
    expect(codes(context({ mode: 'evaluate', budget: hour }))).toEqual(['POLICY_VIOLATION']);
    expect(checkDecision(context({ mode: 'evaluate', budget: hour })).reasons[0].details).toEqual({
      limit: 10,
      period: '1h',
      current: 10,
    });
    // An execute counts the hour atomically in its commit instead.
    expect(codes(context({ mode: 'execute', budget: hour }))).toEqual([]);
  });

  test('a capability that needs a human: without an approval, with a bad one, with a good one', () => {
    const refund = call({ action: { type: 'billing', tool: 'refund', params: {} }, capability: 'billing:refund' });
    expect(checkDecision(context({ call: refund }))).toEqual({
      reasons: [expect.objectContaining({ code: 'APPROVAL_REQUIRED' })],
      needsHuman: true,
    });
    const expired = checkDecision(
      context({
        call: { ...refund, approvalId: 'apr_1' },
        approval: { ok: false, message: 'The approval has expired' },
      }),
    );
    expect(expired.reasons[0].message).toContain('The approval has expired');
    expect(codes(context({ call: { ...refund, approvalId: 'apr_1' }, approval: { ok: true } }))).toEqual([]);
  });

  test('a human is asked only when the approval is the one thing missing and none was named', () => {
    const refund = call({ action: { type: 'billing', tool: 'refund', params: {} }, capability: 'billing:refund' });
    expect(shouldAskHuman(refund, checkDecision(context({ call: refund })))).toBe(true);
    expect(shouldAskHuman(refund, checkDecision(context({ call: refund, toolConfigured: false })))).toBe(false);
    const exhausted = budgetState(windows, manifest.limits, { day: 100, hour: 0 });
    expect(shouldAskHuman(refund, checkDecision(context({ call: refund, budget: exhausted })))).toBe(false);
    const named = { ...refund, approvalId: 'apr_1' };
    expect(
      shouldAskHuman(named, checkDecision(context({ call: named, approval: { ok: false, message: 'pending' } }))),
    ).toBe(false);
  });
});
