import { Worker } from 'node:worker_threads';

/**
 * The watchdog's own thread: after `afterMs` it tries to say why on stderr (asynchronously, so a
 * stderr nobody reads cannot hold it) and kills the process. CommonJS evaluated as is, with no
 * loader hooks (`execArgv: []`), so it starts in milliseconds without the main thread's help.
 */
const watchdogSource = `
const { workerData } = require('node:worker_threads');
const { write } = require('node:fs');
setTimeout(() => {
  write(2, workerData.message, () => undefined);
  setTimeout(() => process.kill(process.pid, 'SIGKILL'), 100);
}, workerData.afterMs);
`;

/**
 * Kills the process with SIGKILL after `afterMs`, from a worker thread: nothing the main thread
 * may be stuck in (a synchronous write to a full pipe, a futex wait, an endless loop, a native
 * call) can hold it back, where a timer on the main thread would never fire. A last resort for
 * shutdown: the orderly path ends the process long before.
 */
export function armExitWatchdog(afterMs: number, reason: string): void {
  const worker = new Worker(watchdogSource, {
    eval: true,
    execArgv: [],
    workerData: { afterMs, message: `agent-gateway: ${reason}; killing the process (SIGKILL)\n` },
    stdout: true,
    stderr: true,
  });
  // The watchdog never keeps the process alive by itself, and process.exit ends it.
  worker.unref();
}
