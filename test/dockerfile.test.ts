/**
 * The Dockerfile, read without Docker (scripts/check-production-install.mjs, run by .ci/run,
 * installs and serves what it describes): production dependencies only, the files and links of the
 * runtime stage that scripts/check-production-install.mjs copies to serve from, and the container's
 * defaults (metrics reachable from outside the container, on the port it declares).
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseEnv } from '../src/env.js';

const root = fileURLToPath(new URL('..', import.meta.url));
const dockerfile = readFileSync(path.join(root, 'Dockerfile'), 'utf8');
/** Instructions with their continuation lines joined, comments dropped. */
const instructions = dockerfile
  .replace(/\\\n/g, ' ')
  .split('\n')
  .filter((line) => line.trim() && !line.startsWith('#'));
const runtime = instructions.slice(instructions.findIndex((line) => /^FROM \S+ AS runtime$/.test(line)) + 1);

test('the build stage drops dev dependencies and optional peers (Prisma CLI, TypeScript) before the runtime copies node_modules', () => {
  const prune = instructions.find((line) => line.includes('npm prune'));
  expect(prune).toMatch(/npm prune --omit=dev --omit=optional /);
  expect(instructions.indexOf(prune!)).toBeLessThan(
    instructions.findIndex((line) => /^FROM \S+ AS runtime$/.test(line)),
  );
});

test('the runtime stage: the built files and agent-gateway on PATH, as the production check reads them', async () => {
  const script = path.join(root, 'scripts/check-production-install.mjs');
  const { runtimeStage } = (await import(script)) as {
    runtimeStage: (text: string) => {
      copies: { from: string; to: string }[];
      links: { target: string; name: string }[];
    };
  };
  const { copies, links } = runtimeStage(dockerfile);
  expect(copies.map(({ from }) => from).sort()).toEqual([
    'bin',
    'console/dist',
    'console/icon.svg',
    'dist',
    'node_modules',
    'package.json',
    'prisma',
  ]);
  expect(copies.every(({ from, to }) => from === to)).toBe(true);
  expect(links).toEqual([{ target: 'bin/agent-gateway.js', name: 'agent-gateway' }]);
  expect(runtime.filter((line) => line.startsWith('COPY')).length).toBe(copies.length);
});

test('in the container the metrics listener binds every interface, on the port the image exposes', () => {
  const env = Object.fromEntries(
    runtime
      .filter((line) => line.startsWith('ENV '))
      .flatMap((line) => line.slice(4).trim().split(/\s+/))
      .map((pair) => pair.split('=') as [string, string]),
  );
  expect(env).toMatchObject({ METRICS_HOST: '0.0.0.0', PORT: '8000', DATA_DIR: '/data' });
  const exposed = runtime
    .filter((line) => line.startsWith('EXPOSE '))
    .flatMap((line) => line.slice(7).trim().split(/\s+/));
  const container = parseEnv(env);
  expect(container.metricsHost).toBe('0.0.0.0');
  expect(exposed.sort()).toEqual([String(container.port), String(container.metricsPort)].sort());
  // Outside the image the default stays the loopback.
  expect(parseEnv({}).metricsHost).toBe('127.0.0.1');
});
