import { open, readFile, stat, type FileHandle } from 'node:fs/promises';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';

/**
 * One process per PGlite data directory. PGlite is an embedded, single-process PostgreSQL: two
 * processes on one directory each believe they own the files and overwrite each other's writes.
 *
 * The guard is an exclusive OS lock on `<DATA_DIR>/agent-gateway.lock` (an open file description
 * lock, F_OFD_SETLK, on Linux; flock/LockFileEx elsewhere) through fs-native-extensions, which
 * ships prebuilt binaries. The kernel owns such a lock: taking it is atomic, so of two processes
 * starting at once exactly one gets it; it is released when the process ends in any way, kill -9
 * included, so a crash never leaves it stuck and no pid or staleness guess is needed; and it holds
 * for every process that sees the file, in other containers sharing the volume too. The file's
 * content (pid, host, start time) only names the holder in the refusal message.
 */

export const LOCK_FILE_NAME = 'agent-gateway.lock';

export class DataDirInUseError extends Error {
  override name = 'DataDirInUseError';
}

export interface DataDirLock {
  /** Releases the lock (the file stays: removing it would let a late opener lock a lost inode). */
  release(): Promise<void>;
}

interface FileLocks {
  /** Takes an exclusive lock on the whole file without waiting; false when another holds it. */
  tryLock(fd: number): boolean;
}

// CommonJS with a native addon; loaded on first use, so PostgreSQL mode never loads it.
let fileLocks: FileLocks | undefined;
const loadFileLocks = (): FileLocks =>
  (fileLocks ??= createRequire(import.meta.url)('fs-native-extensions') as FileLocks);

interface Holder {
  pid: number;
  host?: string;
  since?: string;
}

async function readHolder(lockPath: string): Promise<Holder | undefined> {
  try {
    const holder = JSON.parse(await readFile(lockPath, 'utf8')) as Partial<Holder>;
    return typeof holder.pid === 'number' ? (holder as Holder) : undefined;
  } catch {
    // Empty (the holder is between truncating and writing) or not ours.
    return undefined;
  }
}

/** False only when the pid surely names no process (on this host; other hosts cannot be asked). */
function mayBeAlive(holder: Holder): boolean {
  if (holder.host !== os.hostname()) return true;
  try {
    process.kill(holder.pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * Who holds the lock, from the details its holder writes right after taking it. A holder that
 * has just won a simultaneous start may not have written them yet (the file is empty or still
 * names the previous, dead holder): it gets a moment.
 */
async function describeHolder(lockPath: string): Promise<string> {
  for (let attempt = 0; attempt < 20; attempt++) {
    const holder = await readHolder(lockPath);
    if (holder && mayBeAlive(holder)) {
      return `pid ${holder.pid}${holder.host ? ` on ${holder.host}` : ''}${holder.since ? `, running since ${holder.since}` : ''}`;
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return 'another process';
}

/** Whether `lockPath` still names the file `handle` has open (it was not removed or replaced). */
async function stillAtPath(handle: FileHandle, lockPath: string): Promise<boolean> {
  const [held, current] = await Promise.all([handle.stat(), stat(lockPath).catch(() => undefined)]);
  return current !== undefined && current.ino === held.ino && current.dev === held.dev;
}

/**
 * Takes the data directory's lock or throws DataDirInUseError naming the holder. The directory
 * must exist.
 */
export async function lockDataDir(dataDir: string): Promise<DataDirLock> {
  const { tryLock } = loadFileLocks();
  const lockPath = path.join(dataDir, LOCK_FILE_NAME);
  // A lock file removed by hand between our open and our lock would leave us holding a lock on a
  // file nobody else opens: then open the new one. Twice in a row means something keeps removing it.
  for (let tries = 0; tries < 3; tries++) {
    const handle = await open(lockPath, 'a+', 0o600);
    try {
      if (!tryLock(handle.fd)) {
        throw new DataDirInUseError(
          `DATA_DIR ${dataDir} is in use by another Agent Gateway process (${await describeHolder(lockPath)}). ` +
            'The embedded PGlite database allows one process per data directory: stop that process first, ' +
            'or set DATABASE_URL to run several processes on PostgreSQL.',
        );
      }
      if (!(await stillAtPath(handle, lockPath))) {
        await handle.close();
        continue;
      }
      await handle.truncate(0);
      await handle.write(
        JSON.stringify({ pid: process.pid, host: os.hostname(), since: new Date().toISOString() }) + '\n',
      );
      return { release: () => handle.close() };
    } catch (error) {
      await handle.close().catch(() => undefined);
      throw error;
    }
  }
  throw new Error(`${lockPath} keeps being removed while it is being locked`);
}
