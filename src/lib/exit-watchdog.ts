import { Worker } from 'node:worker_threads';

/**
 * The watchdog's own thread: after `afterMs` it tries to say why on stderr and kills the process
 * once the line is written. The write is asynchronous and bounded (a stderr nobody reads cannot
 * hold the kill past WRITE_BOUND_MS); a fixed pause before the kill lost the line when the write
 * waited on a busy thread pool. CommonJS evaluated as is, with no loader hooks (`execArgv: []`),
 * so it starts in milliseconds without the main thread's help.
 */
const watchdogSource = `
const { workerData } = require('node:worker_threads');
const { write } = require('node:fs');
setTimeout(() => {
  const kill = () => process.kill(process.pid, 'SIGKILL');
  setTimeout(kill, workerData.writeBoundMs);
  write(2, workerData.message, kill);
}, workerData.afterMs);
`;

/** How long the watchdog waits for its line on stderr before it kills without it. */
const WRITE_BOUND_MS = 1000;

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
    workerData: {
      afterMs,
      writeBoundMs: WRITE_BOUND_MS,
      message: `agent-gateway: ${reason}; killing the process (SIGKILL)\n`,
    },
    stdout: true,
    stderr: true,
  });
  // The watchdog never keeps the process alive by itself, and process.exit ends it.
  worker.unref();
}
