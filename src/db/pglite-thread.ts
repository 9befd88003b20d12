import { parentPort, workerData } from 'node:worker_threads';
import { messages, PGlite } from '@electric-sql/pglite';
import { arrayTypes, statementRunner } from './pglite-statements.js';
import type { ThreadReply, ThreadRequest, ThreadStart } from './pglite-worker.js';

/**
 * The embedded database's own thread (pglite-worker.ts starts it): PGlite and its prepared
 * statements run here, off the service's event loop. Requests arrive in order and are run one at
 * a time in that order; the caller's lock decides which statements belong to a transaction.
 * Answers go back unparsed (RawResult): the service parses them in its own realm.
 */

const start = workerData as ThreadStart;
const port = parentPort!;

/** A database error keeps every field PGlite gives it (code, detail, constraint...) across the thread. */
function describeError(error: unknown): ThreadReply['error'] {
  if (!(error instanceof Error)) return { message: String(error), fields: {} };
  const fields: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(error)) {
    if (value === undefined || typeof value === 'function' || typeof value === 'object') continue;
    fields[key] = value;
  }
  return { message: error.message, name: error.name, fields, database: error instanceof messages.DatabaseError };
}

/**
 * PostgreSQL's memory settings for the embedded database, on its command line (over the data
 * directory's postgresql.conf, which initdb wrote with the server defaults). PGlite's memory is
 * WebAssembly memory: it grows and never shrinks, and every page PostgreSQL has touched stays in
 * the process's RSS. With the defaults, shared_buffers (128 MB) filled as the records grew: the
 * process held ~780 MB after 80k executes. A file the buffers miss is read through the operating
 * system's page cache, not from the disk: 16 MB of buffers keep the hot pages (budgets, keys, the
 * records' index ends) and cost no measured throughput. maintenance_work_mem bounds what an index
 * build or a VACUUM of the migrations takes. Decision 0071.
 */
const PGLITE_MEMORY_SETTINGS = ['shared_buffers=16MB', 'maintenance_work_mem=16MB'];

async function main() {
  const settings = PGLITE_MEMORY_SETTINGS.flatMap((setting) => ['-c', setting]);
  const pglite = await PGlite.create(start.dataDir, {
    ...(start.loadDataDir ? { loadDataDir: new Blob([start.loadDataDir]) } : {}),
    // Replaces PGlite's parameters: its own come first, ours after them win.
    startParams: [...PGlite.defaultStartParams, ...settings],
    // Added to PGlite's: initdb of a new data directory runs with them too (its peak: 553 -> 514
    // MB alone) and writes them into its postgresql.conf.
    initDbStartParams: settings,
  });
  const runner = statementRunner(pglite);
  /** Requests are run in arrival order: a transaction's statements follow its BEGIN. */
  let queue = Promise.resolve();
  port.on('message', (request: ThreadRequest) => {
    queue = queue.then(() => serve(request));
  });

  async function serve(request: ThreadRequest): Promise<void> {
    try {
      const value = await answer(request);
      if (value instanceof ArrayBuffer) port.postMessage({ id: request.id, value } satisfies ThreadReply, [value]);
      else port.postMessage({ id: request.id, value } satisfies ThreadReply);
    } catch (error) {
      port.postMessage({ id: request.id, error: describeError(error) } satisfies ThreadReply);
    }
  }

  async function answer(request: ThreadRequest): Promise<unknown> {
    switch (request.op) {
      case 'query':
        return runner.statement(request.text, request.params, request.inTransaction);
      case 'exec':
        return runner.script(request.text, request.inTransaction);
      case 'refreshArrayTypes':
        // Parameters are written by their type's serializer, which PGlite knows only for the
        // array types it had read: an array of a type created since would go out as plain text.
        await pglite.refreshArrayTypes();
        return arrayTypes(runner);
      case 'dump':
        return (await pglite.dumpDataDir('none')).arrayBuffer();
      case 'close':
        if (!pglite.closed) await pglite.close();
        return null;
      case 'exit':
        // A worker's process.exit ends this thread only.
        process.exit(1);
    }
  }

  // The service parses values itself, arrays of every type PGlite knows included.
  port.postMessage({ id: 0, value: await arrayTypes(runner) } satisfies ThreadReply);
}

main().catch((error: unknown) => {
  port.postMessage({ id: 0, error: describeError(error) } satisfies ThreadReply);
});
