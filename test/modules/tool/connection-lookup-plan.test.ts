/**
 * Every call to a tool with an OAuth connection reads its connection; for a per-user tool that
 * is one row among all its users'. The statements must reach it through an index on the user (or
 * the org's partial index), never by reading the tool's every connection and filtering, as
 * `user_id IS NOT DISTINCT FROM $2` did: asked of the planner on the configured backend with
 * sequential scans priced out, so a condition no index answers shows as a filter.
 */
import { findConnectionFor, findConnectionForCall } from '../../../src/modules/tool/tool-connections.store.js';
import { createTestDatabase, type TestDatabase } from '../../support/database.js';
import { planOf as planStatement, type Statement, statementOf } from '../../support/plans.js';

let database: TestDatabase;

beforeAll(async () => {
  database = await createTestDatabase();
});

afterAll(async () => {
  await database?.close();
});

const planOf = (statement: Statement) => planStatement(database.db.sql, statement);

const TOOL = 'tool_plan';
const USER = '00000000-0000-4000-8000-000000000001';

test.each([
  ['a call', findConnectionForCall],
  ['the routes', findConnectionFor],
])("%s find a user's connection by an index on the user, never by filtering", async (_, find) => {
  const plan = await planOf(await statementOf((conn) => find(conn, TOOL, USER)));
  // Either index the planner likes (by tool and user, or by user: a user's few connections) is
  // bounded by the user; what must not happen is reaching the user's row by a filter.
  expect(plan).toMatch(/Index Cond: .*user_id = /);
  expect(plan).not.toMatch(/Filter: .*user_id/);
  expect(plan).not.toMatch(/Seq Scan/);
});

test.each([
  ['a call', findConnectionForCall],
  ['the routes', findConnectionFor],
])("%s find the org's connection by its partial index, with no filter", async (_, find) => {
  const plan = await planOf(await statementOf((conn) => find(conn, TOOL, null)));
  expect(plan).toMatch(/Index (Only )?Scan using tool_connections_(org_connection_key|tool_id_user_id_key)/);
  expect(plan).not.toMatch(/Filter/);
  expect(plan).not.toMatch(/Seq Scan/);
});
