import { RequestCache } from '@pothos/plugin-scope-auth';
import type { Plugin } from 'graphql-yoga';

const isAsyncIterable = (value: unknown): value is AsyncIterable<unknown> =>
  typeof value === 'object' && value !== null && Symbol.asyncIterator in value;

/**
 * Pothos keeps each request's scope results in a WeakMap from the context to a cache that points
 * back at the context. A young-generation collection keeps a WeakMap's values alive, and through
 * that cycle the whole request (its context, request, state and results): an operator read left
 * 12.5 KB a request for the old generation. Once the operation's result is complete the cache has
 * nothing left to answer, so it is dropped there (docs/decisions/0057-young-garbage.md).
 */
export function useScopeCacheRelease(): Plugin {
  return {
    onExecute({ args }) {
      const release = () => RequestCache.clearForContext(args.contextValue as object);
      return {
        onExecuteDone({ result }) {
          // An incremental result (a stream) still resolves fields: its end releases the cache.
          if (isAsyncIterable(result)) return { onEnd: release };
          release();
          return undefined;
        },
      };
    },
  };
}
