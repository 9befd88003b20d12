#!/usr/bin/env node
// The production install, checked as the Dockerfile makes it (.ci/run runs this after the tests):
//
//   1. A copy of the checkout in a temporary directory (the files git has: tracked, and new ones
//      not ignored; as a clone with the working tree's edits), then, as the Dockerfile's build
//      stage does: npm ci, npm run build, npm run build:console, and
//      npm prune --omit=dev --omit=optional.
//   2. node_modules must be at most 250 MB (du -sm) and hold none of the build-time packages
//      (docs/decisions/0046-production-install.md says why --omit=optional is needed too).
//   3. The files the Dockerfile's runtime stage copies (its `COPY --from=build` lines) are put in
//      a directory of their own, with its `ln -s … /usr/local/bin/…` links in a directory on PATH,
//      and the service is started there as the image starts it (node dist/main.js): /healthz,
//      /readyz, a sign-up and a login (argon2), /console and one of its assets, /docs, ReDoc's
//      bundle and /metrics must answer, and `agent-gateway --help` must work from PATH.
//   4. A production install from the checkout without a console build (npm ci --omit=dev
//      --omit=optional, console/dist removed) must install, start with the console off (not
//      advertised; /console 503 CONSOLE_NOT_BUILT), and run `npx agent-gateway --help`.
//
// Exit status 0 when everything holds, 1 otherwise (what failed is printed). `--keep` leaves the
// temporary directory. Plain Node; needs git, npm and du.
import { spawn, spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { createServer } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const LIMIT_MB = 250;
/** Build-time packages a production install must not hold. */
export const BUILD_TIME_PACKAGES = [
  'prisma',
  'typescript',
  'esbuild',
  'redoc',
  'preact',
  '@prisma/studio-core',
  '@prisma/dev',
  'effect',
  '@graphql-codegen/cli',
];

const root = fileURLToPath(new URL('..', import.meta.url));
const failures = [];

function step(title) {
  process.stdout.write(`\n== production install: ${title}\n`);
}

function check(ok, what) {
  process.stdout.write(`${ok ? 'ok  ' : 'FAIL'} ${what}\n`);
  if (!ok) failures.push(what);
  return ok;
}

function run(command, args, cwd, env = {}) {
  const result = spawnSync(command, args, { cwd, stdio: 'inherit', env: { ...process.env, ...env } });
  if (result.status !== 0)
    throw new Error(`${command} ${args.join(' ')} failed in ${cwd} (status ${result.status ?? result.signal})`);
}

/** The runtime stage of the Dockerfile: what it copies from the build stage, what it links. */
export function runtimeStage(dockerfile) {
  const lines = dockerfile.replace(/\\\n/g, ' ').split('\n');
  const start = lines.findIndex((line) => /^FROM\s+\S+\s+AS\s+runtime\b/i.test(line));
  if (start < 0) throw new Error('the Dockerfile has no `FROM … AS runtime` stage');
  const copies = [];
  const links = [];
  for (const line of lines.slice(start + 1)) {
    const copy = line.match(/^COPY\s+--from=build\s+\/app\/(\S+)\s+\.\/(\S+)\s*$/);
    if (copy) copies.push({ from: copy[1], to: copy[2] });
    else if (/^COPY\b/.test(line)) throw new Error(`a COPY this check does not understand: ${line}`);
    for (const link of line.matchAll(/ln -s (\/app\/\S+) \/usr\/local\/bin\/([\w-]+)/g))
      links.push({ target: link[1].slice('/app/'.length), name: link[2] });
  }
  return { copies, links };
}

function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

/** node dist/main.js in `dir`, ready (/readyz 200) within 90 s; its output so far and a stop(). */
async function startService(dir, dataDir) {
  const [port, metricsPort] = [await freePort(), await freePort()];
  const env = {
    ...process.env,
    NODE_ENV: 'production',
    PORT: String(port),
    HOST: '127.0.0.1',
    DATA_DIR: dataDir,
    METRICS_PORT: String(metricsPort),
    METRICS_HOST: '127.0.0.1',
  };
  delete env.DATABASE_URL;
  delete env.NODE_OPTIONS;
  const child = spawn(process.execPath, ['dist/main.js'], { cwd: dir, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout.setEncoding('utf8').on('data', (chunk) => (output += chunk));
  child.stderr.setEncoding('utf8').on('data', (chunk) => (output += chunk));
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve(code ?? signal)));
  const base = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 90_000;
  for (;;) {
    const ready = await fetch(`${base}/readyz`).then(
      (response) => response.status === 200,
      () => false,
    );
    if (ready) break;
    if (child.exitCode !== null || Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`the service did not become ready (exit ${child.exitCode}):\n${output}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  return {
    base,
    metrics: `http://127.0.0.1:${metricsPort}`,
    output: () => output,
    async stop() {
      child.kill('SIGTERM');
      const status = await Promise.race([
        exited,
        new Promise((resolve) => setTimeout(() => resolve('timeout'), 20_000)),
      ]);
      if (status === 'timeout') child.kill('SIGKILL');
      return status;
    },
  };
}

const get = (url, init) =>
  fetch(url, init).then(async (response) => ({
    status: response.status,
    type: response.headers.get('content-type') ?? '',
    text: await response.text(),
  }));

async function checkServing(dir, dataDir, { consoleBuilt }) {
  const service = await startService(dir, dataDir);
  try {
    const { base } = service;
    check((await get(`${base}/healthz`)).status === 200, 'GET /healthz 200');
    check((await get(`${base}/readyz`)).status === 200, 'GET /readyz 200');
    const slug = `prod-${process.pid}`;
    const password = 'correct horse battery staple';
    const signUp = await get(`${base}/api/v1/orgs`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        name: 'Production check',
        slug,
        admin_email: `admin@${slug}.example`,
        admin_password: password,
      }),
    });
    check(
      signUp.status === 201,
      `POST /api/v1/orgs (sign-up) 201${signUp.status === 201 ? '' : ` (got ${signUp.status} ${signUp.text.slice(0, 300)})`}`,
    );
    const login = await get(`${base}/api/v1/auth/login`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ email: `admin@${slug}.example`, password }),
    });
    check(
      login.status === 200 && login.text.includes('access_token'),
      `POST /api/v1/auth/login 200${login.status === 200 ? '' : ` (got ${login.status} ${login.text.slice(0, 300)})`}`,
    );
    check((await get(`${base}/docs`)).status === 200, 'GET /docs 200');
    const redoc = await get(`${base}/redoc/redoc.standalone.js`);
    check(
      redoc.status === 200 && redoc.text.length > 100_000,
      `GET /redoc/redoc.standalone.js 200${redoc.status === 200 ? '' : ` (got ${redoc.status})`}`,
    );
    check(
      (await get(`${service.metrics}/metrics`)).text.includes('process_cpu'),
      'GET /metrics on the metrics listener',
    );
    const page = await get(`${base}/console`);
    const startLine =
      service
        .output()
        .split('\n')
        .find((line) => line.includes('Agent Gateway listening on')) ?? '';
    if (consoleBuilt) {
      check(
        page.status === 200 && page.type.startsWith('text/html'),
        `GET /console 200 text/html${page.status === 200 ? '' : ` (got ${page.status} ${page.text.slice(0, 300)})`}`,
      );
      const asset = page.text.match(/src="(\/console\/assets\/[^"]+\.js)"/)?.[1];
      check(Boolean(asset) && (await get(`${base}${asset}`)).status === 200, `GET ${asset ?? 'a console asset'} 200`);
      check(
        / \(console http\S+\/console, /.test(startLine),
        `start-up advertises /console${startLine ? '' : ' (no start-up line)'}`,
      );
    } else {
      const body = page.status === 503 ? JSON.parse(page.text) : undefined;
      check(
        body?.error?.code === 'CONSOLE_NOT_BUILT',
        `GET /console 503 CONSOLE_NOT_BUILT${body ? '' : ` (got ${page.status})`}`,
      );
      check(
        /not built in this install/.test(body?.error?.message ?? '') &&
          /npm run build:console/.test(body?.error?.message ?? ''),
        'the 503 says the console was not built in this install and how to get it',
      );
      check(
        startLine !== '' && !startLine.includes('/console') && startLine.includes('the operator console is off'),
        'start-up does not advertise /console and says it is off',
      );
    }
  } finally {
    const status = await service.stop();
    check(status === 0, `SIGTERM stops the service with status 0 (got ${status})`);
  }
}

function checkCli(cwd, command, args, env = {}) {
  const result = spawnSync(command, args, { cwd, encoding: 'utf8', env: { ...process.env, ...env } });
  check(
    result.status === 0 && result.stdout.startsWith('Usage: agent-gateway verify'),
    `${[command, ...args].join(' ')} prints the usage (status ${result.status}${result.status ? `: ${result.stderr}` : ''})`,
  );
}

async function main() {
  const keep = process.argv.includes('--keep');
  const tmp = mkdtempSync(path.join(os.tmpdir(), 'agw-production-'));
  const checkout = path.join(tmp, 'checkout');
  try {
    step(`copy of the checkout in ${checkout}`);
    const files = spawnSync('git', ['ls-files', '-z', '--cached', '--others', '--exclude-standard'], {
      cwd: root,
      encoding: 'utf8',
    });
    if (files.status !== 0) throw new Error(`git ls-files failed: ${files.stderr}`);
    for (const file of files.stdout.split('\0')) {
      if (file && existsSync(path.join(root, file)))
        cpSync(path.join(root, file), path.join(checkout, file), { recursive: true });
    }

    step(
      'npm ci, npm run build, npm run build:console, npm prune --omit=dev --omit=optional (the Dockerfile build stage)',
    );
    run('npm', ['ci', '--no-audit', '--no-fund'], checkout);
    run('npm', ['run', 'build'], checkout);
    run('npm', ['run', 'build:console'], checkout);
    run('npm', ['prune', '--omit=dev', '--omit=optional', '--no-audit', '--no-fund'], checkout);

    step('size and contents of node_modules');
    const du = spawnSync('du', ['-sm', 'node_modules'], { cwd: checkout, encoding: 'utf8' });
    const megabytes = Number(du.stdout.split(/\s/)[0]);
    check(
      Number.isFinite(megabytes) && megabytes <= LIMIT_MB,
      `node_modules is ${megabytes} MB (du -sm), at most ${LIMIT_MB} MB`,
    );
    for (const name of BUILD_TIME_PACKAGES)
      check(!existsSync(path.join(checkout, 'node_modules', name)), `no ${name} in node_modules`);

    step('the runtime stage of the Dockerfile: its files only, node dist/main.js, agent-gateway on PATH');
    const image = path.join(tmp, 'image');
    const pathBin = path.join(tmp, 'usr-local-bin');
    const { copies, links } = runtimeStage(readFileSync(path.join(checkout, 'Dockerfile'), 'utf8'));
    for (const { from, to } of copies)
      cpSync(path.join(checkout, from), path.join(image, to), { recursive: true, verbatimSymlinks: true });
    mkdirSync(pathBin, { recursive: true });
    for (const { target, name } of links) symlinkSync(path.join(image, target), path.join(pathBin, name));
    check(
      links.some((link) => link.name === 'agent-gateway'),
      'the Dockerfile links agent-gateway into /usr/local/bin',
    );
    await checkServing(image, path.join(tmp, 'data-image'), { consoleBuilt: true });
    checkCli(tmp, 'agent-gateway', ['--help'], { PATH: `${pathBin}${path.delimiter}${process.env.PATH}` });

    step('a production install from the checkout without a console build: npm ci --omit=dev --omit=optional');
    rmSync(path.join(checkout, 'console/dist'), { recursive: true, force: true });
    run('npm', ['ci', '--omit=dev', '--omit=optional', '--no-audit', '--no-fund'], checkout);
    check(
      !existsSync(path.join(checkout, 'node_modules/prisma')),
      'no Prisma CLI (the postinstall skipped generation)',
    );
    await checkServing(checkout, path.join(tmp, 'data-checkout'), { consoleBuilt: false });
    checkCli(checkout, 'npx', ['agent-gateway', '--help'], {
      npm_config_cache: path.join(tmp, 'npm-cache'),
      npm_config_update_notifier: 'false',
    });
  } catch (error) {
    check(false, error instanceof Error ? error.message : String(error));
  } finally {
    if (keep) process.stdout.write(`\nkept ${tmp}\n`);
    else rmSync(tmp, { recursive: true, force: true });
  }
  if (failures.length) {
    process.stdout.write(
      `\nproduction install: ${failures.length} check(s) failed:\n${failures.map((what) => `  ${what}`).join('\n')}\n`,
    );
    process.exit(1);
  }
  process.stdout.write('\nproduction install: every check passed\n');
}

if (process.argv[1] && fileURLToPath(import.meta.url) === path.resolve(process.argv[1])) await main();
