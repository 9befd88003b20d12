import { Writable } from 'node:stream';
import { createLogger, LogOutput } from '../../src/logger.js';

/** A stdout whose reader takes nothing until `release()`, then everything. */
function stalledStdout() {
  const written: string[] = [];
  const held: Array<() => void> = [];
  let stalled = true;
  const stream = new Writable({
    highWaterMark: 1024,
    write(chunk: Buffer, _encoding, done) {
      written.push(chunk.toString('utf8'));
      if (stalled) held.push(done);
      else done();
    },
  });
  return {
    stream,
    written,
    release() {
      stalled = false;
      for (const done of held.splice(0)) done();
    },
  };
}

const messages = (written: string[]) => written.map((line) => JSON.parse(line).msg as string);

describe('log lines on a stdout that is not being read', () => {
  test('are held up to the bound, then dropped and counted; the count is logged once stdout takes lines again', async () => {
    const stdout = stalledStdout();
    const output = new LogOutput(stdout.stream, 4096);
    const logger = createLogger('info', output);
    for (let i = 0; i < 200; i++) logger.info({ i, padding: 'x'.repeat(100) }, 'line');
    expect(output.droppedLines).toBeGreaterThan(100);
    expect(output.pendingBytes).toBeLessThan(4096 + 200);
    // The bounded flush gives up instead of waiting for the reader.
    const startedAt = Date.now();
    expect(await output.flushWithin(100)).toBe(false);
    expect(Date.now() - startedAt).toBeLessThan(1000);

    const dropped = output.droppedLines;
    stdout.release();
    expect(await output.flushWithin(1000)).toBe(true);
    const logged = messages(stdout.written);
    expect(logged.filter((msg) => msg === 'line')).toHaveLength(200 - dropped);
    expect(logged.at(-1)).toBe(`${dropped} log lines were dropped: stdout was not being read`);
    expect(JSON.parse(stdout.written.at(-1)!)).toMatchObject({ level: 40, dropped_lines: dropped });
    expect(output.droppedLines).toBe(0);
  });

  test('a stdout whose reader went away (EPIPE) neither throws nor counts as flushed', async () => {
    const stream = new Writable({
      write(_chunk, _encoding, done) {
        done(Object.assign(new Error('write EPIPE'), { code: 'EPIPE' }));
      },
    });
    const output = new LogOutput(stream);
    const logger = createLogger('info', output);
    logger.info('first');
    await new Promise((resolve) => setImmediate(resolve));
    expect(() => logger.info('second')).not.toThrow();
    expect(output.droppedLines).toBe(1);
    expect(await output.flushWithin(100)).toBe(false);
  });
});
