// What the benches set up through the REST API of a running service (scripts/bench.ts against the
// service in its own process, scripts/bench-cost.ts against `node dist/main.js` as a child): an org
// whose operator limit the run cannot reach, and an agent that may execute through a mock tool.

export interface BenchOrg {
  orgId: string;
  token: string;
  /** The admin's bearer header. */
  auth: Record<string, string>;
}

/** The REST calls of a bench's setup against the service at `base`. */
export function benchApi(base: string) {
  /** A POST of `body` as JSON; its answer's JSON, whatever the status (the next step fails loudly on a bad one). */
  const post = async (path: string, body: unknown, headers: Record<string, string> = {}) => {
    const response = await fetch(`${base}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify(body),
    });
    return response.json() as Promise<any>;
  };

  /**
   * A new org (a slug of `prefix` and the time), its admin logged in, and its operator rate limit
   * beyond the run's reach, so that the bench measures the work rather than 429s.
   */
  async function signUp(prefix: string, name = 'Bench'): Promise<BenchOrg> {
    const slug = `${prefix}-${Date.now()}`;
    const org = await post('/api/v1/orgs', {
      name,
      slug,
      admin_email: `a@${slug}.example`,
      admin_password: 'benchmark password',
    });
    if (!org.org_id) throw new Error(`the bench's sign-up failed: ${JSON.stringify(org)}`);
    const { access_token: token } = await post('/api/v1/auth/login', {
      email: `a@${slug}.example`,
      password: 'benchmark password',
    });
    const auth = { authorization: `Bearer ${token}` };
    const patched = await fetch(`${base}/api/v1/orgs/${org.org_id}`, {
      method: 'PATCH',
      headers: { 'content-type': 'application/json', ...auth },
      body: JSON.stringify({ operator_rate_limit_per_minute: 1_000_000 }),
    });
    if (patched.status !== 200)
      throw new Error(`the bench org's rate limit: ${patched.status} ${await patched.text()}`);
    return { orgId: org.org_id, token, auth };
  }

  /**
   * The gateway: an active manifest with budgets the run cannot exhaust, a mock tool, an agent key;
   * the request (for /api/v1/gateway/evaluate or /execute) that acts for the agent.
   */
  async function gatewayAgent(orgId: string, headers: Record<string, string>) {
    const svcId = 'bench-gateway';
    await approvedAgent(orgId, headers, svcId);
    await post(
      `/api/v1/orgs/${orgId}/tools`,
      { action_type: 'billing', connector: 'mock', config: { response: { ok: true } } },
      headers,
    );
    const key = (await post(`/api/v1/orgs/${orgId}/api-keys`, { name: 'bench', scopes: ['gateway:execute'] }, headers))
      .key;
    return {
      method: 'POST' as const,
      headers: { 'content-type': 'application/json', 'x-api-key': key as string },
      body: callOf(svcId),
    };
  }

  /** Another agent of the org, approved, with the same capability (several agents' calls: `bodies`). */
  async function approvedAgent(orgId: string, headers: Record<string, string>, svcId: string) {
    const manifest = await post(
      `/api/v1/orgs/${orgId}/manifests`,
      {
        version: '1.0',
        agent: { id: svcId, name: 'Bench', version: '1.0.0', team: 'bench' },
        capabilities: { requested: ['billing:read'] },
        constraints: { max_actions_per_hour: 100_000_000, max_actions_per_day: 100_000_000 },
      },
      headers,
    );
    await post(`/api/v1/orgs/${orgId}/manifests/${manifest.manifest_id}/approve`, {}, headers);
    return callOf(svcId);
  }

  return { post, signUp, gatewayAgent, approvedAgent };
}

/** The body of an agent's call: the same params for every agent. */
const callOf = (svcId: string) =>
  JSON.stringify({
    svc_id: svcId,
    agent_id: svcId,
    action: {
      type: 'billing',
      tool: 'read',
      params: { invoice: 42, amount: 120.5, currency: 'EUR', customer: { tier: 'gold', tags: ['vip'] } },
    },
  });
