/**
 * Several gateway processes on one PostgreSQL database, as in production: two real service
 * processes (separate OS processes, connection pools and caches) share budgets exactly, append to
 * one unforked record chain, and see each other's configuration changes within a second.
 *
 * PostgreSQL only: embedded PGlite is a single-process database.
 */
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { createTestDatabase, backend, type TestDatabase } from './support/database.js';
import { createKey, signUp } from './support/fixtures.js';
import { actionBody, evaluate, execute, readyAgent, type AgentFixture } from './support/gateway.js';
import { connectClient, mcpRequest } from './support/oauth.js';
import { killAllServices, startReadyService, type Service } from './support/service-process.js';
import { nodeArguments } from './support/child-command.js';
import { allRecords, expectTreeOfChain } from './support/records.js';

const describeOnPostgres = backend === 'postgresql' ? describe : describe.skip;
const PUBLIC_URL = 'https://gateway.test';

describeOnPostgres('two gateway processes on one PostgreSQL', () => {
  let database: TestDatabase;
  let first: Service;
  let second: Service;

  beforeAll(async () => {
    database = await createTestDatabase();
    // One public address for both, as behind a load balancer: OAuth access tokens name it.
    // Checkpoints whenever one is read, so that each test reads one covering what it appended.
    const env = { LOG_LEVEL: 'warn', PUBLIC_URL, CHECKPOINT_SECONDS: '0' };
    [first, second] = await Promise.all([
      startReadyService({ databaseUrl: database.url, env }),
      startReadyService({ databaseUrl: database.url, env }),
    ]);
  }, 120_000);

  afterAll(async () => {
    await killAllServices();
    await database?.close();
  }, 30_000);

  test('60 concurrent executes spread over both processes against a budget of 20 allow exactly 20, in one chain', async () => {
    const org = await signUp(first);
    const agent = await readyAgent(first, org, { constraints: { max_actions_per_hour: 20, max_actions_per_day: 20 } });
    // Both processes load the manifest, tool and key first (evaluate counts nothing), so neither starts late.
    for (const service of [first, second]) expect((await evaluate(service, agent)).body.decision).toBe('allow');
    const results = await Promise.all(
      Array.from({ length: 60 }, (_, i) => execute(i % 2 ? second : first, agent, actionBody(agent, 'read', { i }))),
    );
    expect(results.map((r) => r.status)).toEqual(Array(60).fill(200));
    const allowed = results.filter((r) => r.body.decision === 'allow');
    expect(allowed).toHaveLength(20);
    // The count was shared: each process got 30 requests, more than the budget, so counting alone
    // each would have allowed 20 (40 in all). Which process wins the 20 is scheduling: one process
    // may win all of them (asserting that both won some failed once in CI for that reason), but
    // each also refused with BUDGET_EXCEEDED, which a process counting alone never would below 20.
    const perProcess = [0, 1].map((p) => results.filter((_, i) => i % 2 === p));
    for (const answers of perProcess) {
      expect(answers).toHaveLength(30);
      const wins = answers.filter((r) => r.body.decision === 'allow').length;
      if (wins < 20) expect(answers.some((r) => r.body.reasons?.[0]?.code === 'BUDGET_EXCEEDED')).toBe(true);
    }
    expect(results.filter((r) => r.body.reasons?.[0]?.code === 'BUDGET_EXCEEDED')).toHaveLength(40);

    const chain = await database.db.sql.query<{ seq: string; prev_hash: string; record_hash: string }>(
      'SELECT seq::text AS seq, prev_hash, record_hash FROM interaction_records WHERE org_id = $1 ORDER BY interaction_records.seq',
      [org.orgId],
    );
    expect(chain).toHaveLength(60);
    chain.forEach((row, i) => {
      expect(Number(row.seq)).toBe(i + 1);
      if (i > 0) expect(row.prev_hash).toBe(chain[i - 1].record_hash);
    });
    // One Merkle tree for both processes' appends: each serves the checkpoint of all 60, and proofs verify on both.
    const records = await allRecords(first, org);
    await expectTreeOfChain(first, org, records);
    await expectTreeOfChain(second, org, records);
  }, 60_000);

  test('200 concurrent pairs across both processes: a private read and a send exclude each other, never both through', async () => {
    const org = await signUp(first);
    for (const type of ['files', 'email']) {
      const tool = await first.request('POST', `/api/v1/orgs/${org.orgId}/tools`, {
        token: org.adminToken,
        body: { action_type: type, connector: 'mock', config: { response: { ok: true } } },
      });
      expect(tool.status).toBe(201);
    }
    const policy = (body: Record<string, unknown>) =>
      first
        .request('POST', '/api/v1/policies', { token: org.adminToken, body })
        .then((r) => expect(r.status).toBe(201));
    await policy({ name: 'private', effect: 'label', labels: ['private'], target: { capabilities: ['files:*'] } });
    await policy({ name: 'egress', effect: 'label', labels: ['egress'], target: { capabilities: ['email:*'] } });
    const excludes = (capability: string, label: string) => ({
      name: `no ${capability} after ${label}`,
      effect: 'deny',
      target: { capabilities: [capability] },
      history_window_seconds: 3600,
      condition: `history.exists(h, "${label}" in h.labels && h.executed)`,
    });
    await policy(excludes('email:*', 'private'));
    await policy(excludes('files:*', 'egress'));
    const agents: AgentFixture[] = [];
    for (let i = 0; i < 200; i++)
      agents.push(await readyAgent(first, org, { capabilities: ['files:read', 'email:send'], tool: false }));
    const pair = (agent: (typeof agents)[number], i: number) => {
      const body = (type: string, tool: string) => ({
        svc_id: agent.svcId,
        agent_id: agent.svcId,
        action: { type, tool, params: { i } },
      });
      // The read on one process, the send on the other, alternating which goes where.
      const [a, b] = i % 2 ? [first, second] : [second, first];
      return Promise.all([execute(a, agent, body('files', 'read')), execute(b, agent, body('email', 'send'))]);
    };
    const outcomes: Awaited<ReturnType<typeof pair>>[] = [];
    for (let round = 0; round < 10; round++) {
      const batch = agents.slice(round * 20, round * 20 + 20);
      outcomes.push(...(await Promise.all(batch.map((agent, i) => pair(agent, round * 20 + i)))));
    }
    expect(outcomes).toHaveLength(200);
    for (const [read, send] of outcomes) {
      expect([read.status, send.status]).toEqual([200, 200]);
      // Serialized per agent: whichever committed second saw the first, so exactly one went through.
      expect([read.body.decision, send.body.decision].sort()).toEqual(['allow', 'deny']);
    }
    // Each agent's history holds both decisions, written under its lock: one executed, one denied.
    const rows = await database.db.sql.query<{ executed: number; total: number }>(
      `SELECT count(*) FILTER (WHERE executed)::int AS executed, count(*)::int AS total FROM agent_history
       WHERE org_id = $1::uuid GROUP BY svc_id`,
      [org.orgId],
    );
    expect(rows).toHaveLength(200);
    expect(rows.every((row) => row.executed === 1 && row.total === 2)).toBe(true);
  }, 180_000);

  test('a manifest suspended and a key deleted through one process stop working on the other within a second', async () => {
    const org = await signUp(first);
    const agent = await readyAgent(first, org);
    // The other process has the manifest and the key in its caches.
    expect((await execute(second, agent)).body.decision).toBe('allow');

    const suspended = await first.request('POST', `/api/v1/orgs/${org.orgId}/manifests/${agent.manifestId}/suspend`, {
      token: org.adminToken,
      body: { reason: 'incident' },
    });
    expect(suspended.status).toBe(200);
    const suspendedAt = Date.now();
    // Every request below starts within the second after the change.
    let decision = await execute(second, agent);
    while (decision.body.reasons?.[0]?.code !== 'MANIFEST_NOT_ACTIVE' && Date.now() - suspendedAt < 1000) {
      decision = await execute(second, agent);
    }
    expect(decision.body.reasons?.[0]?.code).toBe('MANIFEST_NOT_ACTIVE');

    const { key, keyId } = await createKey(first, org, ['logs:read']);
    expect((await second.request('GET', '/api/v1/records', { apiKey: key })).status).toBe(200);
    expect(
      (await first.request('DELETE', `/api/v1/orgs/${org.orgId}/api-keys/${keyId}`, { token: org.adminToken })).status,
    ).toBe(204);
    const deletedAt = Date.now();
    let status = (await second.request('GET', '/api/v1/records', { apiKey: key })).status;
    while (status !== 401 && Date.now() - deletedAt < 1000)
      status = (await second.request('GET', '/api/v1/records', { apiKey: key })).status;
    expect(status).toBe(401);
  }, 60_000);

  test('an OAuth grant revoked through one process: its access token is refused by the other within a second', async () => {
    const org = await signUp(first);
    const agent = await readyAgent(first, org);
    const client = await connectClient(first, PUBLIC_URL, org.adminToken, agent.svcId);
    // The second process verifies the token and caches its grant.
    expect((await mcpRequest(second, agent.svcId, client.accessToken)).status).toBe(200);
    const revoked = await first.request('DELETE', `/api/v1/agents/${agent.svcId}/grants/${client.grantId}`, {
      token: org.adminToken,
    });
    expect(revoked.status).toBe(204);
    const revokedAt = Date.now();
    let status = (await mcpRequest(second, agent.svcId, client.accessToken)).status;
    while (status !== 401 && Date.now() - revokedAt < 1000)
      status = (await mcpRequest(second, agent.svcId, client.accessToken)).status;
    expect(status).toBe(401);
  }, 60_000);

  test('`agent-gateway rotate-keys record` in its own process switches both services to the new key within a second', async () => {
    const org = await signUp(first);
    const agent = await readyAgent(first, org);
    const keyOf = async (service: Service) => {
      const executed = await execute(service, agent);
      return (
        await service.request('GET', `/api/v1/records/${executed.body.interaction_id}`, { token: org.adminToken })
      ).body.key_id as string;
    };
    const oldKid = await keyOf(second);

    const env: NodeJS.ProcessEnv = { ...process.env, DATABASE_URL: database.url };
    delete env.NODE_OPTIONS;
    const cli = spawnSync(process.execPath, [...nodeArguments('cli/agent-gateway'), 'rotate-keys', 'record'], {
      cwd: fileURLToPath(new URL('..', import.meta.url)),
      env,
      encoding: 'utf8',
    });
    expect(cli.stderr).toBe('');
    expect(cli.status).toBe(0);
    const newKid = /record: new active key (\S+)/.exec(cli.stdout)![1];
    expect(newKid).not.toBe(oldKid);

    const rotatedAt = Date.now();
    for (const service of [first, second]) {
      // Every execute below starts within the second after the rotation.
      let kid = await keyOf(service);
      while (kid !== newKid && Date.now() - rotatedAt < 1000) kid = await keyOf(service);
      expect(kid).toBe(newKid);
    }
    const jwks = await second.request('GET', '/.well-known/jwks.json');
    expect(jwks.body.keys.map((k: { kid: string }) => k.kid)).toEqual(expect.arrayContaining([oldKid, newKid]));
  }, 60_000);

  // With a history policy too, each execute is decided in its agent's transaction, where a refused
  // count must leave nothing behind but the denial's history entry.
  test.each([['alone'], ['beside a history policy']])(
    'a policy rate limit of 9 (%s) against 40 concurrent executes over both processes allows exactly 9',
    async (beside) => {
      const org = await signUp(first);
      const agent = await readyAgent(first, org);
      if (beside !== 'alone') {
        const history = await first.request('POST', '/api/v1/policies', {
          token: org.adminToken,
          body: { name: 'history', effect: 'deny', history_window_seconds: 600, condition: 'history.size() > 1000' },
        });
        expect(history.status).toBe(201);
      }
      const policy = await first.request('POST', '/api/v1/policies', {
        token: org.adminToken,
        body: {
          name: 'nine a day',
          effect: 'rate_limit',
          rate_limit: { limit: 9, window_seconds: 86400, per: 'agent' },
        },
      });
      expect(policy.status).toBe(201);
      // Both processes have loaded the policy (the writer at once, the other within its poll).
      for (const service of [first, second]) {
        let bench = await evaluate(service, agent);
        while (!bench.body.policies?.some((p: { name: string }) => p.name === 'nine a day'))
          bench = await evaluate(service, agent);
      }
      const results = await Promise.all(
        Array.from({ length: 40 }, (_, i) => execute(i % 2 ? second : first, agent, actionBody(agent, 'read', { i }))),
      );
      const allowed = results.filter((r) => r.status === 200 && r.body.decision === 'allow');
      // Each process received 20 requests: counting apart, each would have allowed 9 (18 in all).
      expect(allowed).toHaveLength(9);
      const limited = results.filter((r) => r.status === 429);
      expect(limited).toHaveLength(31);
      expect(limited[0].body.error.details).toEqual({
        limit: 9,
        period: '86400s',
        current: 9,
        policy_id: policy.body.policy_id,
      });
      if (beside !== 'alone') {
        const entries = await database.db.sql.query<{ decision: string; n: number }>(
          'SELECT decision, count(*)::int AS n FROM agent_history WHERE org_id = $1::uuid GROUP BY decision ORDER BY decision',
          [org.orgId],
        );
        expect(entries).toEqual([
          { decision: 'allow', n: 9 },
          { decision: 'deny', n: 31 },
        ]);
      }
      const journaled = await database.db.sql.query('SELECT id FROM gateway_executions WHERE org_id = $1::uuid', [
        org.orgId,
      ]);
      expect(journaled.length).toBeLessThanOrEqual(9);
    },
    60_000,
  );

  test('a policy created, changed and deleted through one process applies on the other within a second', async () => {
    const org = await signUp(first);
    const agent = await readyAgent(first, org);
    expect((await execute(second, agent)).body.decision).toBe('allow');
    const untilWithinASecond = async (
      expected: (body: { decision: string; reasons: { code: string }[] }) => boolean,
    ) => {
      const changedAt = Date.now();
      let decision = await execute(second, agent);
      while (!expected(decision.body) && Date.now() - changedAt < 1000) decision = await execute(second, agent);
      expect(expected(decision.body)).toBe(true);
    };

    const created = await first.request('POST', '/api/v1/policies', {
      token: org.adminToken,
      body: { name: 'stop', effect: 'deny' },
    });
    expect(created.status).toBe(201);
    await untilWithinASecond((body) => body.reasons[0]?.code === 'POLICY_DENIED');

    const replaced = await first.request('PUT', `/api/v1/policies/${created.body.policy_id}`, {
      token: org.adminToken,
      body: { name: 'stop', effect: 'deny', mode: 'shadow' },
    });
    expect(replaced.body.version).toBe(2);
    await untilWithinASecond((body) => body.decision === 'allow');

    await first.request('PUT', `/api/v1/policies/${created.body.policy_id}`, {
      token: org.adminToken,
      body: { name: 'stop', effect: 'deny' },
    });
    await untilWithinASecond((body) => body.reasons[0]?.code === 'POLICY_DENIED');
    const deleted = await first.request('DELETE', `/api/v1/policies/${created.body.policy_id}`, {
      token: org.adminToken,
    });
    expect(deleted.status).toBe(204);
    await untilWithinASecond((body) => body.decision === 'allow');
  }, 60_000);

  test('an agent deactivated through one process is denied by the other within a second, and served again after reactivation', async () => {
    const org = await signUp(first);
    const agent = await readyAgent(first, org);
    expect((await execute(second, agent)).body.decision).toBe('allow');
    const until = async (expected: (body: { decision: string; reasons: { code: string }[] }) => boolean) => {
      const changedAt = Date.now();
      let decision = await execute(second, agent);
      while (!expected(decision.body) && Date.now() - changedAt < 1000) decision = await execute(second, agent);
      expect(expected(decision.body)).toBe(true);
    };

    const deactivated = await first.request('DELETE', `/api/v1/agents/${agent.svcId}?reason=leaked`, {
      token: org.adminToken,
    });
    expect(deactivated.status).toBe(204);
    await until((body) => body.reasons[0]?.code === 'AGENT_DEACTIVATED');
    const reactivated = await first.request('POST', `/api/v1/agents/${agent.svcId}/reactivate`, {
      token: org.adminToken,
      body: {},
    });
    expect(reactivated.status).toBe(200);
    await until((body) => body.decision === 'allow');
  }, 60_000);

  test('a refresh token reused through one process revokes its session on the other at once (no cache)', async () => {
    const org = await signUp(first);
    const email = `refresh-${org.slug}@example.test`;
    const password = 'a password for the refresh test';
    const created = await first.request('POST', `/api/v1/orgs/${org.orgId}/users`, {
      token: org.adminToken,
      body: { email, password, role: 'viewer' },
    });
    expect(created.status).toBe(201);
    const login = await first.request('POST', '/api/v1/auth/login', { body: { email, password } });
    expect(login.status).toBe(200);
    const { access_token: accessToken, refresh_token: refreshToken } = login.body;
    const readOrg = (service: Service, token: string) => service.request('GET', `/api/v1/orgs/${org.orgId}`, { token });
    const rotate = (service: Service, token: string) =>
      service.request('POST', '/graphql', {
        body: {
          query: 'mutation ($t: String!) { refresh_session(refresh_token: $t) { token refresh_token } }',
          variables: { t: token },
        },
      });
    expect((await readOrg(second, accessToken)).status).toBe(200);

    const rotated = await rotate(second, refreshToken);
    expect(rotated.status).toBe(200);
    const { token: rotatedAccessToken, refresh_token: rotatedRefreshToken } = rotated.body.data.refresh_session;
    expect((await readOrg(first, rotatedAccessToken)).status).toBe(200);

    // The first refresh token again, through the other process: reuse.
    const reused = await rotate(first, refreshToken);
    expect(reused.status).toBe(401);
    expect(reused.body.errors[0].extensions.code).toBe('INVALID_TOKEN');
    // The very next requests on the process that rotated refuse every token of the family: the
    // revocation is read from the database on each request, not from a per-process cache.
    expect((await readOrg(second, rotatedAccessToken)).status).toBe(401);
    expect((await readOrg(second, accessToken)).status).toBe(401);
    expect((await rotate(second, rotatedRefreshToken)).status).toBe(401);
    // The admin's own session (another family) is untouched.
    expect((await readOrg(second, org.adminToken)).status).toBe(200);
  }, 60_000);

  test('a user demoted and another removed through one process: their tokens carry the new rights, or none, on the other within a second', async () => {
    const org = await signUp(first);
    const password = 'a password for the roles test';
    const users = { demoted: 'admin', removed: 'operator' } as const;
    const sessions: Record<string, { userId: string; accessToken: string; refreshToken: string }> = {};
    for (const [name, role] of Object.entries(users)) {
      const email = `${name}-${org.slug}@example.test`;
      const created = await first.request('POST', `/api/v1/orgs/${org.orgId}/users`, {
        token: org.adminToken,
        body: { email, password, role },
      });
      expect(created.status).toBe(201);
      const login = await second.request('POST', '/api/v1/auth/login', { body: { email, password } });
      expect(login.status).toBe(200);
      sessions[name] = {
        userId: created.body.user_id,
        accessToken: login.body.access_token,
        refreshToken: login.body.refresh_token,
      };
    }
    const { demoted, removed } = sessions;
    const listUsers = (token: string) => second.request('GET', `/api/v1/orgs/${org.orgId}/users`, { token });
    const readOrg = (token: string) => second.request('GET', `/api/v1/orgs/${org.orgId}`, { token });
    const rotate = (refreshToken: string) =>
      second.request('POST', '/auth/refresh', { body: { refresh_token: refreshToken } });
    /** The status `send` answers on the second process once it is `expected`, trying for a second after the change. */
    const withinASecond = async (send: () => Promise<{ status: number }>, expected: number) => {
      const changedAt = Date.now();
      let status = (await send()).status;
      while (status !== expected && Date.now() - changedAt < 1000) status = (await send()).status;
      return status;
    };
    // The second process has verified both tokens (and keeps their signatures checked).
    expect((await listUsers(demoted.accessToken)).status).toBe(200);
    expect((await readOrg(removed.accessToken)).status).toBe(200);

    const demotion = await first.request('PATCH', `/api/v1/orgs/${org.orgId}/users/${demoted.userId}`, {
      token: org.adminToken,
      body: { role: 'viewer' },
    });
    expect(demotion.status).toBe(200);
    expect(await withinASecond(() => listUsers(demoted.accessToken), 403)).toBe(403);
    expect((await readOrg(demoted.accessToken)).status).toBe(200);
    // Its refresh token rotates on the other process into a viewer's token.
    const rotated = await rotate(demoted.refreshToken);
    expect(rotated.status).toBe(200);
    expect(JSON.parse(Buffer.from(rotated.body.token.split('.')[1], 'base64url').toString()).role).toBe('viewer');
    expect((await listUsers(rotated.body.token)).status).toBe(403);

    const removal = await first.request('DELETE', `/api/v1/orgs/${org.orgId}/users/${removed.userId}`, {
      token: org.adminToken,
    });
    expect(removal.status).toBe(204);
    expect(await withinASecond(() => readOrg(removed.accessToken), 401)).toBe(401);
    const refused = await rotate(removed.refreshToken);
    expect({ status: refused.status, code: refused.body.detail?.code }).toEqual({ status: 401, code: 'INVALID_TOKEN' });
    // The admin who did it is untouched on both.
    expect((await listUsers(org.adminToken)).status).toBe(200);
  }, 60_000);
  test("an org's settings changed through one process or by SQL: the other's next read answers them (answers kept by data version)", async () => {
    const org = await signUp(first);
    const readOrg = () => second.request('GET', `/api/v1/orgs/${org.orgId}`, { token: org.adminToken });
    // Read twice on the second process: its answer is kept there (test/answer-cache.test.ts).
    for (let i = 0; i < 2; i++) expect((await readOrg()).body.name).toBe(`Org ${org.slug}`);
    const renamed = await first.request('PATCH', `/api/v1/orgs/${org.orgId}`, {
      token: org.adminToken,
      body: { name: 'Renamed on the first' },
    });
    expect(renamed.status).toBe(200);
    // At once, not within a second: the version is read in the bearer check of the read itself.
    expect((await readOrg()).body.name).toBe('Renamed on the first');
    expect((await readOrg()).body.name).toBe('Renamed on the first');
    await database.db.sql.query('UPDATE organizations SET record_params = false WHERE id = $1', [org.orgId]);
    expect((await readOrg()).body.record_params).toBe(false);
  });
});
