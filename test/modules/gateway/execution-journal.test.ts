/**
 * The execution journal's records that wait for the database (`defer`): appended once it is back,
 * each exactly once, however many executions are deferred while an append is under way. The
 * record service stands in with appends that take as long as the test says (a database that has
 * just come back and answers slowly); what database-faults.test.ts checks end to end under 40
 * backend terminations, this checks in the one interleaving that broke it. And the record of an
 * interrupted execution keeps what its journal entry kept, the connection of the call included.
 */
import pino from 'pino';
import type { Deps } from '../../../src/deps.js';
import { createExecutionJournal, interruptedRecord } from '../../../src/modules/gateway/execution-journal.js';
import type { NewRecord, RecordService } from '../../../src/modules/record/record.service.js';

const record = {} as NewRecord;

function slowRecords(appendMs: number) {
  const appended: string[] = [];
  const stored = new Set<string>();
  const records = {
    existing: async (ids: readonly string[]) => new Set(ids.filter((id) => stored.has(id))),
    append: async (id: string) => {
      appended.push(id);
      await new Promise((resolve) => setTimeout(resolve, appendMs));
      // As the table's primary key does: a second append of one id fails.
      if (stored.has(id)) throw new Error(`duplicate key value violates unique constraint (${id})`);
      stored.add(id);
    },
  } as unknown as RecordService;
  return { records, appended, stored };
}

test('an execution deferred while deferred records are being appended waits for that append: each record is appended once', async () => {
  const errors: unknown[] = [];
  const logger = pino({ level: 'warn' }, { write: (line: string) => errors.push(JSON.parse(line)) });
  const deps = {
    db: { sql: { query: async () => [] } },
    logger,
    env: { executionLeaseSeconds: 3, executionRecoverySeconds: 1 },
  } as unknown as Deps;
  // An append takes three times the first retry delay (500 ms).
  const { records, appended, stored } = slowRecords(1500);
  const journal = createExecutionJournal(deps, records);

  journal.defer('int_first', record, false);
  // The first retry starts at 500 ms; while its append runs, another execution is deferred.
  await new Promise((resolve) => setTimeout(resolve, 800));
  expect(appended).toEqual(['int_first']);
  journal.defer('int_second', record, false);

  const deadline = Date.now() + 10_000;
  while (stored.size < 2 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 50));
  expect([...stored].sort()).toEqual(['int_first', 'int_second']);
  expect(appended).toEqual(['int_first', 'int_second']);
  expect(errors).toEqual([]);
  await journal.stop();
});

test('the record of an interrupted execution names the connection its journal entry kept', () => {
  const entry = {
    id: 'int_interrupted',
    orgId: '00000000-0000-4000-8000-000000000001',
    svcId: 'agent',
    agentId: 'agent',
    actionType: 'mail',
    tool: 'send',
    capability: 'mail:send',
    paramsHash: `sha256:${'4'.repeat(64)}`,
    params: null,
    approvalId: null,
    policies: [],
    channel: 'mcp' as const,
    labels: [],
    confirmation: null,
  };
  const connection = { connectionId: 'conn_user', userId: '00000000-0000-4000-8000-000000000002' };
  expect(interruptedRecord({ ...entry, connection })).toMatchObject({
    executed: true,
    reasons: [{ code: 'EXECUTION_INTERRUPTED' }],
    connection,
  });
  expect(interruptedRecord({ ...entry, connection: null }).connection).toBeNull();
});
