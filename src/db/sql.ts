/**
 * The raw driver under Prisma, for what Prisma's query API does not do: running migration
 * scripts with many statements, advisory locks, and single-round-trip upserts on hot paths.
 */
export interface SqlDriver {
  /** Runs a script of one or more statements without parameters. */
  exec(script: string): Promise<void>;
  query<Row = Record<string, unknown>>(text: string, params?: unknown[]): Promise<Row[]>;
  /** Runs `work` on one connection, so session state (locks) holds across its statements. */
  withConnection<T>(work: (conn: Omit<SqlDriver, 'withConnection'>) => Promise<T>): Promise<T>;
}
