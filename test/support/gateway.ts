import type { TestClient } from './app.js';
import { createKey, createManifest, manifestPayload, type OrgFixture } from './fixtures.js';

export interface AgentFixture {
  svcId: string;
  manifestId: string;
  key: string;
}

/** An org agent ready for the gateway: active manifest, a mock tool for `billing`, an execute key. */
export async function readyAgent(
  t: TestClient,
  org: OrgFixture,
  options: { constraints?: Record<string, unknown>; capabilities?: string[]; tool?: boolean; scopes?: string[] } = {},
): Promise<AgentFixture> {
  const payload = manifestPayload({
    capabilities: options.capabilities ?? ['billing:read', 'billing:refund'],
    constraints: options.constraints ?? { max_actions_per_hour: 1000, max_actions_per_day: 10000 },
  });
  const manifest = await createManifest(t, org, 'active', payload);
  if (options.tool ?? true) {
    const existing = await t.request('GET', `/api/v1/orgs/${org.orgId}/tools`, { token: org.adminToken });
    if (!existing.body.items.some((tool: { action_type: string }) => tool.action_type === 'billing')) {
      const tool = await t.request('POST', `/api/v1/orgs/${org.orgId}/tools`, {
        token: org.adminToken,
        body: { action_type: 'billing', connector: 'mock', config: { response: { ok: true } } },
      });
      if (tool.status !== 201) throw new Error(`tool failed: ${tool.status} ${tool.text}`);
    }
  }
  const { key } = await createKey(t, org, options.scopes ?? ['gateway:execute', 'gateway:evaluate']);
  return { svcId: manifest.svcId, manifestId: manifest.manifestId, key };
}

export const actionBody = (
  agent: AgentFixture,
  tool = 'read',
  params: Record<string, unknown> = { invoice: 'inv-1' },
) => ({
  svc_id: agent.svcId,
  agent_id: agent.svcId,
  action: { type: 'billing', tool, params },
});

export const execute = (t: TestClient, agent: AgentFixture, body: unknown = actionBody(agent)) =>
  t.request('POST', '/api/v1/gateway/execute', { apiKey: agent.key, body });

export const evaluate = (t: TestClient, agent: AgentFixture, body: unknown = actionBody(agent)) =>
  t.request('POST', '/api/v1/gateway/evaluate', { apiKey: agent.key, body });
