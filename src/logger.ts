import type { Writable } from 'node:stream';
import pino, { type DestinationStream, type Logger } from 'pino';
import { isDatabaseUnavailable } from './db/unavailable.js';

/**
 * Bytes of log lines held in memory while stdout does not take them (its reader is slow or has
 * stopped reading). Past this, new lines are dropped and counted instead of growing memory
 * without bound; a warning with the count follows once stdout takes lines again.
 */
export const MAX_BUFFERED_LOG_BYTES = 16 * 1024 * 1024;

/**
 * Where log lines go: a Node stream (process.stdout), written asynchronously so that a reader
 * that stops reading can never block the event loop, with a bounded buffer and an explicit,
 * bounded flush before exit.
 *
 * Why not pino.destination(1): its SonicBoom retries EAGAIN on a non-blocking stdout with
 * Atomics.wait, and pino flushes it synchronously on process exit, so a full pipe whose reader
 * stopped reading keeps the process in a futex wait forever, SIGTERM or not. process.stdout on a
 * pipe or socket is non-blocking in libuv (no thread pool write that exit would have to join), a
 * file is written synchronously (never blocked for good), and lines still queued at exit are
 * simply not written, so exit never waits on the reader.
 */
export class LogOutput implements DestinationStream {
  /** Lines dropped since stdout last took everything; reported once it drains. */
  private dropped = 0;
  /** The reader is gone (EPIPE) or the stream was closed: nothing can be written any more. */
  private broken = false;
  private onDropsReported: ((dropped: number) => void) | undefined;

  constructor(
    private readonly stream: Writable,
    private readonly maxBufferedBytes = MAX_BUFFERED_LOG_BYTES,
  ) {
    // Without a listener, EPIPE from a reader that went away would be an uncaught exception.
    stream.on('error', () => {
      this.broken = true;
    });
    stream.on('close', () => {
      this.broken = true;
    });
    stream.on('drain', () => {
      if (this.dropped === 0 || !this.onDropsReported) return;
      const dropped = this.dropped;
      this.dropped = 0;
      this.onDropsReported(dropped);
    });
  }

  write(line: string): void {
    if (this.broken || this.stream.writableLength > this.maxBufferedBytes) {
      this.dropped++;
      return;
    }
    this.stream.write(line);
  }

  /** Called with the number of dropped lines once stdout has taken the backlog. */
  reportDropsWith(report: (dropped: number) => void): void {
    this.onDropsReported = report;
  }

  /** Lines dropped and not yet reported (stdout has not drained since). */
  get droppedLines(): number {
    return this.dropped;
  }

  /** Bytes accepted but not yet handed to the operating system. */
  get pendingBytes(): number {
    return this.broken ? 0 : this.stream.writableLength;
  }

  /**
   * Waits until every accepted line has been handed to the operating system, at most `timeoutMs`.
   * True when nothing was lost; false when lines are still queued (the reader is not reading),
   * were dropped, or the reader is gone. (Not named `flush`: pino's `logger.flush(cb)` calls that.)
   */
  async flushWithin(timeoutMs: number): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    // Polled: 'drain' only follows a write that went over the high-water mark.
    while (!this.broken && this.stream.writableLength > 0 && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    return !this.broken && this.stream.writableLength === 0 && this.dropped === 0;
  }
}

let stdoutOutput: LogOutput | undefined;

/** The one LogOutput on process.stdout (every logger of the process shares its buffer bound). */
export function stdoutLogOutput(): LogOutput {
  return (stdoutOutput ??= new LogOutput(process.stdout));
}

/** JSON lines on stdout. Credentials are redacted wherever they might appear in a logged object. */
export function createLogger(level: string, destination: DestinationStream = stdoutLogOutput()): Logger {
  const logger = pino(
    {
      level,
      base: { service: 'agent-gateway' },
      timestamp: pino.stdTimeFunctions.isoTime,
      redact: {
        paths: [
          'password',
          '*.password',
          'admin_password',
          '*.admin_password',
          'authorization',
          '*.authorization',
          'headers.authorization',
          'headers["x-api-key"]',
          'key',
          '*.key',
          'access_token',
          '*.access_token',
          'token',
          '*.token',
        ],
        censor: '[redacted]',
      },
    },
    destination,
  );
  if (destination instanceof LogOutput) {
    destination.reportDropsWith((dropped) =>
      logger.warn({ dropped_lines: dropped }, `${dropped} log lines were dropped: stdout was not being read`),
    );
  }
  return logger;
}

/**
 * Logs a failure no AppError explains. A database that cannot be reached is expected during an
 * outage, where every request meets it and is answered 503: a warning without a stack. Anything
 * else is a bug: an error with its stack.
 */
export function logUnexpected(logger: Logger, error: unknown, fields: Record<string, unknown>, message: string): void {
  if (isDatabaseUnavailable(error))
    logger.warn({ ...fields, reason: error instanceof Error ? error.message : String(error) }, 'database unavailable');
  else logger.error({ ...fields, err: error }, message);
}
