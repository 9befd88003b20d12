/**
 * The raw driver under Prisma, for what Prisma's query API does not do: running migration
 * scripts with many statements, advisory locks, and single-round-trip upserts on hot paths.
 */
export interface SqlDriver {
  /** Runs a script of one or more statements without parameters. */
  exec(script: string): Promise<void>;
  /**
   * `prepared` names a statement run on every gateway call: PostgreSQL parses and plans it once
   * per connection instead of on every call (PGlite ignores the name).
   */
  query<Row = Record<string, unknown>>(text: string, params?: unknown[], prepared?: string): Promise<Row[]>;
  /** Runs `work` on one connection, so session state (locks) holds across its statements. */
  withConnection<T>(work: (conn: SqlConnection) => Promise<T>): Promise<T>;
  /**
   * Runs `work` in a transaction, committed when it resolves and rolled back when it throws. On
   * the hot path this replaces Prisma's interactive transactions, which cost far more per statement.
   */
  transaction<T>(work: (tx: SqlConnection) => Promise<T>): Promise<T>;
  /**
   * Like `transaction`, but `work` decides: its writes are committed when it answers
   * `commit: true` and rolled back otherwise (a refusal found half-way is an answer, not an error).
   */
  transactionIf<T>(work: (tx: SqlConnection) => Promise<TransactionAnswer<T>>): Promise<T>;
}

export interface TransactionAnswer<T> {
  commit: boolean;
  value: T;
}

export type SqlConnection = Pick<SqlDriver, 'exec' | 'query'>;

