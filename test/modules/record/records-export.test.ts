import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { canonicalHash as hashOfParams } from '../../../src/lib/canonical-json.js';
import { startTestApp, type TestApp } from '../../support/app.js';
import { signUp, type OrgFixture } from '../../support/fixtures.js';
import { actionBody, execute, readyAgent, type AgentFixture } from '../../support/gateway.js';
import { nodeArguments } from '../../support/child-command.js';

const root = fileURLToPath(new URL('../../..', import.meta.url));
let t: TestApp;
let org: OrgFixture;
let agent: AgentFixture;
let dir: string;

/** Executes: reads with params, refunds that need a human (denied, with an approval id). */
async function act(agentFixture: AgentFixture, i: number) {
  const body =
    i % 4 === 3
      ? actionBody(agentFixture, 'refund', { invoice: `inv-${i}`, amount: 1000 + i })
      : actionBody(agentFixture, 'read', { invoice: `inv-${i}`, amount: 4200 + i, note: `line ${i}` });
  const response = await execute(t, agentFixture, body);
  expect(response.status).toBe(200);
  return response.body;
}

beforeAll(async () => {
  t = await startTestApp();
  dir = join(tmpdir(), `agw-export-${randomBytes(4).toString('hex')}`);
  await mkdir(dir, { recursive: true });
  org = await signUp(t, 'records');
  agent = await readyAgent(t, org, {
    capabilities: ['billing:read', 'billing:refund'],
    constraints: { max_actions_per_hour: 1000, max_actions_per_day: 10000, require_human_approval: ['billing:refund'] },
  });
  for (let i = 0; i < 40; i++) await act(agent, i);
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
  await t.close();
});

async function exportText(query = '', token = org.adminToken) {
  const response = await t.request('GET', `/api/v1/records/export${query}`, { token });
  expect(response.status).toBe(200);
  return response;
}

async function saved(text: string, name = `export-${randomBytes(4).toString('hex')}.jsonl`) {
  const file = join(dir, name);
  await writeFile(file, text);
  return file;
}

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

/** The CLI as a user runs it: a child process, no server or database behind it. */
function run(command: string, args: string[]): Promise<Run> {
  const env = { ...process.env };
  delete env.NODE_OPTIONS;
  delete env.DATABASE_URL;
  return new Promise((resolve) => {
    execFile(command, args, { cwd: root, env }, (error, stdout, stderr) => {
      resolve({ code: error ? Number((error as { code?: number }).code ?? 1) : 0, stdout, stderr });
    });
  });
}
const verify = (file: string, ...extra: string[]) =>
  run(process.execPath, [...nodeArguments('cli/agent-gateway'), 'verify', file, ...extra]);

const lines = (text: string) => text.trimEnd().split('\n');

/** Replaces the first match of `pattern` inside line `index` (0 is the header): one edit of one line. */
function editLine(text: string, index: number, pattern: RegExp, replace: (match: string) => string): string {
  const all = lines(text);
  const edited = all[index].replace(pattern, replace);
  expect(edited).not.toBe(all[index]);
  all[index] = edited;
  return `${all.join('\n')}\n`;
}

describe('GET /records/export', () => {
  test('a signed header with the record keys and the chain head, then every record in seq order', async () => {
    const response = await exportText();
    expect(response.headers.get('content-type')).toBe('application/x-ndjson; charset=utf-8');
    expect(response.headers.get('content-disposition')).toMatch(
      /^attachment; filename="records-[0-9a-f-]{36}-\d{8}T\d{6}Z\.jsonl"$/,
    );
    const [header, ...records] = lines(response.text).map((line) => JSON.parse(line));
    const jwks = await t.request('GET', '/.well-known/jwks.json');
    const recordKeys = jwks.body.keys.filter((k: { kid: string }) => k.kid.startsWith('record_'));
    expect(recordKeys.length).toBeGreaterThan(0);
    const [head] = await t.database.db.sql.query<{ seq: string; head_hash: string }>(
      'SELECT seq::text AS seq, head_hash FROM record_chain_heads WHERE org_id = $1',
      [org.orgId],
    );
    expect(header).toEqual({
      type: 'header',
      format: 'agent-gateway.records.v1',
      org_id: org.orgId,
      from: null,
      to: null,
      count: 40,
      first_seq: 1,
      last_seq: 40,
      exported_at: expect.stringMatching(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/),
      chain_head: { seq: 40, head_hash: head.head_hash },
      jwks: { keys: recordKeys },
      // The checkpoint the export is taken at: all 40 records, so no subtree before or after them.
      checkpoint: {
        note: (await t.request('GET', '/api/v1/records/checkpoint', { token: org.adminToken })).text,
        verifier_key: (await t.request('GET', '/api/v1/records/checkpoint/verifier', { token: org.adminToken })).body
          .verifier_key,
        tree_size: 40,
        before: [],
        after: [],
      },
      key_id: expect.stringMatching(/^record_/),
      signature: expect.any(String),
    });
    expect(Number(head.seq)).toBe(40);
    expect(records.map((r) => r.body.seq)).toEqual(Array.from({ length: 40 }, (_, i) => i + 1));
    expect(records.at(-1).record_hash).toBe(head.head_hash);
    // A line carries what the record API shows: the same hash, signature and params.
    for (const line of [records[0], records[3], records[39]]) {
      const shown = await t.request('GET', `/api/v1/records/${line.body.record_id}`, { token: org.adminToken });
      expect(Object.keys(line).sort()).toEqual(['body', 'params', 'record_hash', 'signature', 'type']);
      expect(line).toMatchObject({
        type: 'record',
        record_hash: shown.body.record_hash,
        signature: shown.body.signature,
      });
      expect(line.params).toEqual(shown.body.action.params);
      expect(line.body).toMatchObject({
        record_id: shown.body.record_id,
        seq: shown.body.seq,
        prev_hash: shown.body.prev_hash,
        executed: shown.body.executed,
        approval_id: shown.body.approval_id,
        action: { type: shown.body.action.type, tool: shown.body.action.tool },
      });
    }
    expect(records[3].body.approval_id).toMatch(/^apr_/);
  });

  test('is not mistaken for GET /records/{record_id}; other methods are 405', async () => {
    const posted = await t.request('POST', '/api/v1/records/export', { token: org.adminToken, body: {} });
    expect(posted.status).toBe(405);
    expect(posted.headers.get('allow')).toBe('GET');
    const record = await t.request('GET', '/api/v1/records/int_nope', { token: org.adminToken });
    expect(record.status).toBe(404);
  });

  test('from and to select a contiguous seq range; bad values are 422 naming the parameter', async () => {
    const all = lines((await exportText()).text)
      .slice(1)
      .map((line) => JSON.parse(line));
    const from = all[10].body.created_at;
    const to = all[30].body.created_at;
    const ranged = lines((await exportText(`?from=${encodeURIComponent(from)}&to=${encodeURIComponent(to)}`)).text).map(
      (l) => JSON.parse(l),
    );
    const [header, ...records] = ranged;
    const expected = all.filter((r) => r.body.created_at >= from && r.body.created_at < to);
    expect(records).toEqual(expected);
    expect(header).toMatchObject({
      from,
      to,
      count: expected.length,
      first_seq: expected[0].body.seq,
      last_seq: expected.at(-1).body.seq,
    });
    for (const [query, field] of [
      ['from=later', 'from'],
      [`from=${to}&to=${from}`, 'to'],
    ]) {
      const response = await t.request('GET', `/api/v1/records/export?${query}`, { token: org.adminToken });
      expect(response.status).toBe(422);
      expect(response.body.error.details.errors.map((e: { field: string }) => e.field)).toEqual([field]);
    }
  });

  test('an org without records exports a header only; records of other orgs never appear', async () => {
    const empty = await signUp(t, 'no-records');
    const response = await exportText('', empty.adminToken);
    const [header, ...rest] = lines(response.text).map((line) => JSON.parse(line));
    expect(rest).toEqual([]);
    expect(header).toMatchObject({
      org_id: empty.orgId,
      count: 0,
      first_seq: null,
      last_seq: null,
      chain_head: { seq: 0 },
    });
    const file = await saved(response.text);
    const result = await verify(file);
    expect(result).toMatchObject({ code: 0 });
    expect(result.stdout).toMatch(/no records/);
  });

  test('records appended while the export streams are not in it: count and chain head stay one snapshot', async () => {
    const busy = await signUp(t, 'snapshot');
    const busyAgent = await readyAgent(t, busy);
    // More than one batch (1000), appended through the record service itself (fast, really signed).
    const appended = Array.from({ length: 1500 }, (_, i) =>
      t.app.services.records.append(
        `int_bulk_${i}`,
        {
          orgId: busy.orgId,
          svcId: busyAgent.svcId,
          agentId: busyAgent.svcId,
          actionType: 'billing',
          tool: 'read',
          capability: 'billing:read',
          paramsHash: hashOfParams({ n: i }),
          params: { n: i },
          decision: 'allow',
          executed: true,
          reasons: [],
          resultHash: null,
          approvalId: null,
          policies: [],
          labels: [],
          originalResultHash: null,
          redactions: [],
          confirmation: null,
          channel: 'rest',
          connection: null,
        },
        true,
      ),
    );
    await Promise.all(appended);
    const response = await t.app.yoga.fetch(
      'http://localhost/api/v1/records/export',
      { headers: { authorization: `Bearer ${busy.adminToken}` } },
      { clientAddress: '192.0.2.1' } as never,
    );
    const reader = response.body!.getReader();
    const decoder = new TextDecoder();
    let received = decoder.decode((await reader.read()).value, { stream: true });
    // The header has left (and perhaps the first batch); now more records are appended.
    for (let i = 0; i < 5; i++) await act(busyAgent, 0);
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      received += decoder.decode(value, { stream: true });
    }
    const [header, ...records] = lines(received).map((line) => JSON.parse(line));
    expect(header).toMatchObject({ count: 1500, last_seq: 1500, chain_head: { seq: 1500 } });
    expect(records.length).toBe(1500);
    expect(records.at(-1).record_hash).toBe(header.chain_head.head_hash);
    const [head] = await t.database.db.sql.query<{ seq: string }>(
      'SELECT seq::text AS seq FROM record_chain_heads WHERE org_id = $1',
      [busy.orgId],
    );
    expect(Number(head.seq)).toBe(1505);
    expect((await verify(await saved(received))).code).toBe(0);
  });

  test('concurrent exports and executes: every export verifies', async () => {
    const busy = await signUp(t, 'busy');
    const busyAgent = await readyAgent(t, busy);
    for (let i = 0; i < 10; i++) await act(busyAgent, i * 4);
    const appends = Array.from({ length: 40 }, (_, i) => act(busyAgent, i * 4));
    const exports = Array.from({ length: 3 }, () => exportText('', busy.adminToken));
    const [texts] = await Promise.all([Promise.all(exports), Promise.all(appends)]);
    for (const { text } of texts) {
      const [header, ...records] = lines(text).map((line) => JSON.parse(line));
      expect(records).toHaveLength(header.count);
      expect(header.chain_head.seq).toBe(header.last_seq);
      expect(records.at(-1).record_hash).toBe(header.chain_head.head_hash);
      const result = await verify(await saved(text));
      expect(result.code).toBe(0);
    }
  });
});

describe('agent-gateway verify', () => {
  let text: string;
  let file: string;
  beforeAll(async () => {
    text = (await exportText()).text;
    file = await saved(text, 'export.jsonl');
  });

  test('an untouched export verifies: exit 0 and a summary', async () => {
    const result = await verify(file);
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    const header = JSON.parse(lines(text)[0]);
    expect(result.stdout).toContain(`OK: 40 records of org ${org.orgId} verified`);
    expect(result.stdout).toContain('range: seq 1..40');
    expect(result.stdout).toContain(`keys:  ${header.key_id}`);
    expect(result.stdout).toContain('starts at the genesis hash');
    expect(result.stdout).toContain(`ends at the chain head at export time (seq 40, ${header.chain_head.head_hash})`);
    // The gateway's calls here go through no OAuth connection.
    expect(result.stdout).toContain('connections: 0 records naming the OAuth connection of the call');
  });

  const record = (index: number) => JSON.parse(lines(text)[index]).body as { seq: number; record_id: string };

  test('one changed digit of a param fails, naming that record', async () => {
    const tampered = editLine(text, 12, /"amount":(\d+)/, (m) => m.replace(/\d$/, (d) => String((Number(d) + 1) % 10)));
    const result = await verify(await saved(tampered));
    expect(result.code).toBe(1);
    const { seq, record_id: id } = record(12);
    expect(result.stderr).toBe(
      `FAILED: line 13, record seq ${seq} (${id}): params mismatch: params do not hash to body.params_hash\n`,
    );
  });

  test('a flipped executed flag fails with a hash mismatch', async () => {
    const tampered = editLine(text, 5, /"executed":true/, () => '"executed":false');
    const result = await verify(await saved(tampered));
    expect(result.code).toBe(1);
    expect(result.stderr).toContain(`record seq 5 (${record(5).record_id}): hash mismatch`);
  });

  test('a removed line breaks the link at the record after it', async () => {
    const all = lines(text);
    all.splice(20, 1);
    const result = await verify(await saved(`${all.join('\n')}\n`));
    expect(result.code).toBe(1);
    expect(result.stderr).toBe(
      `FAILED: line 21, record seq 21 (${record(21).record_id}): broken link: seq 21 follows seq 19\n`,
    );
  });

  test('records swapped or a removed last line fail too', async () => {
    const swapped = lines(text);
    [swapped[7], swapped[8]] = [swapped[8], swapped[7]];
    const bySwap = await verify(await saved(`${swapped.join('\n')}\n`));
    expect(bySwap.code).toBe(1);
    expect(bySwap.stderr).toContain('broken link');
    const truncated = lines(text).slice(0, -1);
    const byTruncation = await verify(await saved(`${truncated.join('\n')}\n`));
    expect(byTruncation.code).toBe(1);
    expect(byTruncation.stderr).toContain('count mismatch: 39 records, the header says 40');
  });

  test('a tampered signature fails as a bad signature', async () => {
    const tampered = editLine(text, 30, /"signature":"(.)/, (m) => m.replace(/.$/, (c) => (c === 'A' ? 'B' : 'A')));
    const result = await verify(await saved(tampered));
    expect(result.code).toBe(1);
    expect(result.stderr).toBe(`FAILED: line 31, record seq 30 (${record(30).record_id}): bad signature\n`);
  });

  test("a tampered JWKS or count in the header fails at the header's signature", async () => {
    const header = JSON.parse(lines(text)[0]);
    const x: string = header.jwks.keys[0].x;
    const changedKey = editLine(
      text,
      0,
      new RegExp(`"x":"${x}"`),
      () => `"x":"${x[0] === 'A' ? 'B' : 'A'}${x.slice(1)}"`,
    );
    const byKey = await verify(await saved(changedKey));
    expect(byKey.code).toBe(1);
    expect(byKey.stderr).toMatch(/^FAILED: line 1: header: /);
    const changedCount = editLine(text, 0, /"count":40/, () => '"count":39');
    const byCount = await verify(await saved(changedCount));
    expect(byCount.code).toBe(1);
    expect(byCount.stderr).toBe('FAILED: line 1: header: bad signature\n');
  });

  test('records re-signed with a key of their own fail against the keys pinned with --jwks', async () => {
    const published = await t.request('GET', '/.well-known/jwks.json');
    const pinned = await saved(JSON.stringify(published.body), 'jwks.json');
    expect((await verify(file, '--jwks', pinned)).code).toBe(0);
    const stranger = await saved(
      JSON.stringify({ keys: [{ kty: 'OKP', crv: 'Ed25519', x: 'A'.repeat(43), kid: 'record_other' }] }),
      'other.json',
    );
    const result = await verify(file, '--jwks', stranger);
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(/header: key record_\S+ is not one of the trusted keys/);
  });

  test('malformed input names the line; usage errors exit 2', async () => {
    const malformed = `${lines(text).slice(0, 4).join('\n')}\n{not json\n${lines(text).slice(4).join('\n')}\n`;
    const result = await verify(await saved(malformed));
    expect(result.code).toBe(1);
    expect(result.stderr).toBe('FAILED: line 5: malformed line: not JSON\n');
    expect((await verify(join(dir, 'missing.jsonl'))).code).toBe(2);
    expect((await run(process.execPath, [...nodeArguments('cli/agent-gateway'), 'frobnicate'])).code).toBe(2);
  });
});

describe('after a record key rotation', () => {
  test('the export carries the retired and the new key, and records signed by either verify', async () => {
    const rotated = await signUp(t, 'rotation');
    const rotatedAgent = await readyAgent(t, rotated);
    for (let i = 0; i < 3; i++) await act(rotatedAgent, 0);
    const fresh = await t.app.keys.rotate('record');
    for (let i = 0; i < 3; i++) await act(rotatedAgent, 0);
    const { text } = await exportText('', rotated.adminToken);
    const [header, ...records] = lines(text).map((line) => JSON.parse(line));
    const signers = [...new Set(records.map((r) => r.body.key_id))];
    expect(signers).toHaveLength(2);
    expect(signers[1]).toBe(fresh.kid);
    expect(header.key_id).toBe(fresh.kid);
    expect(header.jwks.keys.map((k: { kid: string }) => k.kid)).toEqual(expect.arrayContaining(signers));
    const result = await verify(await saved(text));
    expect(result.code).toBe(0);
    expect(result.stdout).toContain(`keys:  ${signers.join(', ')}`);
  });
});
