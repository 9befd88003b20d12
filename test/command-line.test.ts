/**
 * `node dist/main.js --help | --version`: usage derived from what src/env.ts reads, exit 0 without
 * opening a database; anything else the service does not take is exit 2 with the usage on stderr.
 */
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { commandLine, usage } from '../src/usage.js';
import { ENV_DESCRIPTIONS, environmentNames } from '../src/env-usage.js';
import { parseEnv } from '../src/env.js';

const root = fileURLToPath(new URL('..', import.meta.url));
const version = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')).version;

function runService(args: string[], env: Record<string, string>) {
  const childEnv: NodeJS.ProcessEnv = { ...process.env, ...env };
  delete childEnv.NODE_OPTIONS;
  if (!('DATABASE_URL' in env)) delete childEnv.DATABASE_URL;
  return new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts', ...args], { cwd: root, env: childEnv });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
    const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

describe('command line of the service', () => {
  test('every variable parseEnv reads is described, and nothing else', () => {
    const names = environmentNames();
    expect(names).toContain('PORT');
    expect(names).toContain('MCP_ALLOWED_ORIGINS');
    expect(Object.keys(ENV_DESCRIPTIONS).sort()).toEqual([...names].sort());
  });

  test('each literal default is what parseEnv does without the variable', () => {
    const defaults = parseEnv({});
    for (const [name, { default: value }] of Object.entries(ENV_DESCRIPTIONS)) {
      if (value === undefined || value.includes('$')) continue;
      expect([name, parseEnv({ [name]: value })]).toEqual([name, defaults]);
    }
    expect(parseEnv({}).publicUrl).toBe('http://localhost:8000');
    expect(parseEnv({ PORT: '9' }).publicUrl).toBe('http://localhost:9');
  });

  test('the README names every variable', () => {
    const readme = readFileSync(path.join(root, 'README.md'), 'utf8');
    for (const name of environmentNames()) expect([name, readme.includes(`\`${name}\``)]).toEqual([name, true]);
  });

  test('usage: the service, every variable with its default, the CLI', () => {
    const text = usage();
    expect(text).toMatch(/^Usage: node dist\/main\.js \[--help \| --version\]/);
    expect(text).toContain('policy gateway between AI agents');
    for (const name of environmentNames()) expect(text).toMatch(new RegExp(`^  ${name}[= ]`, 'm'));
    expect(text).toMatch(/^ {2}PORT=8000 +port to listen on$/m);
    expect(text).toMatch(/^ {2}DATABASE_URL +postgresql/m);
    expect(text).toContain('agent-gateway verify <export.jsonl>');
    expect(text.split('\n').every((line) => line.length <= 110)).toBe(true);
  });

  test('arguments: none starts, --help and --version answer, anything else is refused', () => {
    expect(commandLine([])).toBeUndefined();
    expect(commandLine(['--help'])).toEqual({ exit: 0, stdout: usage() });
    expect(commandLine(['-h'])).toEqual({ exit: 0, stdout: usage() });
    expect(commandLine(['--version'])).toEqual({ exit: 0, stdout: `${version}\n` });
    expect(commandLine(['--port', '80'])).toEqual({ exit: 2, stderr: `agent-gateway: unknown option --port\n\n${usage()}` });
    expect(commandLine(['verify', 'x.jsonl'])?.stderr).toMatch(/^agent-gateway: unexpected argument verify \(the service takes none\)/);
    expect(commandLine(['--version', '--bogus'])?.exit).toBe(2);
  });

  test(
    'the process: --help and --version exit 0 without opening a database, unknown flags exit 2',
    async () => {
      const dir = await mkdtemp(path.join(os.tmpdir(), 'agw-help-'));
      try {
        const dataDir = path.join(dir, 'data');
        // PGlite would create DATA_DIR; PostgreSQL at a closed port would fail or hang; a bad PORT
        // would fail parseEnv: none of it matters to --help.
        const [help, onPostgres, versionRun, unknown] = await Promise.all([
          runService(['--help'], { DATA_DIR: dataDir, PORT: 'not a port' }),
          runService(['--help'], { DATABASE_URL: 'postgresql://127.0.0.1:1/none' }),
          runService(['--version'], { DATA_DIR: dataDir }),
          runService(['--no-such-flag'], { DATA_DIR: dataDir }),
        ]);
        expect(help).toEqual({ code: 0, stdout: usage(), stderr: '' });
        expect(onPostgres).toEqual({ code: 0, stdout: usage(), stderr: '' });
        expect(versionRun).toEqual({ code: 0, stdout: `${version}\n`, stderr: '' });
        expect(unknown.code).toBe(2);
        expect(unknown.stdout).toBe('');
        expect(unknown.stderr).toBe(`agent-gateway: unknown option --no-such-flag\n\n${usage()}`);
        expect(existsSync(dataDir)).toBe(false);
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
    },
    60_000,
  );
});
