import type { SqlDriverAdapter, SqlQuery, Transaction } from '@prisma/driver-adapter-utils';
import { PrismaPg } from '@prisma/adapter-pg';
import type pg from 'pg';
import { namedStatementLost, type StatementNaming } from './statement-naming.js';
import { isLostPreparedStatement } from './unavailable.js';

/**
 * How many of Prisma's statements (distinct SQL texts) a process names: what Prisma's own query
 * engine kept per connection (`statement_cache_size`, 100). node-postgres keeps a connection's
 * named statements for its life, so the bound is what keeps a server session's memory bounded
 * when GraphQL selections make new texts; past it statements go unnamed, as before.
 */
const MAX_NAMED_PRISMA_STATEMENTS = 100;

/**
 * Prisma's driver adapter for PostgreSQL with its statements named, so that PostgreSQL parses and
 * plans each once per connection (after its first few calls, when a plan for every call costs no
 * more than one for the values given) instead of on every call. An operator's read of an
 * organization spent a third of its PostgreSQL CPU parsing and planning Prisma's statement for it.
 *
 * Only statements with arguments, and not in Prisma's interactive transactions (nor their BEGIN):
 * behind a pooler in transaction mode a lost statement
 * there would end the transaction, which Prisma cannot run again (the raw driver's transactions
 * are run again instead). Outside them, a statement the pooler lost turns naming off for good
 * (`namedStatementLost`) and is sent again, unnamed.
 */
export function preparedPrisma(pool: pg.Pool, naming: StatementNaming): PrismaPg {
  const names = new Map<string, string>();
  /** Set while a transaction's statement is handed to the adapter, which asks for its name synchronously. */
  let inTransaction = false;
  const nameOf = (query: SqlQuery): string => {
    // An empty name is an unnamed statement for node-postgres. Without arguments there is nothing
    // to plan for: the adapter's own BEGIN (sent where no wrapper sees it) stays unnamed too.
    if (!naming.named || inTransaction || !query.args.length) return '';
    const known = names.get(query.sql);
    if (known !== undefined || names.size >= MAX_NAMED_PRISMA_STATEMENTS) return known ?? '';
    const name = `prisma_${names.size + 1}`;
    names.set(query.sql, name);
    return name;
  };
  const factory = new PrismaPg(pool, { statementNameGenerator: nameOf });

  /** A statement outside a transaction: sent again, unnamed, if the pooler lost it. */
  const retried =
    (run: (query: SqlQuery) => Promise<unknown>) =>
    async (query: SqlQuery): Promise<unknown> => {
      try {
        return await run(query);
      } catch (error) {
        if (!isLostPreparedStatement(error)) throw error;
        namedStatementLost(naming);
        return run(query);
      }
    };
  /** A statement of a transaction: its name is asked for while `inTransaction` is set. */
  const unnamed =
    (run: (query: SqlQuery) => Promise<unknown>) =>
    (query: SqlQuery): Promise<unknown> => {
      inTransaction = true;
      try {
        return run(query);
      } finally {
        inTransaction = false;
      }
    };
  const statements = <T extends object>(
    target: T,
    wrap: (run: (query: SqlQuery) => Promise<unknown>) => (query: SqlQuery) => Promise<unknown>,
  ): T =>
    new Proxy(target, {
      get(object, property, receiver) {
        const value = Reflect.get(object, property, receiver);
        if (property === 'queryRaw' || property === 'executeRaw') {
          const run = (value as (query: SqlQuery) => Promise<unknown>).bind(object);
          return wrap(run);
        }
        if (property === 'startTransaction') {
          return async (...args: unknown[]) =>
            statements(await (value as (...a: unknown[]) => Promise<Transaction>).apply(object, args), unnamed);
        }
        return typeof value === 'function' ? value.bind(object) : value;
      },
    });
  return new Proxy(factory, {
    get(object, property, receiver) {
      const value = Reflect.get(object, property, receiver);
      if (property === 'connect') {
        return async () => statements(await (value as () => Promise<SqlDriverAdapter>).call(object), retried);
      }
      return typeof value === 'function' ? value.bind(object) : value;
    },
  });
}
