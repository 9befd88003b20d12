// First: --help, --version and arguments the service does not take are answered before anything loads.
import './command-line.js';
// Second: the process starts again with the V8 flags that bound its memory (before anything loads).
import './v8-flags.js';
import { createServer } from 'node:http';
import { DataDirInUseError } from './db/data-dir-lock.js';
import { openDatabase } from './db/database.js';
import { databaseOptions, parseEnv } from './env.js';
import { consoleIsBuilt } from './http/console.js';
import { armExitWatchdog } from './lib/exit-watchdog.js';
import { releaseStartupMemory } from './lib/startup-memory.js';
import { createLogger, stdoutLogOutput } from './logger.js';
import { createMetricsServer, METRICS_PATH } from './observability/metrics-server.js';
import { listeningLine } from './usage.js';

/**
 * Shutdown budget after SHUTDOWN_GRACE_MS (in-flight requests): stopping background work, closing
 * the database and writing the last log lines. Past it the process exits with status 1.
 */
const SHUTDOWN_FINISH_MS = 3000;
/** How long the last log lines may take to reach a slow stdout reader before exit. */
const LOG_FLUSH_MS = 1000;
/**
 * Past grace + finish + flush + this, a watchdog thread kills the process: the orderly exit above
 * runs on the main thread, and a main thread stuck in a native call would never reach it.
 */
const WATCHDOG_MARGIN_MS = 1000;

const env = parseEnv();
const logOutput = stdoutLogOutput();
const logger = createLogger(env.logLevel, logOutput);

let exiting = false;

/** Writes `message` as the last log line, gives stdout a bounded time to take it, and exits. */
async function exitWith(code: number, message: string, fields: Record<string, unknown> = {}): Promise<never> {
  // The first decision stands: an overdue shutdown is not turned into a clean one by a late finish.
  if (exiting) return new Promise<never>(() => undefined);
  exiting = true;
  if (code === 0) logger.info(fields, message);
  else logger.error(fields, message);
  if (!(await logOutput.flushWithin(LOG_FLUSH_MS))) {
    // stderr is written asynchronously too (a pipe or socket in libuv): it cannot block the exit.
    process.stderr.write(
      `agent-gateway: stdout did not take every log line before exit (${logOutput.pendingBytes} bytes queued, ${logOutput.droppedLines} lines dropped)\n`,
    );
  }
  process.exit(code);
}

/** Start-up failed: one line that says why (a locked DATA_DIR needs no stack trace). */
function failToStart(error: unknown): Promise<never> {
  const message = error instanceof Error ? error.message : String(error);
  return exitWith(1, `cannot start: ${message}`, error instanceof DataDirInUseError ? {} : { err: error });
}

const db = await openDatabase(databaseOptions(env, (message) => logger.error(message))).catch(failToStart);
// Loaded once the database is open: a first start creates the embedded database (initdb) at the
// process's memory peak, which the application's modules and their heap need not add to.
const { createApp } = await import('./app.js');
const app = createApp({ env, db, logger });
await app.ready.catch(failToStart);
const server = createServer(app.handler);
server.keepAliveTimeout = 5000;

// Metrics on their own listener, never on the public port; METRICS_PORT=0 turns them off.
const metricsServer = env.metricsPort === 0 ? undefined : createMetricsServer(app.telemetry, logger);
if (metricsServer) {
  await new Promise<void>((resolve, reject) => {
    metricsServer.once('error', reject);
    metricsServer.listen(env.metricsPort, env.metricsHost, () => {
      metricsServer.off('error', reject);
      resolve();
    });
  }).catch((error: Error) =>
    failToStart(
      new Error(`the metrics listener cannot listen on ${env.metricsHost}:${env.metricsPort}: ${error.message}`),
    ),
  );
  logger.info({ metrics: `http://${env.metricsHost}:${env.metricsPort}${METRICS_PATH}` }, 'metrics listener started');
}

releaseStartupMemory();
server.listen(env.port, env.host, () => {
  // The console is advertised only where it is built (a production install may have none).
  const { fields, message } = listeningLine(env.publicUrl, `${db.kind} ${db.location}`, consoleIsBuilt());
  logger.info(fields, message);
});

let stopping = false;
async function shutdown(signal: string) {
  if (stopping) return;
  stopping = true;
  const finishBy = env.shutdownGraceMs + SHUTDOWN_FINISH_MS;
  try {
    armExitWatchdog(
      finishBy + LOG_FLUSH_MS + WATCHDOG_MARGIN_MS,
      `shutdown after ${signal} did not end the process in time`,
    );
  } catch (error) {
    // No thread to be had (resources exhausted): the orderly path and its deadline still run.
    logger.warn({ err: error }, 'the shutdown watchdog could not start');
  }
  const overdue = setTimeout(
    () => void exitWith(1, `shutdown did not finish within ${finishBy} ms; exiting with work left undone`),
    finishBy,
  );
  logger.info({ signal }, 'shutting down: draining requests');
  app.setDraining();
  const failureOf = (work: Promise<unknown>) =>
    work.then(
      () => undefined,
      (error: unknown) => error ?? 'failed',
    );
  // Background work stops while requests drain.
  const backgroundStopped = failureOf(app.stop());
  const forced = setTimeout(() => server.closeAllConnections(), env.shutdownGraceMs);
  await new Promise<void>((resolve) => {
    server.close(() => resolve());
    server.closeIdleConnections();
  });
  clearTimeout(forced);
  // Scrapes were answered while requests drained; the listener goes with the public one.
  if (metricsServer) {
    metricsServer.close();
    metricsServer.closeAllConnections();
  }
  const failure = (await backgroundStopped) ?? (await failureOf(db.close()));
  clearTimeout(overdue);
  if (failure !== undefined) await exitWith(1, 'shutdown failed', { err: failure });
  await exitWith(0, 'stopped');
}

process.on('SIGTERM', () => void shutdown('SIGTERM'));
process.on('SIGINT', () => void shutdown('SIGINT'));
