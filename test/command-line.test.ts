/**
 * `node dist/main.js --help | --version`: usage derived from what src/env.ts reads, exit 0 without
 * opening a database; anything else the service does not take is exit 2 with the usage on stderr.
 * And the `agent-gateway` command as the docs say to run it in a checkout, `npx agent-gateway`,
 * on a fresh copy of the checkout (as after `npm ci`, before any build).
 */
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, readFileSync, realpathSync } from 'node:fs';
import { cp, mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { commandLine, listeningLine, usage } from '../src/usage.js';
import { ENV_DESCRIPTIONS, environmentNames } from '../src/env-usage.js';
import { parseEnv } from '../src/env.js';
import { startTestApp } from './support/app.js';
import { signUp } from './support/fixtures.js';
import { actionBody, execute, readyAgent } from './support/gateway.js';
import { nodeArguments } from './support/child-command.js';

const root = fileURLToPath(new URL('..', import.meta.url));
const version = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')).version;

/** `command args` in `cwd` without the test runner's NODE_OPTIONS: exit status and output. */
function runIn(cwd: string, command: string, args: string[], env: Record<string, string> = {}, timeoutMs = 240_000) {
  const childEnv: NodeJS.ProcessEnv = { ...process.env, ...env };
  delete childEnv.NODE_OPTIONS;
  return new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve, reject) => {
    const child = spawn(command, args, { cwd, env: childEnv });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

function runService(args: string[], env: Record<string, string>) {
  const childEnv: NodeJS.ProcessEnv = { ...process.env, ...env };
  delete childEnv.NODE_OPTIONS;
  if (!('DATABASE_URL' in env)) delete childEnv.DATABASE_URL;
  return new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve, reject) => {
    const child = spawn(process.execPath, [...nodeArguments('main'), ...args], { cwd: root, env: childEnv });
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

  test('the configuration reference names every variable', () => {
    const reference = readFileSync(path.join(root, 'docs', 'reference', 'configuration.md'), 'utf8');
    for (const name of environmentNames()) expect([name, reference.includes(`\`${name}\``)]).toEqual([name, true]);
  });

  test('usage: the service, every variable with its default, the CLI', () => {
    const text = usage();
    expect(text).toMatch(/^Usage: node dist\/main\.js \[--help \| --version\]/);
    expect(text).toContain('policy gateway between AI agents');
    for (const name of environmentNames()) expect(text).toMatch(new RegExp(`^  ${name}[= ]`, 'm'));
    expect(text).toMatch(/^ {2}PORT=8000 +port to listen on$/m);
    expect(text).toMatch(/^ {2}DATABASE_URL +postgresql/m);
    expect(text).toContain('agent-gateway verify <export.jsonl>');
    expect(text).toContain('agent-gateway create-org --name <n> --slug <s> --admin-email <e>');
    expect(text.split('\n').every((line) => line.length <= 110)).toBe(true);
  });

  test('arguments: none starts, --help and --version answer, anything else is refused', () => {
    expect(commandLine([])).toBeUndefined();
    expect(commandLine(['--help'])).toEqual({ exit: 0, stdout: usage() });
    expect(commandLine(['-h'])).toEqual({ exit: 0, stdout: usage() });
    expect(commandLine(['--version'])).toEqual({ exit: 0, stdout: `${version}\n` });
    expect(commandLine(['--port', '80'])).toEqual({
      exit: 2,
      stderr: `agent-gateway: unknown option --port\n\n${usage()}`,
    });
    expect(commandLine(['verify', 'x.jsonl'])?.stderr).toMatch(
      /^agent-gateway: unexpected argument verify \(the service takes none\)/,
    );
    expect(commandLine(['--version', '--bogus'])?.exit).toBe(2);
  });

  test('the start-up line advertises the console only where it is built', () => {
    const built = listeningLine('http://localhost:8000', 'pglite ./data', true);
    expect(built.message).toBe(
      'Agent Gateway listening on http://localhost:8000 (console http://localhost:8000/console, GraphiQL http://localhost:8000/graphql, ' +
        'API docs http://localhost:8000/docs, database pglite ./data)',
    );
    expect(built.fields.console).toBe('http://localhost:8000/console');
    const off = listeningLine('http://localhost:8000', 'pglite ./data', false);
    expect(off.message).not.toContain('/console');
    expect(off.message).toMatch(
      /; the operator console is off: not built in this install \(npm run build:console in a full install\)$/,
    );
    expect(off.fields.console).toBe('off (not built in this install)');
    expect(off.fields.graphiql).toBe('http://localhost:8000/graphql');
  });

  test('the process: --help and --version exit 0 without opening a database, unknown flags exit 2', async () => {
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
  }, 60_000);

  test('a SIGNUP that is neither open nor closed: the service refuses to start, saying why, before opening a database', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'agw-signup-'));
    try {
      const dataDir = path.join(dir, 'data');
      const refused = await runService([], { DATA_DIR: dataDir, SIGNUP: 'closd' });
      expect(refused.code).toBe(1);
      expect(refused.stderr).toContain(
        'SIGNUP must be "open" (anyone may sign up an organization through the API) or "closed"',
      );
      expect(refused.stderr).toContain('got "closd"');
      expect(existsSync(dataDir)).toBe(false);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }, 60_000);
});

/** The built `agent-gateway` (jest's global setup) with `args`, on a database path that must stay untouched. */
function runCli(args: string[], dataDir: string) {
  return runIn(root, process.execPath, [...nodeArguments('cli/agent-gateway'), ...args], {
    DATA_DIR: dataDir,
    DATABASE_URL: '',
    AGENT_GATEWAY_ADMIN_PASSWORD: '',
  });
}

describe('the agent-gateway command answers --help', () => {
  const commands = ['verify', 'verify-proof', 'rotate-keys', 'reencrypt', 'create-org'];
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'agw-cli-help-'));
  });
  afterAll(() => rm(dir, { recursive: true, force: true }));

  test.each(commands)(
    '%s --help, -h and `help <command>`: its usage on stdout, exit 0, no database opened',
    async (command) => {
      const dataDir = path.join(dir, command);
      const runs = await Promise.all([
        runCli([command, '--help'], dataDir),
        runCli([command, '-h'], dataDir),
        runCli(['help', command], dataDir),
        // Among other arguments too, where the command would otherwise open its database.
        runCli([command, 'record', '--name', 'x', '--help'], dataDir),
      ]);
      for (const run of runs) {
        expect({ code: run.code, stderr: run.stderr }).toEqual({ code: 0, stderr: '' });
        expect(run.stdout).toBe(runs[0].stdout);
      }
      expect(runs[0].stdout).toMatch(new RegExp(`^Usage: agent-gateway ${command}( .*)?\n\n`));
      expect(runs[0].stdout).toMatch(/\nExit status: 0 .*\n$/);
      // Its own usage, not every command's.
      for (const other of commands.filter((name) => name !== command && !name.startsWith(command)))
        expect(runs[0].stdout).not.toContain(`agent-gateway ${other} `);
      expect(existsSync(dataDir)).toBe(false);
    },
    60_000,
  );

  test('the overall usage lists every command, create-org among them; help for an unknown command is a usage error', async () => {
    const dataDir = path.join(dir, 'overall');
    const [help, unknown, bare] = await Promise.all([
      runCli(['--help'], dataDir),
      runCli(['help', 'no-such-command'], dataDir),
      runCli([], dataDir),
    ]);
    expect(help.code).toBe(0);
    for (const command of commands) expect(help.stdout).toMatch(new RegExp(`^ *agent-gateway ${command}\\b`, 'm'));
    expect(help.stdout).toContain('agent-gateway create-org --name <name> --slug <slug> --admin-email <email>');
    expect(help.stdout).toContain('AGENT_GATEWAY_ADMIN_PASSWORD');
    expect(unknown).toEqual({
      code: 2,
      stdout: '',
      stderr: `agent-gateway: unknown command no-such-command\n\n${help.stdout}`,
    });
    // No command at all: the usage, but as a mistake.
    expect(bare).toEqual({ code: 2, stdout: help.stdout, stderr: '' });
  }, 60_000);

  test('a usage error is still stderr and exit 2, with that command’s usage (verify-proof without its files)', async () => {
    const dataDir = path.join(dir, 'mistakes');
    const [proof, help] = await Promise.all([
      runCli(['verify-proof'], dataDir),
      runCli(['verify-proof', '--help'], dataDir),
    ]);
    expect(proof).toEqual({
      code: 2,
      stdout: '',
      stderr: `agent-gateway: verify-proof needs the record, proof and checkpoint files\n\n${help.stdout}`,
    });
    const rotate = await runCli(['rotate-keys', 'everything'], dataDir);
    expect([rotate.code, rotate.stdout]).toEqual([2, '']);
    expect(rotate.stderr).toMatch(/^agent-gateway: rotate-keys takes one of .*\n\nUsage: agent-gateway rotate-keys /);
    expect(existsSync(dataDir)).toBe(false);
  }, 60_000);
});

/**
 * An export of three records from a test app, written into `dir`, and a copy with the second
 * record's `executed` flipped.
 */
async function recordsExport(dir: string): Promise<{ file: string; edited: string }> {
  const t = await startTestApp();
  try {
    const org = await signUp(t, 'cli-build');
    const agent = await readyAgent(t, org, { capabilities: ['billing:read'] });
    for (let i = 0; i < 3; i++) {
      const response = await execute(t, agent, actionBody(agent, 'read', { invoice: `inv-${i}`, amount: 100 + i }));
      expect(response.status).toBe(200);
    }
    const exported = await t.request('GET', '/api/v1/records/export', { token: org.adminToken });
    expect(exported.status).toBe(200);
    const lines = exported.text.trimEnd().split('\n');
    lines[2] = lines[2].replace(/"executed":(true|false)/, (m) =>
      m.endsWith('true') ? '"executed":false' : '"executed":true',
    );
    const file = path.join(dir, 'export.jsonl');
    const edited = path.join(dir, 'edited.jsonl');
    await writeFile(file, exported.text);
    await writeFile(edited, `${lines.join('\n')}\n`);
    return { file, edited };
  } finally {
    await t.close();
  }
}

describe('the agent-gateway command in a checkout', () => {
  let checkout: string;

  beforeAll(async () => {
    // The files of the checkout as git has them (tracked, and new ones not ignored), the built
    // console (what `npm ci` builds), the installed dependencies linked; no dist/, no src/generated.
    await mkdir(path.join(root, '.scratch'), { recursive: true });
    checkout = await mkdtemp(path.join(root, '.scratch', 'checkout-'));
    const files = execFileSync('git', ['ls-files', '-z', '--cached', '--others', '--exclude-standard'], {
      cwd: root,
      encoding: 'utf8',
    })
      .split('\0')
      .filter((file) => file && existsSync(path.join(root, file)));
    for (const file of files) await cp(path.join(root, file), path.join(checkout, file));
    if (existsSync(path.join(root, 'console/dist')))
      await cp(path.join(root, 'console/dist'), path.join(checkout, 'console/dist'), { recursive: true });
    await symlink(realpathSync(path.join(root, 'node_modules')), path.join(checkout, 'node_modules'));
  }, 60_000);

  afterAll(async () => {
    await rm(checkout, { recursive: true, force: true });
  });

  test('`npx agent-gateway --help` builds dist/ when there is none and prints the usage; the next run starts at once; the built CLI runs with plain node', async () => {
    expect(JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')).bin).toEqual({
      'agent-gateway': 'bin/agent-gateway.js',
    });
    // A fresh npm cache: npx links the project into it and runs its install scripts on first use.
    const npm = { npm_config_cache: path.join(checkout, '.npm-cache'), npm_config_update_notifier: 'false' };
    const first = await runIn(checkout, 'npx', ['--no-install', 'agent-gateway', '--help'], npm);
    expect([first.code, first.stderr]).toEqual([
      0,
      expect.stringContaining('agent-gateway: building dist/ (no build stamp)\n'),
    ]);
    expect(first.stdout).toMatch(
      /^Usage: agent-gateway verify <export\.jsonl> \[--jwks <jwks\.json>\] \[--verifier-key <key>\]…\n {7}agent-gateway verify-proof .*\n {7}agent-gateway rotate-keys/,
    );
    expect(first.stdout).toContain('agent-gateway reencrypt');
    expect(existsSync(path.join(checkout, 'dist/cli/agent-gateway.js'))).toBe(true);

    const again = await runIn(path.join(checkout, 'docs'), 'npx', ['agent-gateway', 'help'], npm);
    expect(again.code).toBe(0);
    expect(again.stdout).toBe(first.stdout);
    expect(again.stderr).not.toContain('building dist/');
    // A command's own failure keeps its exit status through npx.
    const unknown = await runIn(checkout, 'npx', ['agent-gateway', 'no-such-command'], npm);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain('agent-gateway: unknown command no-such-command');

    // What the build emitted (`npm run build`'s tsc with tsconfig.build.json) runs with plain node:
    // the CLI verifies a real export and finds an edited record.
    const cli = path.join(checkout, 'dist/cli/agent-gateway.js');
    expect(readFileSync(cli, 'utf8').split('\n')[0]).toBe('#!/usr/bin/env node');
    const { file, edited } = await recordsExport(checkout);
    const ok = await runIn(checkout, process.execPath, [cli, 'verify', file]);
    expect([ok.code, ok.stdout]).toEqual([0, expect.stringContaining('OK: 3 records')]);
    const bad = await runIn(checkout, process.execPath, [cli, 'verify', edited]);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toContain('record seq 2');
    expect(JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')).scripts.verify).toBe(
      'tsx src/cli/agent-gateway.ts verify',
    );
  }, 300_000);

  test('without dist/ and without the compiler it says to run npm run build', async () => {
    // An install without dev dependencies: the launcher and the sources, no node_modules, no dist/.
    const bare = await mkdtemp(path.join(root, '.scratch', 'checkout-bare-'));
    try {
      for (const dir of ['bin', 'scripts', 'src'])
        await cp(path.join(checkout, dir), path.join(bare, dir), { recursive: true });
      for (const file of ['package.json', 'package-lock.json', 'tsconfig.json', 'tsconfig.build.json'])
        await cp(path.join(checkout, file), path.join(bare, file));
      const run = await runIn(bare, process.execPath, ['bin/agent-gateway.js', '--help']);
      expect(run).toEqual({
        code: 2,
        stdout: '',
        stderr: `agent-gateway: dist/ is not built in ${bare}${path.sep}: run \`npm run build\` there (after \`npm ci\`, which installs the compiler), then try again\n`,
      });
      // Built elsewhere and copied in, a stale dist/ runs as it is, after a warning.
      await cp(path.join(checkout, 'dist'), path.join(bare, 'dist'), { recursive: true });
      await cp(path.join(checkout, 'src/main.ts'), path.join(bare, 'src/main.ts.new'));
      const stale = await runIn(bare, process.execPath, ['bin/agent-gateway.js', 'help']);
      expect(stale.code).toBe(0);
      expect(stale.stdout).toMatch(/^Usage: agent-gateway verify/);
      expect(stale.stderr).toBe(
        'agent-gateway: dist/ is stale (sources or configuration changed) and cannot be built here (TypeScript, a dev dependency, is not installed); running it as it is\n',
      );
    } finally {
      await rm(bare, { recursive: true, force: true });
    }
  }, 60_000);
});
