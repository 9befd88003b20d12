/**
 * Executes of one agent that arrive together share one commit (`count_and_journal_many`): each is
 * still counted in arrival order against exact limits, journaled only when allowed, and a batch
 * that fails in the database retries its executes one by one, so one bad entry fails alone. Either
 * commit journals what the record will name (the connection of the call included), so a record
 * written on recovery names it too.
 */
import { budgetWindows, type PolicyCounter } from '../../../src/modules/gateway/budget.js';
import {
  claimOwner,
  countAndJournal,
  countAndJournalMany,
  executionsOf,
  type JournalEntry,
} from '../../../src/modules/gateway/gateway.store.js';
import { INTERRUPTED_REASON } from '../../../src/modules/gateway/execution-journal.js';
import { fixedWindow } from '../../../src/lib/rate-counter.js';
import { startTestApp, type TestApp } from '../../support/app.js';
import { signUp } from '../../support/fixtures.js';
import { actionBody, execute, readyAgent } from '../../support/gateway.js';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

/**
 * The commits the gateway sends while `work` runs: how many executes each carried. `holdFirst`
 * delays the first shared commit by that many milliseconds, so that the executes behind it queue.
 */
async function commitsDuring<T>(
  app: TestApp,
  work: () => Promise<T>,
  holdFirst = 0,
): Promise<{ result: T; batches: number[]; singles: number }> {
  const sql = app.database.db.sql;
  const query = sql.query;
  const batches: number[] = [];
  let singles = 0;
  sql.query = ((...args: Parameters<typeof query>) => {
    if (args[2] === 'count_and_journal') singles++;
    if (args[2] !== 'count_and_journal_many') return query.apply(sql, args);
    // $13: the batch's journal entries, as one JSON array.
    batches.push(JSON.parse((args[1] as string[])[12]).length);
    const hold = batches.length === 1 ? holdFirst : 0;
    return new Promise((resolve) => setTimeout(resolve, hold)).then(() => query.apply(sql, args));
  }) as typeof query;
  try {
    return { result: await work(), batches, singles };
  } finally {
    sql.query = query;
  }
}

const countsOf = async (orgId: string, app = t) =>
  new Map(
    (
      await app.database.db.sql.query<{ bucket: string; count: number }>(
        `SELECT bucket, count FROM rate_counters WHERE bucket LIKE '%' || $1 || '%' AND bucket NOT LIKE 'operator:%'`,
        [orgId],
      )
    ).map((row) => [row.bucket.replace(orgId, 'ORG').replace(/:pol_[A-Za-z0-9_-]+:/, ':POLICY:'), row.count]),
  );

test('60 concurrent executes against an hourly budget of 25 share commits and allow exactly 25', async () => {
  const org = await signUp(t, 'batches');
  const agent = await readyAgent(t, org, { constraints: { max_actions_per_hour: 25, max_actions_per_day: 1000 } });
  const policy = await t.request('POST', '/api/v1/policies', {
    token: org.adminToken,
    body: {
      name: 'watch',
      effect: 'rate_limit',
      mode: 'shadow',
      rate_limit: { limit: 5, window_seconds: 3600, per: 'agent' },
    },
  });
  expect(policy.status).toBe(201);
  const { result, batches, singles } = await commitsDuring(t, () =>
    Promise.all(Array.from({ length: 60 }, (_, i) => execute(t, agent, actionBody(agent, 'read', { i })))),
  );
  expect(result.filter((r) => r.status === 200 && r.body.decision === 'allow')).toHaveLength(25);
  expect(result.filter((r) => r.status === 429)).toHaveLength(35);
  // Every execute went through a shared commit, and some commits carried several.
  expect(singles).toBe(0);
  expect(batches.reduce((sum, n) => sum + n, 0)).toBe(60);
  expect(batches.length).toBeLessThan(60);
  expect(Math.max(...batches)).toBeGreaterThan(1);
  // The shadow policy counted the 25 that the budget let through, not the refused ones.
  expect(await countsOf(org.orgId)).toEqual(
    new Map([
      [`budget:hour:ORG:${agent.svcId}`, 25],
      [`budget:day:ORG:${agent.svcId}`, 25],
      [`policy:ORG:POLICY:3600:agent:${agent.svcId}`, 25],
    ]),
  );
  const records = await t.request('GET', '/api/v1/records?limit=100', { token: org.adminToken });
  expect(records.body.total).toBe(60);
  const executed = records.body.items.filter((r: { executed: boolean }) => r.executed);
  expect(new Set(executed.map((r: { record_id: string }) => r.record_id))).toEqual(
    new Set(result.filter((r) => r.status === 200).map((r) => r.body.interaction_id)),
  );
});

test('a batch that fails in the database commits its executes one by one: only the bad one fails', async () => {
  // An app of its own: while another org counts as active, the fair scheduler runs this org's
  // requests two at a time, and two cannot form a batch behind a held commit.
  const app = await startTestApp();
  const org = await signUp(app, 'poisoned-batch');
  const agent = await readyAgent(app, org);
  const sql = app.database.db.sql;
  // Passes every check in the process and fails only in the database, inside the shared statement.
  await sql.exec(`
    CREATE FUNCTION test_poisoned_journal() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF NEW.params->>'poison' = 'yes' THEN RAISE EXCEPTION 'poisoned journal entry'; END IF;
      RETURN NEW;
    END $$;
    CREATE TRIGGER test_poisoned_journal BEFORE INSERT ON gateway_executions
      FOR EACH ROW EXECUTE FUNCTION test_poisoned_journal();`);
  try {
    const { result, batches, singles } = await commitsDuring(
      app,
      () =>
        Promise.all(
          Array.from({ length: 40 }, (_, i) =>
            execute(app, agent, actionBody(agent, 'read', i === 20 ? { poison: 'yes' } : { i })),
          ),
        ),
      300,
    );
    // An unexplained database failure: an internal error that does not leak what the database said.
    expect(result[20].status).toBe(500);
    expect(result[20].body.error.message).not.toContain('poisoned');
    const others = result.filter((_, i) => i !== 20);
    expect(others.map((r) => `${r.status} ${r.body.decision}`)).toEqual(Array(39).fill('200 allow'));
    // The poisoned execute's batch failed and was retried alone, each of its executes on its own.
    expect(Math.max(...batches)).toBeGreaterThan(1);
    expect(singles).toBeGreaterThan(1);
    const counts = await countsOf(org.orgId, app);
    expect(counts.get(`budget:hour:ORG:${agent.svcId}`)).toBe(39);
  } finally {
    await sql.exec('DROP TRIGGER test_poisoned_journal ON gateway_executions; DROP FUNCTION test_poisoned_journal();');
    await app.close();
  }
});

describe('count_and_journal_many', () => {
  const entry = (orgId: string, id: string): JournalEntry => ({
    id,
    orgId,
    svcId: 'agent-a',
    agentId: 'agent-a',
    actionType: 'billing',
    tool: 'read',
    capability: 'billing:read',
    paramsHash: `sha256:${'3'.repeat(64)}`,
    params: id.endsWith('2') ? null : { id, quote: 'a "quoted" {brace}, \\ and ü' },
    approvalId: null,
    policies: [],
    labels: [],
    channel: 'rest',
    connection: null,
    confirmation: null,
  });

  test('counts in order against a limit and journals exactly the entries that had room', async () => {
    const org = await signUp(t, 'many');
    const sql = t.database.db.sql;
    const owner = 1_000_000 + Math.floor(Math.random() * 1_000_000);
    expect(await claimOwner(sql, owner, 60)).toBe(true);
    const counters: PolicyCounter[] = [
      { match: 0, bucket: `policy:${org.orgId}:p:60:org`, window: fixedWindow(60), limit: 3, enforced: true },
    ];
    const ids = Array.from({ length: 5 }, (_, i) => `int_many_${org.orgId}_${i}`);
    const outcomes = await countAndJournalMany(
      sql,
      counters,
      budgetWindows(org.orgId, 'agent-a'),
      { maxActionsPerHour: 100, maxActionsPerDay: 100 },
      owner,
      ids.map((id) => entry(org.orgId, id)),
    );
    expect(
      outcomes.map((o) => ('leaseLost' in o ? 'lost' : o.ok ? `ok ${o.counts}` : `refused ${o.refusedBy}`)),
    ).toEqual(['ok 1', 'ok 2', 'ok 3', 'refused 0', 'refused 0']);
    const journaled = await sql.query<{ id: string; params: unknown; owner: number }>(
      'SELECT id, params, owner FROM gateway_executions WHERE org_id = $1 ORDER BY id',
      [org.orgId],
    );
    expect(journaled).toEqual(ids.slice(0, 3).map((id) => ({ id, owner, params: entry(org.orgId, id).params })));
    await sql.query('DELETE FROM gateway_executions WHERE org_id = $1', [org.orgId]);
    await sql.query('DELETE FROM gateway_journal_owners WHERE owner = $1', [owner]);
  });

  test('an owner without a lease counts and journals nothing for any entry', async () => {
    const org = await signUp(t, 'many-lost');
    const sql = t.database.db.sql;
    const outcomes = await countAndJournalMany(
      sql,
      [],
      budgetWindows(org.orgId, 'agent-a'),
      { maxActionsPerHour: 100, maxActionsPerDay: 100 },
      2_100_000_000,
      [entry(org.orgId, 'int_lost_1'), entry(org.orgId, 'int_lost_2')],
    );
    expect(outcomes).toEqual([
      { ok: false, leaseLost: true },
      { ok: false, leaseLost: true },
    ]);
    expect(await countsOf(org.orgId)).toEqual(new Map());
    expect(await sql.query('SELECT id FROM gateway_executions WHERE org_id = $1', [org.orgId])).toEqual([]);
  });

  test('journal entries keep the connection and the confirmation of their call, and the records written on recovery name them', async () => {
    const org = await signUp(t, 'journal-connection');
    const sql = t.database.db.sql;
    const { journal } = t.app.services;
    // The app's own owner: its recovery settles these entries as a stopped request's.
    const owner = await journal.ownerId();
    const windows = budgetWindows(org.orgId, 'agent-a');
    const limits = { maxActionsPerHour: 100, maxActionsPerDay: 100 };
    const connections = [
      { connectionId: 'conn_org_j', userId: null },
      { connectionId: 'conn_user_j', userId: org.adminUserId },
      null,
    ];
    const ids = connections.map((_, i) => `int_journal_conn_${org.orgId}_${i}`);
    // The first two confirmed by their user (one through each commit), the last not.
    const confirmations = [
      { confirmation_id: 'cnf_journal_a', by: 'key_a' },
      { confirmation_id: 'cnf_journal_b', by: 'grant_b' },
      null,
    ];
    const entries = ids.map((id, i) => ({
      ...entry(org.orgId, id),
      connection: connections[i],
      confirmation: confirmations[i],
    }));
    // Both commits: one execute alone, and a shared one.
    expect(await countAndJournal(sql, [], windows, limits, owner, entries[0])).toMatchObject({ ok: true });
    const many = await countAndJournalMany(sql, [], windows, limits, owner, entries.slice(1));
    expect(many.map((outcome) => outcome.ok)).toEqual([true, true]);

    const journaled = (await executionsOf(sql, owner)).filter((e) => ids.includes(e.id));
    expect(journaled.map((e) => e.connection)).toEqual(connections);
    expect(journaled.map((e) => e.confirmation)).toEqual(confirmations);
    // The journal keeps the record's form of it, as interaction_records does.
    const stored = await sql.query<{ connection: unknown }>(
      'SELECT connection FROM gateway_executions WHERE id = ANY($1) ORDER BY id',
      [ids],
    );
    expect(stored.map((row) => row.connection)).toEqual([
      { connection_id: 'conn_org_j', user_id: null },
      { connection_id: 'conn_user_j', user_id: org.adminUserId },
      null,
    ]);

    expect(await journal.recover()).toBeGreaterThanOrEqual(3);
    for (const [i, id] of ids.entries()) {
      const record = await t.request('GET', `/api/v1/records/${id}`, { token: org.adminToken });
      expect(record.body).toMatchObject({
        status: 'approved',
        executed: true,
        reasons: [{ code: INTERRUPTED_REASON.code }],
        connection: connections[i] && { connection_id: connections[i].connectionId, user_id: connections[i].userId },
        confirmation: confirmations[i],
      });
      const verified = await t.request('GET', `/api/v1/records/${id}/verify`, { token: org.adminToken });
      expect(verified.body).toMatchObject({ valid: true });
    }
    expect(await sql.query('SELECT id FROM gateway_executions WHERE id = ANY($1)', [ids])).toEqual([]);
  });
});
