import pg from 'pg';

/**
 * The pool's clients, with a deadline on every statement: one the server never answers (a network
 * partition) fails as node-postgres' `query_timeout` fails it, and its connection is dropped so
 * that the pool replaces it.
 *
 * Why not `query_timeout` itself: node-postgres implements it, and its promise form, by swapping
 * the callback of a query object after building it. On Node 24 every such statement then outlived
 * two young-generation collections and was promoted with everything it reached (the request's
 * objects too): 3 MB per scavenge under 500 executes a second, scavenges of 6 to 9 ms instead of
 * about 2, and those pauses made the p99. Here each query is built with its final callback, so
 * nothing of it is reassigned. docs/decisions/0057-young-garbage.md has the measurements.
 */
export function clientWithStatementDeadline(timeoutMs: number): typeof pg.Client {
  return class StatementDeadlineClient extends pg.Client {
    override query(...args: unknown[]): never {
      const [config, second, third] = args;
      // A query object of the caller's own (a cursor, a stream) keeps the driver's behaviour.
      if (typeof (config as { submit?: unknown } | null)?.submit === 'function')
        return (super.query as (...a: unknown[]) => never)(...args);
      const callback = (typeof second === 'function' ? second : third) as Callback | undefined;
      const values = typeof second === 'function' ? undefined : second;
      const answered = answerOnce(callback);
      const query = new pg.Query(
        config as pg.QueryConfig,
        values as unknown[],
        (error: Error | null | undefined, result) => {
          clearTimeout(deadline);
          answered.answer(error, result);
        },
      );
      const deadline = setTimeout(() => {
        answered.answer(new Error('Query read timeout'));
        // What the server sends later, if ever, reaches a connection that is gone: the pool
        // replaces it, and no later statement reads this one's answer.
        this.connection.stream.destroy();
      }, timeoutMs);
      super.query(query);
      return answered.promise as never;
    }
  } as unknown as typeof pg.Client;
}

type Callback = (error: Error | null | undefined, result?: pg.QueryResult) => void;

/** The caller's callback, or a promise when it gave none; settled by the first answer only. */
function answerOnce(callback: Callback | undefined) {
  let settle: Callback | undefined = callback;
  const promise = callback
    ? undefined
    : new Promise<pg.QueryResult>((resolve, reject) => {
        settle = (error, result) => (error ? reject(error) : resolve(result!));
      });
  return {
    promise,
    answer(error: Error | null | undefined, result?: pg.QueryResult) {
      const once = settle;
      settle = undefined;
      once?.(error, result);
    },
  };
}
