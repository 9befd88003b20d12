/**
 * PostgreSQL servers a test owns: a private cluster it may stop and start (an outage that no other
 * test file shares), and PgBouncer in transaction mode in front of the configured server. Both run
 * as the `postgres` user when the tests run as root (neither will run as root), from the binaries
 * of Debian's packages; a missing binary skips the tests that need it, except under CI.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { chown, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { connect } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { optionalProgram } from './optional-programs.js';
import { freePort } from './service-process.js';

const run = promisify(execFile);
const PG_BIN = '/usr/lib/postgresql/15/bin';
const PGBOUNCER = '/usr/sbin/pgbouncer';
const asRoot = process.getuid?.() === 0;

export const hasPostgresBinaries = () =>
  Boolean(optionalProgram('PostgreSQL 15 server binaries', [`${PG_BIN}/pg_ctl`], 'apt-get install postgresql-15'));
export const hasPgBouncer = () => Boolean(optionalProgram('PgBouncer', [PGBOUNCER], 'apt-get install pgbouncer'));

/** A command as the `postgres` user (as root) or as ourselves. */
function asPostgres(command: string, args: string[]) {
  return asRoot ? run('runuser', ['-u', 'postgres', '--', command, ...args]) : run(command, args);
}

/** A directory the `postgres` user owns. */
async function postgresDir(prefix: string): Promise<string> {
  const dir = await mkdtemp(path.join(os.tmpdir(), prefix));
  if (asRoot) {
    const { stdout } = await run('id', ['-u', 'postgres']);
    const { stdout: gid } = await run('id', ['-g', 'postgres']);
    await chown(dir, Number(stdout), Number(gid));
  }
  return dir;
}

export interface PrivatePostgres {
  /** `postgresql://postgres@127.0.0.1:<port>/postgres` */
  url: string;
  stop(): Promise<void>;
  start(): Promise<void>;
  /** Stops it for good and deletes its files. */
  destroy(): Promise<void>;
}

/** A fresh cluster on a free port, trusting local TCP connections, started. */
export async function startPrivatePostgres(): Promise<PrivatePostgres> {
  const dir = await postgresDir('agw-pg-');
  const data = path.join(dir, 'data');
  const port = await freePort();
  await asPostgres(`${PG_BIN}/initdb`, ['-D', data, '-U', 'postgres', '--auth=trust', '-E', 'UTF8', '--no-sync']);
  const ctl = (...args: string[]) => asPostgres(`${PG_BIN}/pg_ctl`, ['-D', data, '-w', ...args]);
  const start = async () => {
    await ctl(
      '-l',
      path.join(dir, 'log'),
      '-o',
      `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off`,
      'start',
    );
  };
  await start();
  return {
    url: `postgresql://postgres@127.0.0.1:${port}/postgres`,
    start,
    // Fast: sessions are terminated and the server goes down at once, as in a failover.
    stop: async () => {
      await ctl('-m', 'fast', 'stop');
    },
    async destroy() {
      await ctl('-m', 'immediate', 'stop').catch(() => undefined);
      await rm(dir, { recursive: true, force: true });
    },
  };
}

export interface PgBouncer {
  /** The configured server's `database` through the pooler. */
  urlFor(database: string): string;
  /** The pooler's log. */
  log(): Promise<string>;
  stop(): Promise<void>;
}

/** PgBouncer in transaction mode on a free port, in front of DATABASE_URL's server. */
export async function startPgBouncer(serverUrl: string, poolSize = 20): Promise<PgBouncer> {
  const server = new URL(serverUrl);
  const dir = await postgresDir('agw-pgbouncer-');
  const port = await freePort();
  const user = decodeURIComponent(server.username);
  const password = decodeURIComponent(server.password);
  const config = path.join(dir, 'pgbouncer.ini');
  await writeFile(
    config,
    [
      '[databases]',
      `* = host=${server.hostname} port=${server.port || 5432} user=${user} password=${password}`,
      '[pgbouncer]',
      'listen_addr = 127.0.0.1',
      `listen_port = ${port}`,
      'unix_socket_dir =',
      // Any client name is accepted; every server connection logs in as the configured user.
      'auth_type = any',
      'pool_mode = transaction',
      `default_pool_size = ${poolSize}`,
      'max_client_conn = 1000',
      `logfile = ${path.join(dir, 'pgbouncer.log')}`,
      'ignore_startup_parameters = extra_float_digits,options,application_name',
      '',
    ].join('\n'),
  );
  if (asRoot) await run('chown', ['postgres', config]);
  const child: ChildProcess = spawn(PGBOUNCER, asRoot ? ['-u', 'postgres', config] : [config], { stdio: 'ignore' });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  await waitForPort(port, exited);
  return {
    urlFor: (database) => `postgresql://${encodeURIComponent(user)}@127.0.0.1:${port}/${database}`,
    log: () => readFile(path.join(dir, 'pgbouncer.log'), 'utf8'),
    async stop() {
      child.kill('SIGINT');
      await exited;
      await rm(dir, { recursive: true, force: true });
    },
  };
}

async function waitForPort(port: number, exited: Promise<void>): Promise<void> {
  let gone = false;
  void exited.then(() => (gone = true));
  const deadline = Date.now() + 15_000;
  while (Date.now() < deadline) {
    if (gone) throw new Error('pgbouncer exited before it listened');
    const open = await new Promise<boolean>((resolve) => {
      const socket = connect(port, '127.0.0.1');
      socket.once('connect', () => {
        socket.destroy();
        resolve(true);
      });
      socket.once('error', () => resolve(false));
    });
    if (open) return;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error(`pgbouncer did not listen on ${port}`);
}
