import { Worker } from 'node:worker_threads';
import { messages, type QueryOptions } from '@electric-sql/pglite';
import {
  type ArrayType,
  type ParsedStatements,
  parseRaw,
  parsersFor,
  type PreparedPGlite,
  type PreparedTransaction,
  type RawResult,
  runTransaction,
} from './pglite-statements.js';

/**
 * The embedded database on a thread of its own. PGlite runs PostgreSQL in WebAssembly on the
 * thread that calls it: on the event loop, every statement held up every request for its whole
 * run (an operator read's loop delay reached 300 ms at p99). Here the service's thread only sends
 * statements and reads answers; PGlite runs in pglite-thread.ts on the second core. Decision 0055.
 */
export interface PGliteOnThread extends PreparedPGlite {
  readonly closed: boolean;
  /** The data directory as a tarball (what `loadDataDir` takes back). */
  dumpDataDir(): Promise<Blob>;
  /**
   * Learns the array types created since the thread started (the migrations' enums), as PGlite's
   * own method of that name: until then their arrays can be neither written nor read.
   */
  refreshArrayTypes(): Promise<void>;
  close(): Promise<void>;
  /**
   * Ends the thread once it has run what was sent before, as a crash would (tests). Not
   * `worker.terminate()` in the middle of a statement: stopping a thread inside PGlite's
   * WebAssembly can bring the whole process down (seen as SIGTRAP).
   */
  kill(): Promise<void>;
}

/** What the thread is started with. */
export interface ThreadStart {
  dataDir: string;
  loadDataDir?: ArrayBuffer;
}

/** What the service asks of the thread. */
export type ThreadCall =
  | {
      op: 'query';
      text: string;
      params: unknown[];
      inTransaction: boolean;
    }
  | { op: 'exec'; text: string; inTransaction: boolean }
  | { op: 'dump' }
  /** Reads the database's array types again (after migrations created types) and answers them. */
  | { op: 'refreshArrayTypes' }
  | { op: 'close' }
  /** Ends the thread where it stands, as a crash would (tests). */
  | { op: 'exit' };

export type ThreadRequest = ThreadCall & { id: number };

export interface ThreadReply {
  /** 0: the thread's start (ready, or why it could not open the database). */
  id: number;
  value?: unknown;
  error?: { message: string; name?: string; database?: boolean; fields: Record<string, unknown> };
}

/**
 * The thread's young generation. V8 sizes it from the machine's memory (up to 64 MB a semi-space
 * here) and every page of it that a burst of answers touched stays resident: the thread's heap
 * reached 80 MB, 20 of them in use, after 80k executes. What the thread allocates is an answer's
 * buffer and PGlite's parse of it, dead once posted. Decision 0071.
 */
const THREAD_YOUNG_GENERATION_MB = 16;

/** Said of every statement once the thread is gone; isDatabaseUnavailable answers 503 on it. */
const CLOSED = 'PGlite is closed';

/**
 * Where the thread's code is: beside this file. Run from the TypeScript sources (tests, `npm run
 * dev`), the thread loads them through tsx as this thread does.
 */
function threadEntry(): { url: URL; execArgv?: string[] } {
  const fromSources = import.meta.url.endsWith('.ts');
  const url = new URL(fromSources ? './pglite-thread.ts' : './pglite-thread.js', import.meta.url);
  return fromSources ? { url, execArgv: ['--import', 'tsx'] } : { url };
}

/** The error the thread reported, as the caller would have got it from PGlite on its own thread. */
function rebuild(error: NonNullable<ThreadReply['error']>): Error {
  const { name: _messageName, ...fields } = error.fields;
  if (error.database) return Object.assign(new messages.DatabaseError(error.message, 0, 'error'), fields);
  const rebuilt: Error = Object.assign(new Error(error.message), fields);
  if (error.name) rebuilt.name = error.name;
  return rebuilt;
}

export async function startPGliteThread(start: ThreadStart): Promise<PGliteOnThread> {
  const entry = threadEntry();
  const worker = new Worker(entry.url, {
    workerData: start,
    transferList: start.loadDataDir ? [start.loadDataDir] : [],
    ...(entry.execArgv ? { execArgv: entry.execArgv } : {}),
    resourceLimits: { maxYoungGenerationSizeMb: THREAD_YOUNG_GENERATION_MB },
  });
  const pending = new Map<number, { resolve(value: unknown): void; reject(error: Error): void }>();
  let nextId = 1;
  let closed = false;
  let failure: Error | undefined;

  const ready = new Promise<ArrayType[]>((resolve, reject) => {
    pending.set(0, { resolve: resolve as (value: unknown) => void, reject });
  });
  worker.on('message', (reply: ThreadReply) => {
    const waiting = pending.get(reply.id);
    if (!waiting) return;
    pending.delete(reply.id);
    if (pending.size === 0) worker.unref();
    if (reply.error) waiting.reject(rebuild(reply.error));
    else waiting.resolve(reply.value);
  });
  const stopped = (cause: Error) => {
    closed = true;
    failure ??= new Error(CLOSED, { cause });
    for (const waiting of pending.values()) waiting.reject(failure);
    pending.clear();
  };
  worker.on('error', stopped);
  worker.on('exit', (code) => stopped(new Error(`the embedded database's thread exited with code ${code}`)));

  let parsers: ReturnType<typeof parsersFor>;
  try {
    parsers = parsersFor(await ready);
  } catch (error) {
    await worker.terminate();
    throw error;
  }

  function send<T>(request: ThreadCall): Promise<T> {
    if (closed) return Promise.reject(failure ?? new Error(CLOSED));
    const id = nextId++;
    // The thread keeps the process alive only while an answer is awaited: a process that is done
    // exits even if nobody closed the database (as it did with PGlite on its own thread).
    if (pending.size === 0) worker.ref();
    return new Promise<T>((resolve, reject) => {
      pending.set(id, { resolve: resolve as (value: unknown) => void, reject });
      worker.postMessage({ ...request, id });
    });
  }

  /** Answers are parsed here, so that their values are of this realm (see RawResult). */
  const runner: ParsedStatements = {
    async statement<T>(text: string, params: unknown[], options: QueryOptions | undefined, inTransaction: boolean) {
      const raw = await send<RawResult>({ op: 'query', text, params, inTransaction });
      return parseRaw<T>(raw, parsers, options);
    },
    async script(text: string, options: QueryOptions | undefined, inTransaction: boolean) {
      const raw = await send<RawResult[]>({ op: 'exec', text, inTransaction });
      return raw.map((result) => parseRaw(result, parsers, options));
    },
  };

  const order = statementOrder();
  const outside = order.send;

  return {
    get closed() {
      return closed;
    },
    query<T>(text: string, params: unknown[] = [], options?: QueryOptions) {
      return outside(() => runner.statement<T>(text, params, options, false));
    },
    exec(script: string, options?: QueryOptions) {
      return outside(() => runner.script(script, options, false));
    },
    transaction<T>(work: (tx: PreparedTransaction) => Promise<T>) {
      return order.transaction(() => runTransaction(runner, work));
    },
    async refreshArrayTypes() {
      parsers = parsersFor(await outside(() => send<ArrayType[]>({ op: 'refreshArrayTypes' })));
    },
    async dumpDataDir() {
      const dump = await outside(() => send<ArrayBuffer>({ op: 'dump' }));
      return new Blob([dump]);
    },
    async close() {
      if (closed) return;
      await outside(() => send<null>({ op: 'close' })).catch(() => undefined);
      closed = true;
      failure = new Error(CLOSED);
      await worker.terminate();
    },
    async kill() {
      const gone = new Promise((resolve) => worker.once('exit', resolve));
      worker.ref();
      // In turn with the statements sent before it, which the thread runs first.
      await outside(async () => worker.postMessage({ op: 'exit', id: nextId++ } satisfies ThreadRequest));
      await gone;
    },
  };
}

/**
 * One at a time into a transaction, in order: a statement outside one is sent once no transaction
 * is open or waiting, and does not wait for its answer to let the next in; a transaction keeps the
 * rest out until it ends. The thread runs what it gets in the order it got it.
 *
 * A lock of our own rather than PGlite's Mutex: through the Mutex, every answer outlived two
 * young-generation collections and was promoted to the old generation, though nothing kept it (a
 * page of 100 rows of 1 KB: 108 KB promoted a statement, the whole answer; 0.7 KB with this lock,
 * test/young-garbage.test.ts): an export filled the old generation at the pace it was read, and the
 * process grew until a full collection (docs/decisions/0064-exports-streamed-with-backpressure.md).
 */
function statementOrder() {
  let held = false;
  const waiting: (() => void)[] = [];
  /** Undefined when the lock was free (and is now held); else a promise of the turn. */
  const take = (): Promise<void> | undefined => {
    if (!held) {
      held = true;
      return undefined;
    }
    return new Promise<void>((resolve) => waiting.push(resolve));
  };
  const give = () => {
    const next = waiting.shift();
    if (next) next();
    else held = false;
  };
  /** Starts `start` holding the lock, and lets the next in as soon as it has started. */
  const started = <T>(start: () => Promise<T>): Promise<T> => {
    try {
      return start();
    } finally {
      give();
    }
  };
  return {
    send<T>(start: () => Promise<T>): Promise<T> {
      const turn = take();
      return turn ? turn.then(() => started(start)) : started(start);
    },
    async transaction<T>(work: () => Promise<T>): Promise<T> {
      await take();
      try {
        return await work();
      } finally {
        give();
      }
    },
  };
}
