/**
 * `agent-gateway create-org` as an operator runs it: a process of its own on the service's database
 * (a PGlite DATA_DIR that does not exist yet, or an unmigrated PostgreSQL database: it migrates
 * either), with the admin's password from AGENT_GATEWAY_ADMIN_PASSWORD, from a line of standard
 * input or from a terminal; then the service started on that same database with SIGNUP=closed,
 * where each admin logs in with that password and reads their organization
 * (docs/decisions/0063-closed-sign-up-and-create-org.md).
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { nodeArguments } from './support/child-command.js';
import { backend, createTestDatabase, type TestDatabase } from './support/database.js';
import { optionalProgram, testWith } from './support/optional-programs.js';
import { startReadyService, type Service } from './support/service-process.js';

const root = fileURLToPath(new URL('..', import.meta.url));
/** util-linux's `script` gives the command a terminal of its own, as an operator's shell would. */
const script = optionalProgram('script (util-linux)', ['/usr/bin/script'], 'apt-get install bsdutils');

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

let dir: string;
/** The database every successful run writes to, as the environment names it. */
let databaseEnv: Record<string, string>;
let postgres: TestDatabase | undefined;
let service: Service | undefined;

beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'agw-create-org-'));
  if (backend === 'postgresql') {
    postgres = await createTestDatabase({ migrate: false });
    databaseEnv = { DATABASE_URL: postgres.url! };
  } else {
    databaseEnv = { DATA_DIR: path.join(dir, 'data') };
  }
});

afterAll(async () => {
  service?.child.kill('SIGTERM');
  await service?.exited;
  await postgres?.close();
  await rm(dir, { recursive: true, force: true });
});

/** The child's environment: only what the test gives it (no DATABASE_URL, DATA_DIR or password inherited). */
function childEnv(env: Record<string, string>): NodeJS.ProcessEnv {
  return { PATH: process.env.PATH, HOME: process.env.HOME, LOG_LEVEL: 'warn', ...env };
}

/** `agent-gateway <args>` with `env`; standard input is `stdin`, or closed at once. */
function agentGateway(args: string[], env: Record<string, string>, stdin = ''): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [...nodeArguments('cli/agent-gateway'), ...args], {
      cwd: root,
      env: childEnv(env),
    });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
    const timer = setTimeout(() => child.kill('SIGKILL'), 90_000);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
    // A usage error exits before reading its input: the pipe may close under this write (EPIPE),
    // which says nothing about the command; its exit code and output do.
    child.stdin.on('error', () => undefined);
    child.stdin.end(stdin);
  });
}

const flags = (slug: string, email = `admin@${slug}.example`) => [
  '--name',
  `Org ${slug}`,
  '--slug',
  slug,
  '--admin-email',
  email,
];

const ORG_ID_LINE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\n$/;
/** What each org was made with, checked against the service at the end. */
const made: { orgId: string; slug: string; email: string; password: string }[] = [];

async function expectCreated(run: Run, slug: string, email: string, password: string) {
  expect({ code: run.code, stderr: run.stderr }).toEqual({ code: 0, stderr: '' });
  expect(run.stdout).toMatch(ORG_ID_LINE);
  made.push({ orgId: run.stdout.trim(), slug, email, password });
}

describe('agent-gateway create-org', () => {
  test('with AGENT_GATEWAY_ADMIN_PASSWORD: migrates the database it finds, creates the org, prints its id alone', async () => {
    if (backend === 'pglite') expect(existsSync(databaseEnv.DATA_DIR)).toBe(false);
    const password = 'from the environment, long enough';
    const run = await agentGateway(['create-org', ...flags('acme')], {
      ...databaseEnv,
      AGENT_GATEWAY_ADMIN_PASSWORD: password,
    });
    await expectCreated(run, 'acme', 'admin@acme.example', password);
  }, 120_000);

  test('without the variable and without a terminal: the first line of standard input is the password', async () => {
    const password = 'from standard input, long enough';
    // Only the first line: what follows it is not part of the password.
    const run = await agentGateway(
      ['create-org', ...flags('beta', 'Ops@Beta.Example')],
      databaseEnv,
      `${password}\nnot this\n`,
    );
    await expectCreated(run, 'beta', 'ops@beta.example', password);
  }, 60_000);

  testWith(script)(
    'on a terminal: the password is asked twice and never shown',
    async () => {
      const password = 'typed at the terminal, long enough';
      const command = [process.execPath, ...nodeArguments('cli/agent-gateway'), 'create-org', ...flags('gamma')]
        .map((arg) => `'${arg.replaceAll("'", "'\\''")}'`)
        .join(' ');
      const child = spawn(script!, ['-qec', command, '/dev/null'], { cwd: root, env: childEnv(databaseEnv) });
      let output = '';
      child.stdout.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
      const closed = new Promise<number | null>((resolve) => child.on('close', resolve));
      /**
       * Types `text` the moment the terminal shows `prompt`, as a paste or a script would: the command
       * must have turned echo off before it asks (it once asked first, and CI's fast answer was echoed).
       */
      const answer = async (prompt: string, text: string) => {
        const shown = new Promise<boolean>((resolve) => {
          const timer = setTimeout(() => resolve(false), 60_000);
          const onData = () => {
            if (!output.includes(prompt)) return;
            child.stdout.off('data', onData);
            clearTimeout(timer);
            child.stdin.write(text);
            resolve(true);
          };
          child.stdout.on('data', onData);
          onData();
        });
        expect(await shown).toBe(true);
      };
      await answer('Password for admin@gamma.example: ', `${password}\r`);
      await answer('The same password again: ', `${password}\r`);
      child.stdin.end();
      expect(await closed).toBe(0);
      expect(output).not.toContain(password);
      const id = /([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\r?\n/.exec(output)?.[1];
      expect(id).toBeDefined();
      made.push({ orgId: id!, slug: 'gamma', email: 'admin@gamma.example', password });
    },
    120_000,
  );

  test('a taken slug or email: exit 1, the service’s message naming the flag on stderr, nothing printed', async () => {
    const env = { ...databaseEnv, AGENT_GATEWAY_ADMIN_PASSWORD: 'another long password' };
    const sameSlug = await agentGateway(['create-org', ...flags('acme', 'other@acme.example')], env);
    expect(sameSlug).toEqual({
      code: 1,
      stdout: '',
      stderr: 'agent-gateway: An organization with this slug exists (--slug)\n',
    });
    // Emails are compared as the API compares them: trimmed and lower-cased.
    const sameEmail = await agentGateway(['create-org', ...flags('acme-2', ' ADMIN@acme.example')], env);
    expect(sameEmail).toEqual({
      code: 1,
      stdout: '',
      stderr: 'agent-gateway: A user with this email exists (--admin-email)\n',
    });
  }, 60_000);

  describe('usage errors: exit 2, the message and the usage on stderr, no database opened', () => {
    // A database path no run may create: each of these is refused before a database is opened.
    const untouched = () => path.join(dir, 'never');
    const cases: { name: string; args: string[]; password?: string; stdin?: string; message: string }[] = [
      { name: 'no flags', args: [], message: 'create-org needs --name, --slug, --admin-email' },
      { name: 'a missing flag', args: ['--name', 'N', '--slug', 's'], message: 'create-org needs --admin-email' },
      { name: 'an unknown flag', args: [...flags('x'), '--role', 'admin'], message: 'unknown option --role' },
      { name: 'an argument that is no flag', args: [...flags('x'), 'extra'], message: 'unexpected argument extra' },
      {
        name: 'a flag without its value',
        args: ['--name', '--slug', 's', '--admin-email', 'a@b.example'],
        message: '--name needs a value',
      },
      { name: 'a flag twice', args: [...flags('x'), '--slug', 'y'], message: '--slug is given twice' },
      {
        name: 'an invalid slug, email and name (the API’s rules, all at once)',
        args: ['--name', ' ', '--slug', 'Not-A-Slug-', '--admin-email', 'nobody'],
        message:
          '--name must not be empty; --slug must be 1-63 lowercase letters, digits or hyphens, not starting or ending with a hyphen; --admin-email must be an email address',
      },
      {
        name: 'a short password',
        args: flags('x'),
        password: 'short',
        message: 'the password must be at least 12 characters',
      },
      {
        name: 'no password at all',
        args: flags('x'),
        stdin: '',
        message: 'the password must be at least 12 characters',
      },
    ];
    test.each(cases)('$name', async ({ args, password, stdin, message }) => {
      const env: Record<string, string> = { DATA_DIR: untouched() };
      if (password) env.AGENT_GATEWAY_ADMIN_PASSWORD = password;
      const run = await agentGateway(['create-org', ...args], env, stdin ?? 'a long enough password\n');
      expect(run.code).toBe(2);
      expect(run.stdout).toBe('');
      expect(run.stderr).toMatch(/^agent-gateway: /);
      expect(run.stderr.split('\n')[0]).toBe(`agent-gateway: ${message}`);
      expect(run.stderr).toContain(
        '\nUsage: agent-gateway create-org --name <name> --slug <slug> --admin-email <email>\n',
      );
      expect(existsSync(untouched())).toBe(false);
    });
  });

  test('the service on that database with SIGNUP=closed: each admin logs in with their password and reads their org, whose audit log is a sign-up’s', async () => {
    expect(made.map((org) => org.slug)).toEqual(['acme', 'beta', ...(script ? ['gamma'] : [])]);
    service = await startReadyService({
      dataDir: databaseEnv.DATA_DIR,
      databaseUrl: databaseEnv.DATABASE_URL,
      env: { SIGNUP: 'closed' },
    });
    for (const org of made) {
      const login = await service.request('POST', '/api/v1/auth/login', {
        body: { email: org.email, password: org.password },
      });
      expect([org.slug, login.status]).toEqual([org.slug, 200]);
      const token = login.body.access_token as string;
      const read = await service.request('GET', `/api/v1/orgs/${org.orgId}`, { token });
      expect(read.status).toBe(200);
      expect(read.body).toMatchObject({
        org_id: org.orgId,
        name: `Org ${org.slug}`,
        slug: org.slug,
        admin_user: { email: org.email, role: 'admin', org_id: org.orgId },
      });
      const audit = await service.request('GET', `/api/v1/orgs/${org.orgId}/audit-logs`, { token });
      expect(audit.status).toBe(200);
      expect(audit.body.items.map((entry: { action: string }) => entry.action).sort()).toEqual([
        'org.created',
        'user.created',
      ]);
      // Another password does not open it: the one given to create-org is the admin's.
      const wrong = await service.request('POST', '/api/v1/auth/login', {
        body: { email: org.email, password: `${org.password}!` },
      });
      expect(wrong.status).toBe(401);
    }
    // The deployment takes no sign-ups: create-org is how its organizations come.
    const refused = await service.request('POST', '/api/v1/orgs', {
      body: { name: 'Late', slug: 'late', admin_email: 'late@late.example', admin_password: 'a long enough password' },
    });
    expect([refused.status, refused.body.detail?.message]).toEqual([403, 'sign-up is closed on this deployment']);
  }, 120_000);
});
