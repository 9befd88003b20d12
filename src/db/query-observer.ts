import type { SqlDriverAdapter, SqlDriverAdapterFactory, SqlQuery, Transaction } from '@prisma/driver-adapter-utils';

/** Called with every SQL statement Prisma sends through the driver adapter, and its parameters. */
export type QueryObserver = (sql: string, args: readonly unknown[]) => void;

function observeQueryable<T extends SqlDriverAdapter | Transaction>(target: T, observe: QueryObserver): T {
  return new Proxy(target, {
    get(object, property, receiver) {
      const value = Reflect.get(object, property, receiver);
      if (property === 'queryRaw' || property === 'executeRaw') {
        return (query: SqlQuery) => {
          observe(query.sql, query.args);
          return (value as (q: SqlQuery) => unknown).call(object, query);
        };
      }
      if (property === 'startTransaction') {
        return async (...args: unknown[]) =>
          observeQueryable(await (value as (...a: unknown[]) => Promise<Transaction>).apply(object, args), observe);
      }
      return typeof value === 'function' ? value.bind(object) : value;
    },
  });
}

/**
 * Wraps a driver adapter factory so tests can count the statements a request costs (the N+1
 * bounds); production never installs an observer.
 */
export function observeAdapter<F extends SqlDriverAdapterFactory>(factory: F, observe: QueryObserver): F {
  return new Proxy(factory, {
    get(object, property, receiver) {
      const value = Reflect.get(object, property, receiver);
      if (property === 'connect') {
        return async () => observeQueryable(await (value as () => Promise<SqlDriverAdapter>).call(object), observe);
      }
      return typeof value === 'function' ? value.bind(object) : value;
    },
  });
}
