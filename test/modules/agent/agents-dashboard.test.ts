import { print } from 'graphql';
import { AgentIdsDocument, OrganizationAgentsDashboardDocument } from '../../generated/graphql.js';
import { startTestApp, type TestApp } from '../../support/app.js';
import { createKey, createManifest, manifestPayload, signUp, type OrgFixture } from '../../support/fixtures.js';
import { execute, readyAgent } from '../../support/gateway.js';
import { runOperation, StatementCounter } from '../../support/statements.js';

/**
 * The agents dashboard (`organization { agents }`, docs/decisions/0020-agents.md): every agent
 * with its current manifest and that manifest's history, its budget usage and the policies that target it,
 * in a number of statements that does not grow with the number of agents; and what a key limited
 * to svc_ids, or any key, may see of it.
 */

const statements = new StatementCounter();
let t: TestApp;
let org: OrgFixture;
const AGENTS = 40;
/** Agent i's manifest, by agent id; agents are registered in index order, so the newest is last. */
const manifests = new Map<string, { manifestId: string; hourLimit: number; dayLimit: number }>();
const agentIds: string[] = [];
const policyIds = { orgWide: '', first: '', second: '' };
/** An agent with an active manifest, a tool and an execute key: its usage is counted. */
let executing: { svcId: string };

const createPolicy = async (body: Record<string, unknown>) => {
  const created = await t.request('POST', '/api/v1/policies', { token: org.adminToken, body });
  expect(created.status).toBe(201);
  return created.body.policy_id as string;
};

beforeAll(async () => {
  t = await startTestApp({}, { onQuery: statements.observe });
  org = await signUp(t, 'agents-dash');
  for (let i = 0; i < AGENTS - 1; i++) {
    const svcId = `dash-agent-${String(i).padStart(2, '0')}`;
    // Each its own limits, to tell the agents' usage apart.
    const constraints = { max_actions_per_hour: 10 + i, max_actions_per_day: 1000 + i };
    const { manifestId } = await createManifest(t, org, 'active', manifestPayload({ svcId, constraints }));
    manifests.set(svcId, {
      manifestId,
      hourLimit: constraints.max_actions_per_hour,
      dayLimit: constraints.max_actions_per_day,
    });
    agentIds.push(svcId);
  }
  const agent = await readyAgent(t, org, { constraints: { max_actions_per_hour: 3, max_actions_per_day: 30 } });
  manifests.set(agent.svcId, { manifestId: agent.manifestId, hourLimit: 3, dayLimit: 30 });
  agentIds.push(agent.svcId);
  for (let i = 0; i < 2; i++) expect((await execute(t, agent)).body.decision).toBe('allow');
  executing = agent;

  policyIds.orgWide = await createPolicy({
    name: 'org wide',
    priority: 1,
    effect: 'deny',
    target: { capabilities: ['nothing:matches'] },
  });
  policyIds.first = await createPolicy({
    name: 'first agent',
    priority: 2,
    effect: 'deny',
    target: { svc_ids: [agentIds[0], 'unknown-agent'] },
  });
  policyIds.second = await createPolicy({
    name: 'second agent',
    priority: 3,
    effect: 'require_approval',
    target: { svc_ids: [agentIds[1]] },
  });
});
afterAll(() => t.close());

/**
 * Statements sent while serving one dashboard query of `limit` agents: through Prisma, and reads of
 * the budget counters (usage), which go through the raw driver the StatementCounter does not see.
 * (Only those: background jobs and authentication use the raw driver too.)
 */
async function dashboard(limit: number) {
  const sql = t.database.db.sql;
  const query = sql.query;
  let budgetReads = 0;
  sql.query = ((...args: Parameters<typeof query>) => {
    if (args[2] === 'budget_counts_of') budgetReads++;
    return query.apply(sql, args);
  }) as typeof query;
  try {
    const { result, count } = await statements.count(() =>
      runOperation(t, OrganizationAgentsDashboardDocument, { orgId: org.orgId, limit }, org.adminToken),
    );
    return { agents: result.organization.agents, count, budgetReads };
  } finally {
    sql.query = query;
  }
}

test(`${AGENTS} agents with their manifest, history, usage and policies cost the same statements as 5`, async () => {
  const small = await dashboard(5);
  const large = await dashboard(AGENTS);
  expect(small.agents.items).toHaveLength(5);
  expect(large.agents.items).toHaveLength(AGENTS);
  expect({ small: small.agents.total, large: large.agents.total }).toEqual({ small: AGENTS, large: AGENTS });
  // organization + agents + count + current manifests + history + policies.
  expect(large.count).toBe(small.count);
  expect(large.count).toBeLessThanOrEqual(6);
  // One read of every listed agent's budget counters.
  expect({ small: small.budgetReads, large: large.budgetReads }).toEqual({ small: 1, large: 1 });
});

test('every agent shows its own manifest, its history and the limits of its manifest', async () => {
  const { agents } = await dashboard(AGENTS);
  // Newest first: the reverse of registration.
  expect(agents.items.map((a) => a.agent_id)).toEqual([...agentIds].reverse());
  for (const agent of agents.items) {
    const manifest = manifests.get(agent.agent_id)!;
    expect({
      agent: agent.agent_id,
      manifest: agent.current_manifest?.manifest_id,
      version: agent.current_manifest?.agent_version,
    }).toEqual({
      agent: agent.agent_id,
      manifest: manifest.manifestId,
      version: '1.0.0',
    });
    expect(agent.current_manifest!.history.map((entry) => entry.status)).toEqual(['active', 'pending']);
    expect({ agent: agent.agent_id, hour: agent.usage.hour.limit, day: agent.usage.day.limit }).toEqual({
      agent: agent.agent_id,
      hour: manifest.hourLimit,
      day: manifest.dayLimit,
    });
  }
  const counted = agents.items.find((a) => a.agent_id === executing.svcId)!;
  expect(counted.usage).toEqual({ hour: { count: 2, limit: 3 }, day: { count: 2, limit: 30 } });
  expect(agents.items.filter((a) => a.usage.hour.count > 0).map((a) => a.agent_id)).toEqual([executing.svcId]);
});

test('an agent lists the org-wide policies and those naming it, in priority order, never those naming another agent', async () => {
  const { agents } = await dashboard(AGENTS);
  const policiesOf = (agentId: string) => agents.items.find((a) => a.agent_id === agentId)!.policies;
  expect(policiesOf(agentIds[0])).toEqual([
    { policy_id: policyIds.orgWide, name: 'org wide' },
    { policy_id: policyIds.first, name: 'first agent' },
  ]);
  expect(policiesOf(agentIds[1])).toEqual([
    { policy_id: policyIds.orgWide, name: 'org wide' },
    { policy_id: policyIds.second, name: 'second agent' },
  ]);
  for (const agentId of agentIds.slice(2))
    expect(policiesOf(agentId)).toEqual([{ policy_id: policyIds.orgWide, name: 'org wide' }]);
});

test("another org's dashboard lists none of these agents", async () => {
  const other = await signUp(t, 'agents-dash-other');
  const { organization } = await runOperation(
    t,
    OrganizationAgentsDashboardDocument,
    { orgId: other.orgId, limit: 50 },
    other.adminToken,
  );
  expect(organization.agents).toEqual({ total: 0, items: [] });
});

describe('API keys', () => {
  test('a key limited to svc_ids querying agents sees only its agents', async () => {
    const mine = [agentIds[3], agentIds[7]];
    const { key } = await createKey(t, org, ['manifests:read'], { svc_ids: [...mine, 'never-registered'] });
    const response = await t.graphql(print(AgentIdsDocument), { limit: 200 }, { apiKey: key });
    expect(response.body).toEqual({
      data: { agents: { total: 2, items: [{ agent_id: mine[1] }, { agent_id: mine[0] }] } },
    });
  });

  test('a key may read agents but not, through them, the policies (policies are bearer-only)', async () => {
    const { key } = await createKey(t, org, ['manifests:read']);
    const withPolicies = await t.graphql(
      '{ agents(limit: 5) { items { agent_id policies { name } } } }',
      {},
      { apiKey: key },
    );
    expect(withPolicies.body.errors?.map((e: { extensions: { code: string } }) => e.extensions.code)).toContain(
      'FORBIDDEN',
    );
    expect(JSON.stringify(withPolicies.body)).not.toContain('org wide');
    const withoutPolicies = await t.graphql(print(AgentIdsDocument), { limit: 5 }, { apiKey: key });
    expect(withoutPolicies.body.data.agents.items).toHaveLength(5);
  });
});
