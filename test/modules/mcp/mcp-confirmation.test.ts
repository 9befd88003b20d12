/**
 * Confirmation by the agent's own user (effect require_confirmation,
 * docs/decisions/0089-confirmation-by-the-agents-user.md): an MCP client that declared form
 * elicitation is asked, on 2026-07-28 through the SDK's own multi-round-trip flow, on 2025-11-25
 * by a request on the call's stream whose answer the client posts (to any process); the answer
 * confirms this call once. Everyone else gets CONFIRMATION_REQUIRED.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { type CallToolResult, ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import {
  Client as ClientV2,
  type ElicitResult,
  StreamableHTTPClientTransport as TransportV2,
} from '@modelcontextprotocol/client';
import { startTestApp, type TestApp } from '../../support/app.js';
import { signUp, type OrgFixture } from '../../support/fixtures.js';
import { actionBody, execute, evaluate, readyAgent, type AgentFixture } from '../../support/gateway.js';
import { allRecords } from '../../support/records.js';

let t: TestApp;
let server: http.Server;
let base: string;
/** A second instance of the service on the same database: another process, as far as an answer can tell. */
let other: TestApp;
let otherServer: http.Server;
let otherBase: string;
let org: OrgFixture;
let agent: AgentFixture;

beforeAll(async () => {
  t = await startTestApp();
  server = http.createServer(t.app.yoga);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  // It lets one call of an org wait for its user at a time.
  other = await startTestApp({ MCP_CONFIRMATIONS_WAITING_PER_ORG: '1' }, { db: t.database.db });
  otherServer = http.createServer(other.app.yoga);
  await new Promise<void>((resolve) => otherServer.listen(0, '127.0.0.1', resolve));
  otherBase = `http://127.0.0.1:${(otherServer.address() as AddressInfo).port}`;
  org = await signUp(t, 'confirm');
  agent = await readyAgent(t, org);
  const policy = await t.request('POST', '/api/v1/policies', {
    token: org.adminToken,
    body: {
      name: 'refunds need their user',
      effect: 'require_confirmation',
      target: { capabilities: ['billing:refund'] },
      condition: 'params.amount > 10',
    },
  });
  expect(policy.status).toBe(201);
});

afterAll(async () => {
  for (const listening of [server, otherServer]) {
    listening.closeAllConnections();
    await new Promise((resolve) => listening.close(resolve));
  }
  await other?.close();
  await t?.close();
});

type Answer = ElicitResult;

/** A 2026-07-28 SDK client whose user answers every question with `answer`; `sent` sees each POST body. */
async function modernClient(answer: Answer | null, sent: { body: string; headers: Headers }[] = []) {
  const asked: { message: string; requestedSchema: unknown }[] = [];
  const client = new ClientV2(
    { name: 'agent-v2', version: '1.0.0' },
    {
      capabilities: answer ? { elicitation: { form: {} } } : {},
      versionNegotiation: { mode: { pin: '2026-07-28' } },
    },
  );
  if (answer)
    client.setRequestHandler('elicitation/create', async (request) => {
      asked.push(request.params as { message: string; requestedSchema: unknown });
      return answer;
    });
  const recording = async (input: string | URL | Request, init?: RequestInit) => {
    if (typeof init?.body === 'string') sent.push({ body: init.body, headers: new Headers(init.headers) });
    return fetch(input, init);
  };
  await client.connect(
    new TransportV2(new URL(`${base}/mcp/${agent.svcId}`), {
      requestInit: { headers: { 'X-API-Key': agent.key } },
      fetch: recording,
    }),
  );
  return { client, asked };
}

const reasonsOf = (result: CallToolResult) =>
  (result.structuredContent as { reasons: { code: string; message: string }[] }).reasons;
const interactionOf = (result: CallToolResult) =>
  (result._meta as Record<string, string>)['agent-gateway/interaction_id'];

async function recordOf(interactionId: string) {
  const record = await t.request('GET', `/api/v1/records/${interactionId}`, { token: org.adminToken });
  expect(record.status).toBe(200);
  return record.body;
}

test('accepted: the user is asked once with a yes-or-no form naming the call, and the call runs; its record names the confirmation', async () => {
  const { client, asked } = await modernClient({ action: 'accept', content: { confirm: true } });
  try {
    const result = (await client.callTool({ name: 'billing__refund', arguments: { amount: 50 } })) as CallToolResult;
    expect(result.isError).toBeFalsy();
    expect(result.structuredContent).toEqual({ ok: true });
    expect(asked).toHaveLength(1);
    expect(asked[0].message).toContain('billing:refund');
    expect(asked[0].message).toContain('"amount":50');
    expect(asked[0].requestedSchema).toMatchObject({ properties: { confirm: { type: 'boolean' } } });
    const record = await recordOf(interactionOf(result));
    expect(record).toMatchObject({ status: 'approved', executed: true, channel: 'mcp' });
    expect(record.confirmation).toEqual({ confirmation_id: expect.stringMatching(/^cnf_/), by: expect.any(String) });
    const verified = await t.request('GET', `/api/v1/records/${record.record_id}/verify`, { token: org.adminToken });
    expect(verified.body.valid).toBe(true);
    // A call the policy does not match is never asked about.
    const small = (await client.callTool({ name: 'billing__refund', arguments: { amount: 5 } })) as CallToolResult;
    expect(small.isError).toBeFalsy();
    expect(asked).toHaveLength(1);
    expect((await recordOf(interactionOf(small))).confirmation).toBeNull();
  } finally {
    await client.close();
  }
});

const refusals = [
  ['decline', { action: 'decline' }, 'the user answered decline'],
  ['cancel', { action: 'cancel' }, 'the user answered cancel'],
  ['accept without a yes', { action: 'accept', content: { confirm: false } }, 'the user answered decline'],
] as const;
const clients = {
  '2026-07-28': (answer: Answer) => modernClient(answer),
  '2025-11-25': (answer: Answer) => olderClient(answer),
};

test.each(
  Object.keys(clients).flatMap((revision) =>
    refusals.map(([name, answer, said]) => [revision, name, answer, said] as const),
  ),
)(
  '%s, %s: the call is denied with CONFIRMATION_REQUIRED saying so, and recorded',
  async (revision, _, answer, said) => {
    const { client, asked } = await clients[revision as keyof typeof clients](answer as Answer);
    try {
      const result = (await client.callTool({ name: 'billing__refund', arguments: { amount: 70 } })) as CallToolResult;
      expect(result.isError).toBe(true);
      expect(asked).toHaveLength(1);
      const [reason] = reasonsOf(result);
      expect(reason.code).toBe('CONFIRMATION_REQUIRED');
      expect(reason.message).toContain(said);
      expect(await recordOf(interactionOf(result))).toMatchObject({ status: 'denied', executed: false });
    } finally {
      await client.close();
    }
  },
);

test('an answer is taken once and only for its call: replayed, or sent with other arguments, it confirms nothing', async () => {
  const sent: { body: string; headers: Headers }[] = [];
  const { client } = await modernClient({ action: 'accept', content: { confirm: true } }, sent);
  try {
    const result = (await client.callTool({ name: 'billing__refund', arguments: { amount: 90 } })) as CallToolResult;
    expect(result.isError).toBeFalsy();
  } finally {
    await client.close();
  }
  const retry = sent.find((request) => request.body.includes('requestState'));
  expect(retry).toBeDefined();
  const post = (body: string) =>
    fetch(`${base}/mcp/${agent.svcId}`, { method: 'POST', headers: retry!.headers, body }).then(async (response) => {
      const text = await response.text();
      const json = text.startsWith('{') ? JSON.parse(text) : JSON.parse(text.split('data: ')[1]);
      return json.result as CallToolResult;
    });
  const replayed = await post(retry!.body);
  expect(reasonsOf(replayed)[0]).toMatchObject({ code: 'CONFIRMATION_REQUIRED' });
  expect(reasonsOf(replayed)[0].message).toContain('already used');
  // A fresh question for amount 90, answered for amount 95: the hash does not match.
  const { client: asker, asked } = await modernClient({ action: 'accept', content: { confirm: true } }, sent);
  sent.length = 0;
  try {
    await asker.callTool({ name: 'billing__refund', arguments: { amount: 90 } });
  } finally {
    await asker.close();
  }
  expect(asked).toHaveLength(1);
  const answered = sent.find((request) => request.body.includes('requestState'))!;
  const other = answered.body.replace('"amount":90', '"amount":95');
  expect(other).not.toBe(answered.body);
  const moved = await post(other);
  expect(reasonsOf(moved)[0].message).toContain('about another call');
});

test('clients that cannot be asked, REST and GraphQL: CONFIRMATION_REQUIRED, recorded; evaluate reports it', async () => {
  const { client: silent } = await modernClient(null);
  const legacy = new Client({ name: 'agent-v1', version: '1.0.0' }, { capabilities: { elicitation: { url: {} } } });
  await legacy.connect(
    new StreamableHTTPClientTransport(new URL(`${base}/mcp/${agent.svcId}`), {
      requestInit: { headers: { 'X-API-Key': agent.key } },
    }),
  );
  try {
    for (const client of [silent, legacy]) {
      const result = (await client.callTool({ name: 'billing__refund', arguments: { amount: 20 } })) as CallToolResult;
      expect(result.isError).toBe(true);
      expect(reasonsOf(result).map((r) => r.code)).toEqual(['CONFIRMATION_REQUIRED']);
      expect(await recordOf(interactionOf(result))).toMatchObject({ status: 'denied', channel: 'mcp' });
    }
  } finally {
    await silent.close();
    await legacy.close();
  }
  const rest = await execute(t, agent, actionBody(agent, 'refund', { amount: 20 }));
  expect(rest.body.reasons).toEqual([
    expect.objectContaining({
      code: 'CONFIRMATION_REQUIRED',
      details: { policies: [expect.objectContaining({ name: 'refunds need their user' })] },
    }),
  ]);
  expect((await recordOf(rest.body.interaction_id)).status).toBe('denied');
  const evaluated = await evaluate(t, agent, actionBody(agent, 'refund', { amount: 20 }));
  expect(evaluated.body.reasons.map((r: { code: string }) => r.code)).toEqual(['CONFIRMATION_REQUIRED']);
  expect((await evaluate(t, agent, actionBody(agent, 'refund', { amount: 2 }))).body.decision).toBe('allow');
});

/**
 * A 2025-11-25 SDK client whose user answers every question with `answer`. Its posted answers go
 * to `answersTo` (another instance of the service, to show that any process takes them); `posted`
 * sees each answer's body and the status it got.
 */
async function olderClient(
  answer: Answer,
  {
    answersTo = `${base}/mcp/${agent.svcId}`,
    posted = [],
  }: { answersTo?: string; posted?: { body: string; status: number }[] } = {},
) {
  const asked: { message: string; requestedSchema: unknown }[] = [];
  const client = new Client({ name: 'agent-v1', version: '1.0.0' }, { capabilities: { elicitation: { form: {} } } });
  client.setRequestHandler(ElicitRequestSchema, async (request) => {
    asked.push(request.params as { message: string; requestedSchema: unknown });
    return answer;
  });
  const routing = async (input: string | URL | Request, init?: RequestInit) => {
    const body = typeof init?.body === 'string' ? init.body : '';
    if (!body.includes('"method"') && body.includes('agw-confirm:')) {
      const response = await fetch(answersTo, init);
      posted.push({ body, status: response.status });
      return response;
    }
    return fetch(input, init);
  };
  await client.connect(
    new StreamableHTTPClientTransport(new URL(`${base}/mcp/${agent.svcId}`), {
      requestInit: { headers: { 'X-API-Key': agent.key } },
      fetch: routing,
    }),
  );
  return { client, asked };
}

/** How many refunds ran, by their records. */
const executedRefunds = async () =>
  (await allRecords(t, org)).filter(
    (record) => record.executed && (record as { capability?: string }).capability === 'billing:refund',
  ).length;

describe("2025-11-25: the question goes out on the call's stream, and the answer is posted", () => {
  test('accepted, with the answer posted to another instance: the call waits, runs once, and its record names the confirmation', async () => {
    const posted: { body: string; status: number }[] = [];
    const { client, asked } = await olderClient(
      { action: 'accept', content: { confirm: true } },
      { answersTo: `${otherBase}/mcp/${agent.svcId}`, posted },
    );
    try {
      const result = (await client.callTool({ name: 'billing__refund', arguments: { amount: 41 } })) as CallToolResult;
      expect(result.isError).toBeFalsy();
      expect(result.structuredContent).toEqual({ ok: true });
      expect(asked).toHaveLength(1);
      expect(asked[0].message).toContain('"amount":41');
      expect(asked[0].requestedSchema).toMatchObject({ properties: { confirm: { type: 'boolean' } } });
      expect(posted.map((answer) => answer.status)).toEqual([202]);
      const ran = await executedRefunds();
      const record = await recordOf(interactionOf(result));
      expect(record).toMatchObject({ status: 'approved', executed: true, channel: 'mcp' });
      expect(record.confirmation).toEqual({ confirmation_id: expect.stringMatching(/^cnf_/), by: expect.any(String) });
      // Replayed to either instance, the answer is refused and runs nothing more.
      for (const to of [base, otherBase]) {
        const replayed = await fetch(`${to}/mcp/${agent.svcId}`, {
          method: 'POST',
          headers: {
            'X-API-Key': agent.key,
            'Content-Type': 'application/json',
            Accept: 'application/json, text/event-stream',
          },
          body: posted[0].body,
        });
        expect(replayed.status).toBe(400);
        expect((await replayed.json()).error.message).toContain('answered already');
      }
      expect(await executedRefunds()).toBe(ran);
      // A call the policy does not match is answered at once, unasked.
      const small = (await client.callTool({ name: 'billing__refund', arguments: { amount: 3 } })) as CallToolResult;
      expect(small.isError).toBeFalsy();
      expect(asked).toHaveLength(1);
    } finally {
      await client.close();
    }
  });

  test('an answer posted under another agent is refused with a 400; the call waits on until its client goes away, then is denied and recorded', async () => {
    const second = await readyAgent(t, org);
    const posted: { body: string; status: number }[] = [];
    const { client, asked } = await olderClient(
      { action: 'accept', content: { confirm: true } },
      { answersTo: `${base}/mcp/${second.svcId}`, posted },
    );
    const call = client.callTool({ name: 'billing__refund', arguments: { amount: 88 } }).catch((error) => error);
    await until(() => posted.length === 1);
    expect(posted[0].status).toBe(400);
    expect(asked).toHaveLength(1);
    await client.close();
    expect(await call).toBeInstanceOf(Error);
    const [record] = await untilDenied();
    expect(record).toMatchObject({ status: 'denied', executed: false });
    expect(record.reasons.map((reason) => reason.code)).toEqual(['CONFIRMATION_REQUIRED']);
  });

  test('an org with MCP_CONFIRMATIONS_WAITING_PER_ORG calls waiting: its next call is denied at once, not asked', async () => {
    const connect = async (onAsked: () => void) => {
      const client = new Client({ name: 'agent-v1', version: '1.0.0' }, { capabilities: { elicitation: {} } });
      client.setRequestHandler(ElicitRequestSchema, async () => {
        onAsked();
        return new Promise<never>(() => undefined);
      });
      await client.connect(
        new StreamableHTTPClientTransport(new URL(`${otherBase}/mcp/${agent.svcId}`), {
          requestInit: { headers: { 'X-API-Key': agent.key } },
        }),
      );
      return client;
    };
    let asked = 0;
    const waiting = await connect(() => asked++);
    const next = await connect(() => asked++);
    try {
      const pending = waiting.callTool({ name: 'billing__refund', arguments: { amount: 61 } }).catch((error) => error);
      await until(() => asked === 1);
      const refused = (await next.callTool({ name: 'billing__refund', arguments: { amount: 62 } })) as CallToolResult;
      expect(refused.isError).toBe(true);
      expect(reasonsOf(refused).map((reason) => reason.code)).toEqual(['CONFIRMATION_REQUIRED']);
      expect(asked).toBe(1);
      await waiting.close();
      expect(await pending).toBeInstanceOf(Error);
    } finally {
      await next.close();
    }
  });

  test('an answer to a question nobody asked is refused with a 400', async () => {
    const unasked = await fetch(`${base}/mcp/${agent.svcId}`, {
      method: 'POST',
      headers: {
        'X-API-Key': agent.key,
        'Content-Type': 'application/json',
        Accept: 'application/json, text/event-stream',
      },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 'agw-confirm:cnf_nobodyaskedthis',
        result: { action: 'accept', content: { confirm: true } },
      }),
    });
    expect(unasked.status).toBe(400);
    expect((await unasked.json()).error.message).toContain('not open to this answer');
  });
});

/** Polls for `condition`: a bound on a test that would otherwise hang, not a measurement. */
async function until(condition: () => boolean) {
  for (let attempt = 0; attempt < 300 && !condition(); attempt++)
    await new Promise((resolve) => setTimeout(resolve, 50));
  expect(condition()).toBe(true);
}

/** The denial of the call that stopped waiting, once it is recorded (the only one not answered). */
async function untilDenied() {
  for (let attempt = 0; attempt < 100; attempt++) {
    const found = (await allRecords(t, org)).filter((record) =>
      record.reasons.some((reason) => (reason as { message?: string }).message?.includes('did not answer')),
    );
    if (found.length) return found;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error('no record of the call that stopped waiting');
}
