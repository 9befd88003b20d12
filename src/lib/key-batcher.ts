/**
 * Work queued per key and run one batch at a time: items that arrive while a batch of their key is
 * in flight wait for it and go together in the next. Under load a key costs one statement per
 * round trip instead of one per item; an item that arrives alone waits for nothing. The record
 * chain (one lock round per batch) and the operator rate counter (one upsert per batch) use it.
 */

export interface Queued<I, R> {
  item: I;
  resolve: (result: R) => void;
  reject: (error: unknown) => void;
}

/**
 * `run` settles every item of its batch, each with its own result or error. When it throws, the
 * items it left unsettled fail with that error.
 */
export function keyBatcher<I, R>(
  run: (key: string, batch: Queued<I, R>[]) => Promise<void>,
  maxBatch = Number.POSITIVE_INFINITY,
): (key: string, item: I) => Promise<R> {
  const queues = new Map<string, Queued<I, R>[]>();

  async function drain(key: string): Promise<void> {
    for (;;) {
      const queue = queues.get(key)!;
      if (!queue.length) {
        queues.delete(key);
        return;
      }
      const batch = queue.splice(0, maxBatch);
      // A settled promise ignores a second settlement, so failing them all fails only those left.
      await run(key, batch).catch((error: unknown) => {
        for (const queued of batch) queued.reject(error);
      });
    }
  }

  return (key, item) =>
    new Promise<R>((resolve, reject) => {
      const queued = { item, resolve, reject };
      const queue = queues.get(key);
      if (queue) {
        queue.push(queued);
        return;
      }
      queues.set(key, [queued]);
      void drain(key);
    });
}
