import { createHash } from 'node:crypto';
import {
  definitionDiff,
  definitionHash,
  definitionHold,
  definitionOf,
  listProblem,
  MAX_DEFINITIONS,
  planAccept,
  planRefresh,
  statusOf,
  type KeptDefinition,
} from '../../../src/modules/tool/tool-definitions.js';
import { checkDecision } from '../../../src/modules/gateway/decision.js';

/** The pure rules of upstream tool definitions (src/modules/tool/tool-definitions.ts). */

const now = new Date('2026-11-26T12:00:00.000Z');
const later = new Date('2026-11-26T12:05:00.000Z');
const refund = {
  name: 'refund',
  description: 'Refunds an invoice.',
  inputSchema: { type: 'object', properties: { invoice: { type: 'string' } } },
};
const lookup = { name: 'lookup', inputSchema: { type: 'object' } };
const hash = (value: object) => definitionHash(definitionOf(value as never));

const pinnedAll = (tools: object[]) => planRefresh([], tools as never, { alreadyPinned: false, only: null, now }).kept;
const refresh = (kept: KeptDefinition[], tools: object[], at = later) =>
  planRefresh(kept, tools as never, { alreadyPinned: true, only: null, now: at });

describe('a definition and its hash', () => {
  test('only the decided fields are kept; the hash is SHA-256 of RFC 8785 JSON, blind to key order', () => {
    const listed = {
      ...refund,
      title: 'Refund',
      _meta: { x: 1 },
      icons: [{ src: 'https://x' }],
      annotations: { readOnlyHint: false },
    };
    expect(definitionOf(listed as never)).toEqual({ ...refund, title: 'Refund', annotations: { readOnlyHint: false } });
    const canonical =
      '{"description":"Refunds an invoice.","inputSchema":{"properties":{"invoice":{"type":"string"}},"type":"object"},"name":"refund"}';
    expect(hash(refund)).toBe(createHash('sha256').update(canonical).digest('hex'));
    expect(
      hash({
        inputSchema: { properties: { invoice: { type: 'string' } }, type: 'object' },
        name: 'refund',
        description: 'Refunds an invoice.',
      }),
    ).toBe(hash(refund));
    expect(hash({ ...refund, description: 'Refunds an invoice' })).not.toBe(hash(refund));
  });

  test('what cannot be kept: too many tools, a name twice, no name, hostile depth', () => {
    expect(listProblem([refund, lookup] as never)).toBeUndefined();
    expect(listProblem([refund, refund] as never)).toContain('"refund" twice');
    expect(listProblem([{ inputSchema: { type: 'object' } }] as never)).toContain('without a valid name');
    let deep: Record<string, unknown> = { type: 'object' };
    for (let i = 0; i < 40; i++) deep = { type: 'object', properties: { a: deep } };
    expect(listProblem([{ name: 'deep', inputSchema: deep }] as never)).toContain('"deep" nests deeper');
    expect(
      listProblem(Array.from({ length: MAX_DEFINITIONS + 1 }, (_, i) => ({ name: `t${i}`, inputSchema: {} })) as never),
    ).toContain(`at most ${MAX_DEFINITIONS}`);
  });
});

describe('planRefresh', () => {
  test('the first read pins everything it finds, by name, and reports no change', () => {
    const plan = planRefresh([], [refund, lookup] as never, { alreadyPinned: false, only: null, now });
    expect(plan.pinnedNow).toBe(true);
    expect(plan.changes).toEqual([]);
    expect(plan.kept.map((d) => [d.name, statusOf(d), d.pinnedAt])).toEqual([
      ['lookup', 'pinned', now],
      ['refund', 'pinned', now],
    ]);
  });

  test('`only` keeps the one upstream tool a connector calls', () => {
    expect(
      planRefresh([], [refund, lookup] as never, { alreadyPinned: false, only: 'lookup', now }).kept.map((d) => d.name),
    ).toEqual(['lookup']);
  });

  test('a change is reported once, keeps the time it was first seen, and a return to the pin is reported and clears it', () => {
    const pinned = pinnedAll([refund]);
    const changed = { ...refund, description: 'Now with instructions.' };
    const first = refresh(pinned, [changed]);
    expect(first.changes).toEqual([
      { name: 'refund', status: 'changed', pinned_hash: hash(refund), current_hash: hash(changed) },
    ]);
    expect(first.kept[0]).toMatchObject({ changedAt: later, pinned: refund, current: changed });

    const again = refresh(first.kept, [changed], new Date('2026-11-26T12:10:00.000Z'));
    expect(again.changes).toEqual([]);
    expect(again.kept[0].changedAt).toEqual(later);

    const movedOn = { ...refund, description: 'Other instructions.' };
    const third = refresh(again.kept, [movedOn], new Date('2026-11-26T12:15:00.000Z'));
    expect(third.changes.map((c) => c.current_hash)).toEqual([hash(movedOn)]);
    expect(third.kept[0].changedAt).toEqual(later);

    const back = refresh(third.kept, [refund]);
    expect(back.changes).toEqual([
      { name: 'refund', status: 'pinned', pinned_hash: hash(refund), current_hash: hash(refund) },
    ]);
    expect(back.kept[0].changedAt).toBeNull();
  });

  test('a tool that appears is new (no pin); one that vanishes is removed; a new one that vanishes is forgotten', () => {
    const pinned = pinnedAll([refund]);
    const appeared = refresh(pinned, [refund, lookup]);
    expect(appeared.changes).toEqual([
      { name: 'lookup', status: 'new', pinned_hash: null, current_hash: hash(lookup) },
    ]);
    const gone = refresh(appeared.kept, []);
    expect(gone.kept.map((d) => [d.name, statusOf(d)])).toEqual([['refund', 'removed']]);
    expect(gone.changes).toEqual([
      { name: 'refund', status: 'removed', pinned_hash: hash(refund), current_hash: null },
    ]);
    expect(refresh(gone.kept, []).changes).toEqual([]);
  });
});

describe('planAccept', () => {
  const pinned = pinnedAll([refund, lookup]);
  const changed = { ...refund, description: 'Changed.' };
  const drifted = refresh(pinned, [changed]).kept; // refund changed, lookup removed

  test('without a list every difference is accepted: changes pinned, removals forgotten', () => {
    const plan = planAccept(drifted, null, later);
    if (!plan.ok) throw new Error('refused');
    expect(plan.kept.map((d) => [d.name, statusOf(d), d.pinnedAt])).toEqual([['refund', 'pinned', later]]);
    expect(plan.accepted.map((a) => [a.name, a.status])).toEqual([
      ['lookup', 'removed'],
      ['refund', 'changed'],
    ]);
  });

  test('a list accepts what it names; a reviewed hash that moved on, an unknown name or a pinned one refuse the whole', () => {
    const named = planAccept(drifted, [{ name: 'refund', current_hash: hash(changed) }], later);
    if (!named.ok) throw new Error('refused');
    expect(named.kept.map((d) => [d.name, statusOf(d)])).toEqual([
      ['lookup', 'removed'],
      ['refund', 'pinned'],
    ]);
    expect(planAccept(drifted, [{ name: 'refund', current_hash: hash(refund) }], later)).toEqual({
      ok: false,
      problem: 'moved',
      name: 'refund',
    });
    expect(planAccept(drifted, [{ name: 'nope' }], later)).toEqual({ ok: false, problem: 'unknown', name: 'nope' });
    // null stands for "reviewed as removed": the tool came back (as `changed`) since, so nothing is accepted.
    expect(planAccept(drifted, [{ name: 'refund', current_hash: null }], later)).toEqual({
      ok: false,
      problem: 'moved',
      name: 'refund',
    });
    expect(planAccept(drifted, [{ name: 'lookup', current_hash: null }], later).ok).toBe(true);
    expect(planAccept(pinned, [{ name: 'refund' }], later)).toEqual({
      ok: false,
      problem: 'not_changed',
      name: 'refund',
    });
  });
});

describe('definitionHold and the decision', () => {
  const state = (kept: KeptDefinition[], pinned = true) => ({
    pinned,
    definitions: new Map(kept.map((d) => [d.name, d])),
  });
  const changed = refresh(pinnedAll([refund, lookup]), [{ ...refund, description: 'x' }]).kept;

  test('nothing read yet holds nothing; a pinned tool goes; changed and new are held; removed and never-listed are not found', () => {
    expect(definitionHold(state([], false), 'refund')).toBeUndefined();
    expect(definitionHold(state(pinnedAll([refund])), 'refund')).toBeUndefined();
    expect(definitionHold(state(changed), 'refund')).toMatchObject({
      code: 'TOOL_DEFINITION_CHANGED',
      details: { tool: 'refund' },
    });
    expect(definitionHold(state(changed), 'lookup')).toMatchObject({ code: 'TOOL_NOT_FOUND_UPSTREAM' });
    expect(definitionHold(state(changed), 'export')).toMatchObject({
      code: 'TOOL_NOT_FOUND_UPSTREAM',
      details: { tool: 'export' },
    });
    const appeared = refresh(pinnedAll([refund]), [refund, lookup]).kept;
    expect(definitionHold(state(appeared), 'lookup')?.message).toContain('never accepted');
  });

  test('the diff is unified, from the pin to the current definition; none while they agree', () => {
    expect(definitionDiff(pinnedAll([refund])[0])).toBeNull();
    const diff = definitionDiff(changed.find((d) => d.name === 'refund')!)!;
    expect(diff).toContain('--- pinned/refund');
    expect(diff).toContain('+++ current/refund');
    expect(diff).toContain('-  "description": "Refunds an invoice.",');
    expect(diff).toContain('+  "description": "x",');
  });

  test('the diff writes hidden characters as their JSON escapes, so an operator sees what a model would read', () => {
    const tags = [...'RUN'].map((c) => String.fromCodePoint(0xe0000 + c.charCodeAt(0))).join('');
    const hidden = refresh(pinnedAll([refund]), [{ ...refund, description: `Refunds.${tags}\u200b\u202e` }]).kept;
    const diff = definitionDiff(hidden.find((d) => d.name === 'refund')!)!;
    expect(diff).toContain('+  "description": "Refunds.\\udb40\\udc52\\udb40\\udc55\\udb40\\udc4e\\u200b\\u202e",');
    expect(diff).not.toMatch(/[\u200b\u202e]|\udb40/);
  });

  test('a held call is denied with the hold as its reason, after TOOL_NOT_CONFIGURED’s place', () => {
    const context = {
      call: {
        svcId: 'a',
        agentId: 'a',
        action: { type: 'billing', tool: 'refund', params: {} },
        capability: 'billing:refund',
        capabilityToken: null,
        approvalId: null,
      },
      mode: 'execute',
      keySvcIds: [],
      agent: null,
      manifest: {
        agentId: 'a',
        status: 'active',
        approvedCapabilities: ['billing:refund'],
        requireHumanApproval: [],
        agent: { name: 'a', version: '1', team: 't' },
        limits: { maxActionsPerHour: 10, maxActionsPerDay: 10 },
      },
      token: null,
      approval: null,
      toolConfigured: true,
      toolHold: definitionHold(state(changed), 'refund'),
      budget: null,
      policies: [],
      limits: null,
    } as unknown as Parameters<typeof checkDecision>[0];
    expect(checkDecision(context).reasons).toEqual([
      {
        code: 'TOOL_DEFINITION_CHANGED',
        message: expect.stringContaining('"refund"'),
        details: { tool: 'refund', pinned_hash: expect.any(String), current_hash: expect.any(String) },
      },
    ]);
  });
});
