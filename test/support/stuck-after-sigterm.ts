/**
 * Preloaded into a service process by a test: once SIGTERM has begun the shutdown, the main thread
 * blocks for good in a futex wait when the process exits, as pino's synchronous flush of a full
 * stdout used to. No timer of the main thread can fire any more; only the shutdown watchdog's
 * thread can end the process. (Blocking on exit rather than right after SIGTERM: on PostgreSQL an
 * idle shutdown finishes before the next turn of the event loop.)
 */
process.on('SIGTERM', () => {
  process.on('exit', () => {
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0);
  });
});
