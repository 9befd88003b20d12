import { builder } from '../../api/builder.js';
import { closedValues, graphqlOnly } from '../../api/closed-values.js';
import { policyEffects, policyModes } from '../policy/policy-rules.js';
import { INTERACTION_CHANNELS } from './record-chain.js';
import { principalOf } from '../../api/context.js';
import { cursorArgDescription, historyListType } from '../../api/list.js';
import { query } from '../../api/operations.js';
import { streamResponse, type StreamRoute } from '../../api/stream-routes.js';
import { ApprovalRef } from '../approval/approval.graphql.js';
import { ManifestRef } from '../manifest/manifest.graphql.js';
import { REASON_CODES } from '../gateway/decision.js';
import type { RecordBody, RecordedConfirmation, RecordedConnection, RecordedPolicy } from './record-chain.js';
import { exportLineOf, type RecordExportFilter } from './record.service.js';
import type { ConsistencyProof, InclusionProof, RecordCheckpoint } from './record-log.js';

const RecordStatusEnum = builder.enumType('RecordStatus', { values: ['approved', 'denied'] as const });

const RecordAction = builder.objectRef<{ type: string; tool: string; params: unknown }>('RecordAction').implement({
  fields: (t) => ({
    type: t.exposeString('type'),
    tool: t.exposeString('tool'),
    params: t.field({
      type: 'JSON',
      nullable: true,
      description: 'Null when the org does not keep params.',
      resolve: (a) => a.params,
    }),
  }),
});

/** A reason as the record signs it: the code and the message (details stay in the decision). */
const RecordReasonRef = builder.objectRef<RecordBody['reasons'][number]>('RecordReason').implement({
  fields: (t) => ({
    code: t.exposeString('code', closedValues(REASON_CODES)),
    message: t.exposeString('message'),
  }),
});

const RecordedConfirmationRef = builder.objectRef<RecordedConfirmation>('RecordedConfirmation').implement({
  description: "A user's confirmation of a call, as its record signs it.",
  fields: (t) => ({
    confirmation_id: t.exposeID('confirmation_id', { description: 'The question the user answered (`cnf_…`).' }),
    by: t.exposeString('by', {
      description: 'The credential of the MCP client whose user answered: its API key id or OAuth grant id.',
    }),
  }),
});

export const RedactionRef = builder.objectRef<{ kind: string; count: number }>('Redaction').implement({
  description: 'How many matches of one kind of content (of `secrets`, `pii` or `hidden_text`) a redaction replaced.',
  fields: (t) => ({ kind: t.exposeString('kind'), count: t.exposeInt('count') }),
});

export const MatchedPolicyRef = builder.objectRef<RecordedPolicy>('MatchedPolicy').implement({
  description: 'A policy that matched the action (shadow ones included: they are reported, never applied).',
  fields: (t) => ({
    policy_id: t.exposeString('policy_id'),
    name: t.exposeString('name'),
    version: t.exposeInt('version'),
    effect: t.exposeString('effect', {
      description: '`deny`, `require_approval` or `rate_limit`.',
      ...closedValues(policyEffects),
    }),
    mode: t.exposeString('mode', { description: '`enforce` or `shadow`.', ...closedValues(policyModes) }),
    condition_error: t.exposeString('condition_error', {
      nullable: true,
      description: 'Why the condition failed at run time; the policy then matched (policies fail closed).',
    }),
    rate_limit_exceeded: t.exposeBoolean('rate_limit_exceeded', {
      nullable: true,
      description:
        'For a rate_limit policy: whether this action was over the limit (an enforced one then refused it with 429; a shadow one only says so). ' +
        'Execute counts only otherwise-allowed actions; evaluate reads the counts without counting. Null for other effects.',
    }),
  }),
});

const RecordedConnectionRef = builder.objectRef<RecordedConnection>('RecordedConnection').implement({
  description:
    "The OAuth connection through which the gateway called the tool's upstream, as signed into the record: which connection, and whose. Never a token.",
  fields: (t) => ({
    connection_id: t.exposeID('connection_id'),
    user_id: t.exposeID('user_id', {
      nullable: true,
      description: "The user whose connection it was; null for the organization's connection.",
    }),
  }),
});

export const RecordRef = builder.prismaObject('InteractionRecord', {
  name: 'InteractionRecord',
  fields: (t) => ({
    record_id: t.exposeID('id'),
    org_id: t.exposeID('orgId'),
    seq: t.int({ description: 'Position in the org chain, from 1.', resolve: (r) => Number(r.seq) }),
    svc_id: t.exposeString('svcId'),
    agent_id: t.exposeString('agentId'),
    action: t.field({
      type: RecordAction,
      resolve: (r) => ({ type: r.actionType, tool: r.tool, params: r.params ?? null }),
    }),
    capability: t.exposeString('capability'),
    params_hash: t.exposeString('paramsHash'),
    decision: t.string({ resolve: (r) => (r.status === 'approved' ? 'allow' : 'deny') }),
    status: t.expose('status', { type: RecordStatusEnum }),
    executed: t.exposeBoolean('executed'),
    reasons: t.field({ type: [RecordReasonRef], resolve: (r) => r.reasons as unknown as RecordBody['reasons'] }),
    result_hash: t.exposeString('resultHash', { nullable: true }),
    approval_id: t.exposeString('approvalId', { nullable: true }),
    policies: t.field({
      type: [MatchedPolicyRef],
      nullable: true,
      description:
        'The policies that matched, as the decision reported them; null on records from before policies existed.',
      resolve: (r) => r.policies as unknown as RecordedPolicy[] | null,
    }),
    channel: t.exposeString('channel', {
      nullable: true,
      ...closedValues(INTERACTION_CHANNELS),
      description:
        'How the agent called: `rest`, `graphql` or `mcp` (signed into the record); null on records from before channels were recorded.',
    }),
    connection: t.field({
      type: RecordedConnectionRef,
      nullable: true,
      description:
        'The OAuth connection (and its user) the call reached its upstream through, signed into the record; never a token. ' +
        'Null when the tool authenticates otherwise, and on records from before connections were recorded.',
      resolve: (r) => r.connection as unknown as RecordedConnection | null,
    }),
    original_result_hash: t.exposeString('originalResultHash', {
      nullable: true,
      description:
        'Only after a `redact` policy changed the result: the SHA-256 of the result the tool gave (`result_hash` is of the redacted result the agent got), signed.',
    }),
    redactions: t.field({
      type: [RedactionRef],
      nullable: true,
      description: 'Only after a redaction: what was replaced, by kind (signed); null otherwise.',
      resolve: (r) => (r.redactions as unknown as { kind: string; count: number }[] | null) ?? null,
    }),
    confirmation: t.field({
      type: RecordedConfirmationRef,
      nullable: true,
      description:
        'Only on records of calls their user confirmed in the MCP client (effect `require_confirmation`), signed: which question, answered through which credential.',
      resolve: (r) => (r.confirmation as unknown as RecordedConfirmation | null) ?? null,
    }),
    labels: t.stringList({
      description:
        'The labels of the `label` policies that matched, signed into the record (absent from its body when none); empty when none.',
      resolve: (r) => r.labels ?? [],
    }),
    prev_hash: t.exposeString('prevHash'),
    record_hash: t.exposeString('recordHash'),
    signature: t.exposeString('signature', {
      description: 'Ed25519 over record_hash, base64url; key in /.well-known/jwks.json.',
    }),
    key_id: t.exposeString('keyId'),
    created_at: t.expose('createdAt', { type: 'Timestamp' }),
  }),
});

/** Relations for dashboards; GraphQL only (see rest-schema.ts), each batched by a DataLoader. */
builder.prismaObjectFields(RecordRef, (t) => ({
  manifest: t.field({
    type: ManifestRef,
    nullable: true,
    extensions: graphqlOnly,
    description:
      "The version of the agent's manifest the record was decided under: the one approved most recently before the record; null if none was approved yet.",
    resolve: async (record, _, ctx) => {
      const approved = await ctx.loaders.approvedManifests.load({ orgId: record.orgId, svcId: record.svcId });
      return approved.filter((m) => m.approvedAt!.getTime() <= record.createdAt.getTime()).at(-1) ?? null;
    },
  }),
  approval: t.field({
    type: ApprovalRef,
    nullable: true,
    extensions: graphqlOnly,
    description: 'The human approval the action asked for or used.',
    resolve: (record, _, ctx) =>
      record.approvalId ? ctx.loaders.approvalById.load({ orgId: record.orgId, id: record.approvalId }) : null,
  }),
}));

const RecordList = historyListType('RecordList', RecordRef);

const recordFilterArgs = builder.args((t) => ({
  agent_id: t.string(),
  action: t.string({ description: '`type` or `type:tool`.' }),
  status: t.field({ type: RecordStatusEnum }),
  label: t.string({ description: 'Records whose decision carries this label (a `label` policy’s).' }),
  from: t.field({ type: 'Timestamp' }),
  to: t.field({ type: 'Timestamp' }),
  limit: t.int({ description: 'Default 100, at most 1000.' }),
  offset: t.int(),
  cursor: t.string({ description: cursorArgDescription }),
}));

builder.prismaObjectField('Organization', 'records', (t) =>
  t.field({
    type: RecordList,
    extensions: graphqlOnly,
    description: 'Interaction records of the organization, newest first.',
    args: recordFilterArgs,
    authScopes: (org) => ({ org: { orgId: org.id, action: 'log:read' } }),
    resolve: (org, args, ctx) => ctx.services.records.list(org.id, args),
  }),
);

const RecordChecks = builder
  .objectRef<{ hash: boolean; signature: boolean; chain: boolean }>('RecordChecks')
  .implement({
    fields: (t) => ({
      hash: t.exposeBoolean('hash'),
      signature: t.exposeBoolean('signature'),
      chain: t.exposeBoolean('chain'),
    }),
  });

const RecordVerification = builder
  .objectRef<{ record_id: string; valid: boolean; checks: { hash: boolean; signature: boolean; chain: boolean } }>(
    'RecordVerification',
  )
  .implement({
    fields: (t) => ({
      record_id: t.exposeID('record_id'),
      valid: t.exposeBoolean('valid'),
      checks: t.field({ type: RecordChecks, resolve: (v) => v.checks }),
    }),
  });

const tag = 'Records';

const recordsQuery = query('records', {
  field: (t) =>
    t.field({
      type: RecordList,
      description: "Interaction records of the caller's organization, newest first.",
      args: recordFilterArgs,
      authScopes: { own: 'log:read' },
      resolve: (_, args, ctx) => ctx.services.records.list(principalOf(ctx).orgId, args),
    }),
  rest: {
    method: 'GET',
    path: '/records',
    tag,
    summary: 'List interaction records',
    auth: ['bearer', 'apiKey'],
  },
});

const recordQuery = query('record', {
  field: (t) =>
    t.field({
      type: RecordRef,
      args: { record_id: t.arg.id({ required: true }) },
      authScopes: { own: 'log:read' },
      resolve: (_, args, ctx) => ctx.services.records.get(principalOf(ctx).orgId, String(args.record_id)),
    }),
  rest: {
    method: 'GET',
    path: '/records/:record_id',
    tag,
    summary: 'Read one record',
    auth: ['bearer', 'apiKey'],
  },
});

const verifyRecordQuery = query('verify_record', {
  field: (t) =>
    t.field({
      type: RecordVerification,
      args: { record_id: t.arg.id({ required: true }) },
      authScopes: { own: 'log:read' },
      resolve: (_, args, ctx) => ctx.services.records.verify(principalOf(ctx).orgId, String(args.record_id)),
    }),
  rest: {
    method: 'GET',
    path: '/records/:record_id/verify',
    tag,
    summary: 'Verify a record: hash, signature and link to the previous record',
    auth: ['bearer', 'apiKey'],
  },
});

const exportRecordsStream: StreamRoute = {
  operationId: 'export_records',
  method: 'GET',
  path: '/records/export',
  tag,
  summary: "Export the caller's organization's records with the keys to verify them offline (JSON Lines, streamed)",
  description:
    'A signed header line ({type: "header", format: "agent-gateway.records.v1", org_id, from, to, count, first_seq, ' +
    'last_seq, exported_at, chain_head, jwks, key_id, checkpoint, signature}), then one line per record in seq order ' +
    '({type: "record", body, params, record_hash, signature}; body is exactly what record_hash covers). ' +
    'The export is taken at the latest signed checkpoint (`checkpoint`: its note, verifier key, and the subtree roots ' +
    'before and after the exported records, from which its Merkle root is rebuilt): the records up to its tree size, ' +
    'contiguous in seq from the first created at or after `from` to the last created before `to`. Check a file ' +
    'offline with `npx agent-gateway verify <file>`.',
  auth: ['bearer', 'apiKey'],
  action: 'log:export',
  query: [
    { name: 'from', type: 'timestamp', description: 'Inclusive: from the first record created at or after it.' },
    { name: 'to', type: 'timestamp', description: 'Exclusive: up to the last record created before it.' },
  ],
  media: { 'application/x-ndjson': 'A signed header line, then one line per record in seq order' },
  async handle(call) {
    const { header, batches } = await call.services.records.exportRecords(call.orgId, call.query as RecordExportFilter);
    const lines = async function* () {
      yield `${JSON.stringify(header)}\n`;
      for await (const batch of batches)
        yield batch.map((record) => `${JSON.stringify(exportLineOf(record))}\n`).join('');
    };
    const stamp = header.exported_at.replace(/[-:]/g, '').replace(/\.\d+Z$/, 'Z');
    return streamResponse(call, lines(), 'application/x-ndjson; charset=utf-8', `records-${call.orgId}-${stamp}.jsonl`);
  },
};

// The records as a transparency log (docs/decisions/0059-records-as-a-transparency-log.md).

const RecordCheckpointRef = builder.objectRef<RecordCheckpoint>('RecordCheckpoint').implement({
  description:
    "A signed checkpoint of the organization's Merkle tree of records: C2SP tlog-checkpoint text in a C2SP signed note.",
  fields: (t) => ({
    origin: t.exposeString('origin', { description: '`<PUBLIC_URL host>/orgs/<org_id>`, also the key name.' }),
    tree_size: t.exposeInt('tree_size', { description: 'How many records (leaves) the tree has.' }),
    root_hash: t.exposeString('root_hash', { description: 'The RFC 9162 root hash, base64.' }),
    note: t.exposeString('note', { description: 'The signed note, exactly as GET /records/checkpoint serves it.' }),
    key_id: t.exposeString('key_id', { description: 'The checkpoint signing key.' }),
    created_at: t.expose('created_at', { type: 'Timestamp' }),
  }),
});

const CheckpointVerifierRef = builder
  .objectRef<{ verifier_key: string; verifier_keys: string[] }>('CheckpointVerifier')
  .implement({
    fields: (t) => ({
      verifier_key: t.exposeString('verifier_key', {
        description:
          'The active key in the note verifier-key form: `<name>+<hex key hash>+<base64 of 0x01 ‖ public key>`.',
      }),
      verifier_keys: t.exposeStringList('verifier_keys', {
        description: 'Every checkpoint key, retired ones included (newest first): older checkpoints verify with them.',
      }),
    }),
  });

const InclusionProofRef = builder.objectRef<InclusionProof>('RecordInclusionProof').implement({
  description: 'RFC 9162 §2.1.3 inclusion proof of a record (leaf index = seq − 1).',
  fields: (t) => ({
    record_id: t.exposeID('record_id'),
    leaf_index: t.exposeInt('leaf_index'),
    tree_size: t.exposeInt('tree_size'),
    root_hash: t.exposeString('root_hash', { description: 'Base64.' }),
    hashes: t.exposeStringList('hashes', { description: 'The audit path, leaf first, base64.' }),
  }),
});

const ConsistencyProofRef = builder.objectRef<ConsistencyProof>('RecordConsistencyProof').implement({
  description: 'RFC 9162 §2.1.4 consistency proof between two tree sizes.',
  fields: (t) => ({
    from: t.exposeInt('from'),
    to: t.exposeInt('to'),
    hashes: t.exposeStringList('hashes', { description: 'Base64.' }),
  }),
});

const recordCheckpointQuery = query('record_checkpoint', {
  field: (t) =>
    t.field({
      type: RecordCheckpointRef,
      description: "The latest signed checkpoint of the caller's organization's record tree.",
      authScopes: { own: 'log:read' },
      resolve: (_, __, ctx) => ctx.services.records.log.checkpoint(principalOf(ctx).orgId),
    }),
});

const checkpointNoteStream: StreamRoute = {
  operationId: 'record_checkpoint_note',
  method: 'GET',
  path: '/records/checkpoint',
  tag,
  summary: "The latest signed checkpoint of the caller's organization's record tree (C2SP tlog-checkpoint)",
  description:
    'A C2SP signed note holding a C2SP tlog-checkpoint: the origin line `<PUBLIC_URL host>/orgs/<org_id>`, the tree ' +
    'size, the base64 RFC 9162 root hash, a blank line, then an Ed25519 signature line. A new one is signed at most ' +
    'every CHECKPOINT_SECONDS while the tree grows. 404 before the first record.',
  auth: ['bearer', 'apiKey'],
  action: 'log:read',
  query: [],
  media: { 'text/plain': 'The signed note' },
  whole: {
    description: 'The latest checkpoint as a signed note',
    headers: { 'X-Tree-Size': 'The tree size of the checkpoint' },
  },
  extraErrors: ['404'],
  async handle(call) {
    const { note, tree_size } = await call.services.records.log.checkpoint(call.orgId);
    return new Response(note, {
      status: 200,
      headers: {
        'Content-Type': 'text/plain; charset=utf-8',
        'Cache-Control': 'no-store',
        'X-Tree-Size': String(tree_size),
      },
    });
  },
};

const recordCheckpointVerifierQuery = query('record_checkpoint_verifier', {
  field: (t) =>
    t.field({
      type: CheckpointVerifierRef,
      description: "The keys that verify the caller's organization's checkpoints, in the note verifier-key form.",
      authScopes: { own: 'log:read' },
      resolve: (_, __, ctx) => ctx.services.records.log.verifiers(principalOf(ctx).orgId),
    }),
  rest: {
    method: 'GET',
    path: '/records/checkpoint/verifier',
    tag,
    summary: 'The verifier keys of the checkpoints (note verifier-key form)',
    auth: ['bearer', 'apiKey'],
  },
});

const recordProofQuery = query('record_proof', {
  field: (t) =>
    t.field({
      type: InclusionProofRef,
      description:
        'RFC 9162 inclusion proof of a record in the tree of `tree_size` records (default: the latest checkpoint). ' +
        'Sizes beyond the latest checkpoint are 422.',
      args: { record_id: t.arg.id({ required: true }), tree_size: t.arg.int() },
      authScopes: { own: 'log:read' },
      resolve: (_, args, ctx) =>
        ctx.services.records.log.inclusion(principalOf(ctx).orgId, String(args.record_id), args.tree_size),
    }),
  rest: {
    method: 'GET',
    path: '/records/:record_id/proof',
    tag,
    summary: 'Inclusion proof of a record at a tree size (RFC 9162)',
    auth: ['bearer', 'apiKey'],
  },
});

const recordConsistencyQuery = query('record_consistency', {
  field: (t) =>
    t.field({
      type: ConsistencyProofRef,
      description:
        'RFC 9162 consistency proof that the tree of `to` records extends the tree of `from`. ' +
        'Sizes beyond the latest checkpoint are 422.',
      args: { from: t.arg.int({ required: true }), to: t.arg.int({ required: true }) },
      authScopes: { own: 'log:read' },
      resolve: (_, args, ctx) => ctx.services.records.log.consistency(principalOf(ctx).orgId, args.from, args.to),
    }),
  rest: {
    method: 'GET',
    path: '/records/consistency',
    tag,
    summary: 'Consistency proof between two tree sizes (RFC 9162)',
    auth: ['bearer', 'apiKey'],
  },
});

/** The operations of this file, in the order the OpenAPI document lists their routes. */
export const recordOperations = [
  recordsQuery,
  recordQuery,
  verifyRecordQuery,
  recordCheckpointQuery,
  recordCheckpointVerifierQuery,
  recordProofQuery,
  recordConsistencyQuery,
];

/** The routes that stream their answer, in the order the OpenAPI document lists them. */
export const recordStreams = [exportRecordsStream, checkpointNoteStream];
