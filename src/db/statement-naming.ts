/**
 * Whether statements are named, that is prepared once per connection (the hot path's raw SQL and
 * Prisma's statements); turned off for good once a pooler loses one. Off from the start with
 * DATABASE_POOL_MODE=transaction.
 */
export interface StatementNaming {
  named: boolean;
  warn(message: string): void;
}

/**
 * A named statement failed because the server session did not have it (or had one of its name):
 * the connection is not one server session, so naming stops, told once. Statements named before
 * this turned up fail the same way; their callers send them again unnamed.
 */
export function namedStatementLost(naming: StatementNaming): void {
  if (!naming.named) return;
  naming.named = false;
  naming.warn(
    'PostgreSQL lost a named prepared statement between two transactions of one connection: the database is behind a pooler in ' +
      'transaction mode. Named statements are off from now on; set DATABASE_POOL_MODE=transaction to start that way.',
  );
}
