/**
 * The service runs as deployed: NODE_ENV is `production` unless the environment sets it
 * (decision 0077), and glibc's MALLOC_ARENA_MAX 2 (decision 0083), in the process image it started
 * itself again as (src/v8-flags.ts), so that every library (and glibc) read them when it loaded. Seen in /proc/<pid>/environ, the environment that image
 * started with: Linux only.
 */
import { readFile, rm } from 'node:fs/promises';
import { backend, createTestDatabase, type TestDatabase } from './support/database.js';
import { migratedDataDir } from './support/pglite-template.js';
import { killAllServices, startReadyService, type ServiceOptions } from './support/service-process.js';

const onLinux = process.platform === 'linux' ? test : test.skip;

let database: TestDatabase | undefined;
const directories: string[] = [];
afterAll(async () => {
  await killAllServices();
  await database?.close();
  await Promise.all(directories.map((directory) => rm(directory, { recursive: true, force: true })));
}, 60_000);

async function where(): Promise<Pick<ServiceOptions, 'dataDir' | 'databaseUrl'>> {
  if (backend === 'postgresql') {
    database ??= await createTestDatabase();
    return { databaseUrl: database.url };
  }
  const dataDir = await migratedDataDir('agw-environment-');
  directories.push(dataDir);
  return { dataDir };
}

/** `name` as the service's process image started with it (undefined: not set). */
async function startedWith(name: string, env: Record<string, string>): Promise<string | undefined> {
  const service = await startReadyService({ ...(await where()), env });
  const environ = (await readFile(`/proc/${service.child.pid}/environ`, 'utf8')).split('\0');
  expect((await service.request('GET', '/readyz')).status).toBe(200);
  service.child.kill('SIGTERM');
  return environ.find((entry) => entry.startsWith(`${name}=`))?.slice(name.length + 1);
}
const nodeEnvOf = (env: Record<string, string>) => startedWith('NODE_ENV', env);

onLinux(
  'without NODE_ENV (or with it empty) the service runs with NODE_ENV=production; one that is set is kept',
  async () => {
    // The harness leaves NODE_ENV out unless a test gives it (Jest's is `test`).
    expect(await nodeEnvOf({})).toBe('production');
    expect(await nodeEnvOf({ NODE_ENV: '' })).toBe('production');
    expect(await nodeEnvOf({ NODE_ENV: 'staging' })).toBe('staging');
  },
  120_000,
);

onLinux(
  "the service's process image starts with glibc's arenas at 2 unless MALLOC_ARENA_MAX is set",
  async () => {
    expect(await startedWith('MALLOC_ARENA_MAX', {})).toBe('2');
    expect(await startedWith('MALLOC_ARENA_MAX', { MALLOC_ARENA_MAX: '8' })).toBe('8');
  },
  120_000,
);
