/**
 * The served OpenAPI document passes Redocly's `recommended` rules with no error and no warning,
 * as a deployment serves it (PUBLIC_URL set to its address). The few findings that are the API's
 * design are listed, each with its reason, in .redocly.lint-ignore.yaml; anything new fails here.
 */
import { execFile } from 'node:child_process';
import { copyFileSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { startTestApp, type TestApp } from './support/app.js';

const root = fileURLToPath(new URL('..', import.meta.url));
const redocly = path.join(root, 'node_modules', '.bin', 'redocly');

interface LintReport {
  totals: { errors: number; warnings: number; ignored: number };
  problems: Array<{ ruleId: string; message: string; location: Array<{ pointer: string }> }>;
}

let t: TestApp;
let workDir: string;
beforeAll(async () => {
  t = await startTestApp({ PUBLIC_URL: 'https://agents.acme.test' });
  workDir = mkdtempSync(path.join(tmpdir(), 'agw-openapi-lint-'));
  copyFileSync(path.join(root, '.redocly.lint-ignore.yaml'), path.join(workDir, '.redocly.lint-ignore.yaml'));
});
afterAll(async () => {
  await t.close();
  rmSync(workDir, { recursive: true, force: true });
});

async function lint(document: unknown): Promise<LintReport> {
  writeFileSync(path.join(workDir, 'openapi.json'), JSON.stringify(document, null, 2));
  const run = promisify(execFile)(redocly, ['lint', 'openapi.json', '--extends=recommended', '--format=json'], {
    cwd: workDir,
    env: { ...process.env, REDOCLY_TELEMETRY: 'off', REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true', NODE_OPTIONS: '' },
    maxBuffer: 64 * 1024 * 1024,
  });
  // Redocly exits 1 when it finds errors; the report on stdout says what they are either way.
  const { stdout } = await run.catch((error: { stdout?: string }) => ({ stdout: error.stdout ?? '' }));
  return JSON.parse(stdout) as LintReport;
}

const summary = (report: LintReport) =>
  report.problems.map((p) => `${p.ruleId} at ${p.location[0]?.pointer}: ${p.message}`);

test('the served document is clean under the recommended rules', async () => {
  const served = await t.request('GET', '/openapi.json');
  expect(served.status).toBe(200);
  expect(served.body.servers[0].url).toBe('https://agents.acme.test');
  const report = await lint(served.body);
  expect(summary(report)).toEqual([]);
  expect(report.totals).toEqual({ errors: 0, warnings: 0, ignored: 9 });
}, 60_000);

test('the linter does find what the rules forbid (a nullable without a type, a $ref with siblings)', async () => {
  const served = (await t.request('GET', '/openapi.json')).body;
  const broken = structuredClone(served);
  broken.components.schemas.Agent.properties.owner = { nullable: true };
  broken.components.schemas.Agent.properties.current_manifest = {
    $ref: '#/components/schemas/AgentCurrentManifest',
    description: 'beside a $ref, ignored by OpenAPI 3.0',
  };
  const rules = (await lint(broken)).problems.map((p) => p.ruleId);
  expect(rules).toEqual(expect.arrayContaining(['nullable-type-sibling', 'spec-ref-siblings']));
}, 60_000);
