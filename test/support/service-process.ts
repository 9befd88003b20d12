/**
 * The real service as a child process on a real port (src/main.ts compiled by esbuild, see
 * child-command.ts), for tests that need separate OS processes: restarts on one data directory,
 * several gateways on one PostgreSQL.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { TEST_DATABASE_TIMEOUT_MS } from './database.js';
import { freePort, listensOn } from '../../scripts/ports.js';
import { nodeArguments } from './child-command.js';
import {
  TEST_SIGNUP_LIMIT,
  requestInit,
  testResponse,
  type RequestOptions,
  type TestClient,
  type TestResponse,
} from './app.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const READY_TIMEOUT_MS = 60_000;
const EXIT_TIMEOUT_MS = 20_000;
/** How long after its exit a process's output may take to be read. */
const OUTPUT_AFTER_EXIT_MS = 2_000;

export interface LogLine {
  level: number;
  msg: string;
  [field: string]: unknown;
}

export interface Service extends TestClient {
  child: ChildProcess;
  port: number;
  base: string;
  logs: LogLine[];
  stdout: string[];
  stderr: string[];
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** Child output, for failure messages. */
  output(): string;
}

export interface ServiceOptions {
  /** Embedded PGlite in this directory … */
  dataDir?: string;
  /** … or this PostgreSQL database. */
  databaseUrl?: string;
  env?: Record<string, string>;
  /** A module the child imports before the service: puts it in a state a test needs. */
  preload?: string;
}

const running = new Set<Service>();

// Ports below the ephemeral range, and readiness that is the child's own: scripts/ports.ts.
export { freePort };

export function startService(port: number, options: ServiceOptions): Service {
  // No metrics listener unless a test asks for one: several services run at once.
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    PORT: String(port),
    HOST: '127.0.0.1',
    LOG_LEVEL: 'info',
    METRICS_PORT: '0',
    DATABASE_TIMEOUT_MS: String(TEST_DATABASE_TIMEOUT_MS),
    ...TEST_SIGNUP_LIMIT,
    ...options.env,
  };
  delete env.DATABASE_URL;
  delete env.DATA_DIR;
  // The test's own PUBLIC_URL, if it sets one (several processes behind one address), else none.
  if (options.env?.PUBLIC_URL === undefined) delete env.PUBLIC_URL;
  // Jest's --experimental-vm-modules is not for the child (a test's own options are: a profile).
  if (options.env?.NODE_OPTIONS === undefined) delete env.NODE_OPTIONS;
  // Jest's NODE_ENV=test is not the service's: it runs as deployed (production) unless a test says.
  if (options.env?.NODE_ENV === undefined) delete env.NODE_ENV;
  if (options.databaseUrl) env.DATABASE_URL = options.databaseUrl;
  if (options.dataDir) env.DATA_DIR = options.dataDir;
  const preload = options.preload ? ['--import', options.preload] : [];
  // A preloaded module is TypeScript: tsx loads it, and the service from src/ with it.
  const entry = options.preload ? ['--import', 'tsx', ...preload, 'src/main.ts'] : nodeArguments('main');
  const child = spawn(process.execPath, entry, {
    cwd: root,
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const logs: LogLine[] = [];
  const stdout: string[] = [];
  const stderr: string[] = [];
  let pending = '';
  child.stdout!.setEncoding('utf8');
  child.stdout!.on('data', (chunk: string) => {
    pending += chunk;
    const lines = pending.split('\n');
    pending = lines.pop()!;
    for (const line of lines) {
      if (!line.trim()) continue;
      stdout.push(line);
      try {
        logs.push(JSON.parse(line));
      } catch {
        // Not a log line; kept in stdout for diagnostics.
      }
    }
  });
  child.stderr!.setEncoding('utf8');
  child.stderr!.on('data', (chunk: string) => stderr.push(chunk));
  // Resolved once the output is read too: 'exit' can come before the last chunks of stderr (a
  // watchdog's line written just before its SIGKILL). Bounded, should a grandchild hold the pipes.
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    const closed = new Promise<void>((outputClosed) => child.on('close', () => outputClosed()));
    child.on('exit', (code, signal) => {
      const bound = new Promise<void>((elapsed) => setTimeout(elapsed, OUTPUT_AFTER_EXIT_MS).unref());
      void Promise.race([closed, bound]).then(() => resolve({ code, signal }));
    });
  });
  const base = `http://127.0.0.1:${port}`;
  let exit: { code: number | null; signal: NodeJS.Signals | null } | undefined;
  void exited.then((e) => (exit = e));
  const service: Service = {
    child,
    port,
    base,
    logs,
    stdout,
    stderr,
    exited,
    output: () => `--- stdout ---\n${[...stdout, pending].join('\n')}\n--- stderr ---\n${stderr.join('')}`,
    async request(method, path, requestOptions) {
      try {
        return await httpRequest(base, method, path, requestOptions);
      } catch (error) {
        // A refused or cut connection: whether this process is still the one on the port, and what it wrote.
        const state = exit ? `exited (code ${exit.code}, signal ${exit.signal})` : `running (pid ${child.pid})`;
        throw new Error(
          `${method} ${path} on ${base}: ${String(error)}; the service is ${state}\n${service.output().slice(-4000)}`,
          {
            cause: error,
          },
        );
      }
    },
  };
  running.add(service);
  void exited.then(() => running.delete(service));
  return service;
}

/** Polls /readyz until 200; fails early if the child exits, and after READY_TIMEOUT_MS. */
export async function waitReady(service: Service): Promise<void> {
  const deadline = Date.now() + READY_TIMEOUT_MS;
  let exit: { code: number | null; signal: NodeJS.Signals | null } | undefined;
  void service.exited.then((e) => (exit = e));
  let last = 'no response';
  while (Date.now() < deadline) {
    if (exit)
      throw new Error(`service exited (code ${exit.code}, signal ${exit.signal}) before ready\n${service.output()}`);
    try {
      const response = await fetch(`${service.base}/readyz`, { signal: AbortSignal.timeout(2000) });
      // Another process may hold the port the child was given: then the answer is not the child's.
      const own = listensOn(service.child.pid!, Number(new URL(service.base).port)) !== false;
      if (response.status === 200 && own) return;
      last = own
        ? `${response.status} ${await response.text()}`
        : `${response.status} from a process other than the service`;
    } catch (error) {
      last = String(error);
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  throw new Error(`service not ready after ${READY_TIMEOUT_MS} ms (last: ${last})\n${service.output()}`);
}

export async function startReadyService(options: ServiceOptions): Promise<Service> {
  const service = startService(await freePort(), options);
  await waitReady(service);
  return service;
}

export async function waitExit(service: Service, timeoutMs = EXIT_TIMEOUT_MS) {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`service did not exit within ${timeoutMs} ms\n${service.output()}`)),
      timeoutMs,
    );
  });
  try {
    return await Promise.race([service.exited, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

export async function killAllServices() {
  const all = [...running];
  for (const service of all) service.child.kill('SIGKILL');
  await Promise.all(all.map((service) => service.exited));
}

async function httpRequest<T>(
  base: string,
  method: string,
  path: string,
  options: RequestOptions = {},
): Promise<TestResponse<T>> {
  const send = () => fetch(`${base}${path}`, { ...requestInit(method, options), signal: AbortSignal.timeout(30_000) });
  try {
    return testResponse<T>(await send());
  } catch (error) {
    // A kept-alive socket the service closed as idle just as this request went out on it (its 5 s
    // timer against the client's, on a loaded machine): a browser resends a read then, and so do we,
    // once. A service that cuts reads for another reason cuts the second one too.
    if (!IDEMPOTENT.has(method) || !socketCut(error)) throw error;
    return testResponse<T>(await send());
  }
}

const IDEMPOTENT = new Set(['GET', 'HEAD']);
const socketCut = (error: unknown) =>
  error instanceof TypeError && (error.cause as { code?: string } | undefined)?.code === 'UND_ERR_SOCKET';
