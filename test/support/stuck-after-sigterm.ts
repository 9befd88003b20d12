/**
 * Preloaded into a service process by a test: once SIGTERM has started the shutdown, the main
 * thread blocks for good in a futex wait, as it did in a synchronous write to a full stdout. No
 * timer of the main thread can fire any more; only the shutdown watchdog's thread can end it.
 */
process.on('SIGTERM', () => {
  // Registered before the service's own listener: block only after that one has run.
  setImmediate(() => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0));
});
