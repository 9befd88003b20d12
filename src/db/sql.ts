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

/**
 * PostgreSQL's guess of an array parameter's length when it plans a prepared statement once for
 * every call (its generic plan): `estimate_array_length` in its planner.
 */
const GENERIC_ARRAY_LENGTH = 10;

/**
 * The array parameters of a prepared statement that joins them with `unnest`, each padded with
 * nulls to at least the length PostgreSQL guesses for them, for the statement to be planned once
 * per connection. For its first calls PostgreSQL plans a statement with the values given, and
 * keeps a plan without them only if that costs no more; with fewer keys than its guess, the plan
 * that counted them always cost less, so the statement was planned again on every call: the bearer
 * check's 200-odd µs of PostgreSQL's CPU for 50 µs of execution. A null key joins no row, so the
 * statement must join the keys (not left-join them) and answer by each key's ordinal or value.
 */
export function plannedOnce(arrays: readonly (readonly unknown[])[]): unknown[][] {
  return arrays.map((values) =>
    values.length >= GENERIC_ARRAY_LENGTH
      ? [...values]
      : [...values, ...Array<null>(GENERIC_ARRAY_LENGTH - values.length).fill(null)],
  );
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
