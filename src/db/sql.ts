/**
 * The raw driver under Prisma, for what Prisma's query API does not do: running migration
 * scripts with many statements, advisory locks, and single-round-trip upserts on hot paths.
 * Nothing done through it outlives a transaction (no session-level locks or settings), so it
 * works the same behind a pooler in transaction mode.
 */
export interface SqlDriver {
  /** Runs a script of one or more statements without parameters. */
  exec(script: string): Promise<void>;
  /**
   * `prepared` names a statement run on every gateway call: PostgreSQL parses and plans it once
   * per connection instead of on every call (PGlite ignores the name).
   */
  query<Row = Record<string, unknown>>(text: string, params?: unknown[], prepared?: string): Promise<Row[]>;
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

/**
 * How the PostgreSQL connections reach the server. `session`: directly, or through a pooler that
 * gives each client one server session (PgBouncer's session mode). `transaction`: through a
 * pooler that hands out a server session per transaction (PgBouncer's transaction mode), where
 * nothing may outlive a transaction: no named prepared statements (every other kind of session
 * state is avoided in both modes).
 */
export type PoolMode = 'session' | 'transaction';

/** How long a request waits on PostgreSQL before it is answered 503 (DATABASE_TIMEOUT_MS). */
export const DEFAULT_DATABASE_TIMEOUT_MS = 5000;
