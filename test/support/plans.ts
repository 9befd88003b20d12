import type { SqlConnection, SqlDriver } from '../../src/db/sql.js';

/** A statement as sent to the database: its text and parameters. */
export interface Statement {
  text: string;
  values: unknown[];
}

/** The statement a store function sends, caught instead of run (it must send exactly one). */
export async function statementOf(read: (conn: SqlConnection) => Promise<unknown>): Promise<Statement> {
  const sent: Statement[] = [];
  const catcher = {
    query: async (text: string, values: unknown[] = []) => {
      sent.push({ text, values });
      return [];
    },
    exec: async () => undefined,
  } as unknown as SqlConnection;
  await read(catcher);
  expect(sent).toHaveLength(1);
  return sent[0];
}

/**
 * The planner's plan for a statement, as text, with sequential scans priced out: a condition no
 * index answers then shows as a filter, and a sort as a Sort node, whatever the table's size.
 */
export async function planOf(sql: SqlDriver, { text, values }: Statement): Promise<string> {
  return sql.transaction(async (tx) => {
    await tx.exec('SET LOCAL enable_seqscan = off');
    const rows = await tx.query<Record<string, unknown>>(`EXPLAIN ${text}`, values);
    return rows.map((row) => String(Object.values(row)[0])).join('\n');
  });
}
