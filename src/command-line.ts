/**
 * The service's own arguments, answered before anything else of it is evaluated: src/main.ts
 * imports this module first, so `--help` and `--version` print and exit without building the
 * schema or opening the database, and an argument the service does not take is refused with exit
 * status 2 and the usage on stderr.
 *
 * The answer is written with blocking writes and the process exits right here: awaiting a write
 * would let the modules imported after this one run meanwhile (top-level await only holds back
 * the modules that import the waiting one).
 */
import { writeSync } from 'node:fs';
import { commandLine } from './usage.js';

/** A blocking write of all of `text` (stdout may be a non-blocking pipe: EAGAIN is retried). */
function writeAll(fd: number, text: string) {
  const bytes = Buffer.from(text);
  for (let at = 0; at < bytes.length; ) {
    try {
      at += writeSync(fd, bytes, at);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EAGAIN') throw error;
    }
  }
}

const answer = commandLine(process.argv.slice(2));
if (answer) {
  if (answer.stdout) writeAll(1, answer.stdout);
  if (answer.stderr) writeAll(2, answer.stderr);
  process.exit(answer.exit);
}
