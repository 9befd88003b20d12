/**
 * The first-contact walkthrough (docs/walkthrough.md, linked from the README), run as written:
 * every `sh` block between the `walkthrough: start` and `walkthrough: end` markers, in order, in
 * one bash process (so each block sees the variables the previous ones set), from the checkout's
 * root, against a real service process on an ephemeral port (`GW`, which the walkthrough defaults
 * to http://localhost:8000).
 *
 * Each `# → text` line in a block is the output the command above it prints, `…` standing for
 * anything: a block's output must contain those lines, whole, in that order. So the walkthrough
 * cannot drift from the service: a renamed field, a changed status or a broken command fails here.
 */
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { killAllServices, startReadyService, type Service } from './support/service-process.js';

const root = fileURLToPath(new URL('..', import.meta.url));
const WALKTHROUGH = path.join(root, 'docs', 'walkthrough.md');
const START = '<!-- walkthrough: start';
const END = '<!-- walkthrough: end';
const EXPECTED = /^\s*# → (.*)$/;
/** Service start, about 25 curl calls, three offline verifications through tsx. */
const TEST_TIMEOUT_MS = 180_000;

/** The `sh` blocks between the markers, in order. */
export function walkthroughBlocks(page: string): string[] {
  const start = page.indexOf(START);
  const end = page.indexOf(END);
  if (start < 0 || end < start) throw new Error('docs/walkthrough.md has no walkthrough markers');
  const section = page.slice(start, end);
  return [...section.matchAll(/^```sh\n([\s\S]*?)^```$/gm)].map((match) => match[1]);
}

/** The `# → ` lines of a block: the output its commands print, in order. */
export function expectedLines(block: string): string[] {
  return block.split('\n').flatMap((line) => {
    const match = EXPECTED.exec(line);
    return match ? [match[1]] : [];
  });
}

/** An expected line matches an output line whole; `…` matches any run of characters. */
export function lineMatches(expected: string, line: string): boolean {
  const pattern = expected
    .split('…')
    .map((part) => part.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'))
    .join('.*');
  return new RegExp(`^${pattern}$`).test(line);
}

/** The first expected line not found, in order, in the output; undefined when all are. */
export function firstMissing(expected: string[], output: string[]): string | undefined {
  let at = 0;
  for (const wanted of expected) {
    while (at < output.length && !lineMatches(wanted, output[at])) at++;
    if (at === output.length) return wanted;
    at++;
  }
  return undefined;
}

const VARIABLES = ['ORG', 'TOKEN', 'KEY', 'MANIFEST', 'APPROVAL', 'RECORD', 'W'];

/** One script: the blocks with a marker line before each, and the variables at the end. */
function script(blocks: string[]): string {
  const parts = ['set -euo pipefail', 'exec 2>&1'];
  blocks.forEach((block, i) => parts.push(`printf '\\n@@block ${i}\\n'`, block));
  parts.push(`printf '\\n@@variables\\n'`, ...VARIABLES.map((name) => `printf '%s=%s\\n' ${name} "$${name}"`));
  return parts.join('\n');
}

function runBash(file: string, env: NodeJS.ProcessEnv): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn('bash', [file], { cwd: root, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
    const timer = setTimeout(() => child.kill('SIGKILL'), TEST_TIMEOUT_MS - 30_000);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, output });
    });
  });
}

/** Output lines per block (`@@block i`), and the variables (`@@variables`). */
function splitOutput(output: string) {
  const blocks: string[][] = [];
  const variables: Record<string, string> = {};
  let current: string[] | undefined;
  let inVariables = false;
  for (const line of output.split('\n')) {
    const marker = /^@@block (\d+)$/.exec(line);
    if (marker) {
      current = blocks[Number(marker[1])] = [];
    } else if (line === '@@variables') {
      inVariables = true;
    } else if (inVariables) {
      const eq = line.indexOf('=');
      if (eq > 0) variables[line.slice(0, eq)] = line.slice(eq + 1);
    } else if (current && line !== '') {
      current.push(line);
    }
  }
  return { blocks, variables };
}

describe('the walkthrough (docs/walkthrough.md)', () => {
  const tempDirs: string[] = [];
  let service: Service | undefined;

  afterAll(async () => {
    await killAllServices();
    await Promise.all(tempDirs.map((dir) => rm(dir, { recursive: true, force: true })));
  });

  test('the matcher: whole lines, `…` as a wildcard, in order', () => {
    expect(lineMatches('OK: 4 records of org … verified', 'OK: 4 records of org 6547c8e6 verified')).toBe(true);
    expect(lineMatches('deny', 'denyx')).toBe(false);
    expect(lineMatches('{"a":1}', '{"a":1}')).toBe(true);
    expect(firstMissing(['a', 'c'], ['a', 'b', 'c'])).toBeUndefined();
    expect(firstMissing(['c', 'a'], ['a', 'b', 'c'])).toBe('a');
  });

  test('the json helper stops with a message when the service does not answer or answers no JSON', async () => {
    const [first] = walkthroughBlocks(await readFile(WALKTHROUGH, 'utf8'));
    const dir = await mkdtemp(path.join(os.tmpdir(), 'agw-walkthrough-json-'));
    tempDirs.push(dir);
    const file = path.join(dir, 'no-service.sh');
    await writeFile(
      file,
      [
        'set -euo pipefail',
        'exec 2>&1',
        first,
        'rmdir "$W"',
        `echo '{"a":{"b":[7]}}' | json a.b.0`,
        `echo '<html>502</html>' | json a || echo "exit status $?"`,
        `json a < /dev/null || echo "exit status $?"`,
        // As in the walkthrough's first block: nothing listens there, so the session stops here.
        `ORG=$(curl -s -XPOST $B/orgs -H "$J" -d '{}' | json org_id)`,
        'echo "not reached"',
      ].join('\n'),
    );
    // Port 9 (discard): nothing listens on it.
    const env: NodeJS.ProcessEnv = { ...process.env, GW: 'http://127.0.0.1:9' };
    delete env.NODE_OPTIONS;
    const { code, output } = await runBash(file, env);
    const lines = output.split('\n').filter(Boolean);
    expect(lines).toEqual([
      '7',
      'json: the answer is not JSON: <html>502</html>',
      'exit status 1',
      'json: no answer: the service did not answer (is it running at http://127.0.0.1:9?)',
      'exit status 1',
      'json: no answer: the service did not answer (is it running at http://127.0.0.1:9?)',
    ]);
    expect(code).not.toBe(0);
  });

  test(
    'every block runs as written against a real service and prints what the walkthrough says',
    async () => {
      const blocks = walkthroughBlocks(await readFile(WALKTHROUGH, 'utf8'));
      // Not vacuous: the whole flow is there, with its expected outputs.
      expect(blocks.length).toBeGreaterThanOrEqual(10);
      expect(blocks.flatMap(expectedLines).length).toBeGreaterThanOrEqual(30);

      const dataDir = await mkdtemp(path.join(os.tmpdir(), 'agw-walkthrough-'));
      tempDirs.push(dataDir);
      service = await startReadyService({ dataDir });
      const file = path.join(dataDir, 'walkthrough.sh');
      await writeFile(file, script(blocks));
      const env: NodeJS.ProcessEnv = { ...process.env, GW: service.base, npm_config_update_notifier: 'false' };
      delete env.NODE_OPTIONS;
      delete env.DATABASE_URL;
      const { code, output } = await runBash(file, env);
      const { blocks: outputs, variables } = splitOutput(output);
      if (variables.W?.startsWith(os.tmpdir())) tempDirs.push(variables.W);

      blocks.forEach((block, i) => {
        const missing = firstMissing(expectedLines(block), outputs[i] ?? []);
        if (missing !== undefined) {
          throw new Error(
            `block ${i} did not print "${missing}" (in order)\n--- block ---\n${block}\n--- its output ---\n` +
              `${(outputs[i] ?? ['(did not run)']).join('\n')}\n--- whole output (exit ${code}) ---\n${output}\n${service!.output()}`,
          );
        }
      });
      if (code !== 0) throw new Error(`the walkthrough exited ${code}\n${output}`);

      // What the shell variables hold, and what the service says happened.
      expect(variables.ORG).toMatch(/^[0-9a-f-]{36}$/);
      expect(variables.KEY).toMatch(/^agw_[0-9A-Za-z]{49}$/);
      expect(variables.MANIFEST).toMatch(/^[0-9a-f-]{36}$/);
      expect(variables.APPROVAL).toMatch(/^apr_/);
      expect(variables.RECORD).toMatch(/^int_/);
      expect((await stat(path.join(variables.W, 'export.jsonl'))).size).toBeGreaterThan(0);
      const approval = await service.request('GET', `/api/v1/orgs/${variables.ORG}/approvals/${variables.APPROVAL}`, {
        token: variables.TOKEN,
      });
      expect(approval.status).toBe(200);
      expect(approval.body.status).toBe('consumed');
      const records = await service.request('GET', '/api/v1/records?limit=10', { token: variables.TOKEN });
      expect(records.body.items.map((r: { decision: string }) => r.decision)).toEqual([
        'allow',
        'deny',
        'deny',
        'allow',
      ]);
    },
    TEST_TIMEOUT_MS,
  );
});
