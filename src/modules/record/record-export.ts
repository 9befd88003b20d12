import { createPublicKey, type KeyObject } from 'node:crypto';
import type { JWK } from 'jose';
import { canonicalHash } from '../../lib/canonical-json.js';
import {
  GENESIS_HASH,
  INTERACTION_CHANNELS,
  recordHashOf,
  signRecordHash,
  verifyRecordSignature,
  type InteractionChannel,
  type RecordBody,
} from './record-chain.js';

/**
 * The records export (`GET /api/v1/records/export`): JSON Lines, a signed header then one line
 * per record in seq order, and the offline check of such a file (`agent-gateway verify`). Pure:
 * no server and no database, so the CLI carries nothing else.
 *
 *   {"type":"header","format":"agent-gateway.records.v1","org_id",…,"jwks":{"keys":[…]},"signature"}
 *   {"type":"record","body":{…exactly what was hashed…},"params":{…}|null,"record_hash","signature"}
 *
 * `record_hash` = "sha256:" + hex SHA-256 of the RFC 8785 canonical JSON of `body`; `signature`
 * is Ed25519 over the UTF-8 bytes of `record_hash` by the key `body.key_id` of the header's JWKS.
 * The header is signed alike over the canonical JSON of the header without `signature`, so its
 * count, range and chain head cannot be edited to hide a removed record.
 */

import { type Checkpoint, openNote, parseCheckpoint, parseVerifierKey } from './checkpoint.js';
import { completeSubtrees, HASH_BYTES, MerkleFrontier, recordLeafHash } from './merkle.js';

export const RECORDS_EXPORT_FORMAT = 'agent-gateway.records.v1';

export interface ExportHeader {
  type: 'header';
  format: typeof RECORDS_EXPORT_FORMAT;
  org_id: string;
  /** The requested range (created_at, from inclusive, to exclusive), null when open. */
  from: string | null;
  to: string | null;
  /** Records in the file; their seqs run from first_seq to last_seq without a gap (null when none). */
  count: number;
  first_seq: number | null;
  last_seq: number | null;
  exported_at: string;
  /** The org's chain when the export was taken; every exported record has seq ≤ chain_head.seq. */
  chain_head: { seq: number; head_hash: string };
  /** The record signing public keys, as /.well-known/jwks.json serves them. */
  jwks: { keys: JWK[] };
  /**
   * The org's latest signed checkpoint when the export was taken (its tree size is at most
   * chain_head.seq), with what ties the file's records up to that size to its root. Absent from
   * exports made before the transparency log, and null when the org had no checkpoint yet.
   */
  checkpoint?: ExportCheckpoint | null;
  /** The key that signed this header. */
  key_id: string;
  signature: string;
}

/** docs/reference/exports.md#the-records-as-a-transparency-log */
export interface ExportCheckpoint {
  /** The signed note, as GET /records/checkpoint serves it. */
  note: string;
  /** The note verifier key of the key that signed it. */
  verifier_key: string;
  tree_size: number;
  /** Base64 roots of the complete subtrees of the leaves before the first exported record, left to right. */
  before: string[];
  /** Base64 roots of the complete subtrees of the leaves after the last exported record, left to right. */
  after: string[];
}

export interface ExportRecordLine {
  type: 'record';
  body: RecordBody;
  /** The action's params when the org keeps them (their canonical hash is body.params_hash). */
  params: unknown;
  record_hash: string;
  signature: string;
}

export type UnsignedHeader = Omit<ExportHeader, 'signature'>;

export const headerHashOf = (header: UnsignedHeader): string => canonicalHash(header);

export function signHeader(header: UnsignedHeader, privateKey: KeyObject): ExportHeader {
  return { ...header, signature: signRecordHash(headerHashOf(header), privateKey) };
}

export interface VerifyOptions {
  /**
   * Keys to trust instead of the file's own JWKS (e.g. saved from the service's
   * /.well-known/jwks.json): then a file signed with any other key fails, even if it carries it.
   */
  trustedKeys?: JWK[];
  /**
   * Checkpoint verifier keys to trust instead of the file's own (e.g. from
   * GET /records/checkpoint/verifier): a checkpoint signed by any other key fails.
   */
  trustedVerifierKeys?: string[];
}

export interface VerifySuccess {
  ok: true;
  orgId: string;
  count: number;
  firstSeq: number | null;
  lastSeq: number | null;
  firstCreatedAt: string | null;
  lastCreatedAt: string | null;
  /** Key ids that signed the records. */
  keyIds: string[];
  chainHead: { seq: number; head_hash: string };
  /** The last record is the chain head at export time (its hash matched). */
  reachesHead: boolean;
  /**
   * The checkpoint the file is tied to (its root rebuilt from the file), or null when it has none;
   * `after` records of the file are past it (in the next checkpoint).
   */
  checkpoint: { treeSize: number; origin: string; pinned: boolean; covered: number; after: number } | null;
  /** The first record links to the genesis hash (seq 1), rather than to a record outside the file. */
  fromGenesis: boolean;
  /** Records whose signed body lists at least one matched policy. */
  policyMatches: number;
  /** Records appended before policies existed (their body has no `policies`). */
  beforePolicies: number;
  /** Records by the channel their signed body names; `none` for records from before channels. */
  channels: Record<InteractionChannel | 'none', number>;
  /** Records whose signed body names the OAuth connection their call used. */
  connections: number;
}

export interface VerifyFailure {
  ok: false;
  /** 1-based line of the file. */
  line: number;
  seq?: number;
  recordId?: string;
  reason: string;
}

export type VerifyResult = VerifySuccess | VerifyFailure;

class Broken extends Error {
  constructor(
    readonly reason: string,
    readonly record?: { seq?: number; recordId?: string },
  ) {
    super(reason);
  }
}

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);
const isSeq = (value: unknown): value is number => Number.isSafeInteger(value) && (value as number) >= 0;
const isHash = (value: unknown): value is string => typeof value === 'string' && /^sha256:[0-9a-f]{64}$/.test(value);

/** `{connection_id, user_id}`: an id, and a user id or null (the org's connection). */
const isConnection = (value: unknown): boolean =>
  isObject(value) &&
  typeof value.connection_id === 'string' &&
  value.connection_id !== '' &&
  (value.user_id === null || (typeof value.user_id === 'string' && value.user_id !== ''));

const isPolicyList = (value: unknown): boolean =>
  Array.isArray(value) &&
  value.every(
    (p) =>
      isObject(p) &&
      typeof p.policy_id === 'string' &&
      typeof p.name === 'string' &&
      Number.isSafeInteger(p.version) &&
      typeof p.effect === 'string' &&
      typeof p.mode === 'string',
  );

function parseLine(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    throw new Broken('malformed line: not JSON');
  }
}

function checkHeader(value: unknown): ExportHeader {
  if (!isObject(value) || value.type !== 'header')
    throw new Broken('malformed header: the first line must be {"type":"header",…}');
  if (value.format !== RECORDS_EXPORT_FORMAT)
    throw new Broken(`malformed header: format must be ${RECORDS_EXPORT_FORMAT}`);
  const problems: string[] = [];
  if (typeof value.org_id !== 'string') problems.push('org_id');
  if (!isSeq(value.count)) problems.push('count');
  if (!(value.first_seq === null || isSeq(value.first_seq))) problems.push('first_seq');
  if (!(value.last_seq === null || isSeq(value.last_seq))) problems.push('last_seq');
  const head = value.chain_head;
  if (!isObject(head) || !isSeq(head.seq) || !isHash(head.head_hash)) problems.push('chain_head');
  if (!isObject(value.jwks) || !Array.isArray(value.jwks.keys) || !value.jwks.keys.every(isObject))
    problems.push('jwks');
  if (typeof value.key_id !== 'string') problems.push('key_id');
  if (typeof value.signature !== 'string') problems.push('signature');
  const checkpoint = value.checkpoint;
  const hashList = (list: unknown) => Array.isArray(list) && list.every((h) => typeof h === 'string');
  if (
    !(
      checkpoint === undefined ||
      checkpoint === null ||
      (isObject(checkpoint) &&
        typeof checkpoint.note === 'string' &&
        typeof checkpoint.verifier_key === 'string' &&
        isSeq(checkpoint.tree_size) &&
        hashList(checkpoint.before) &&
        hashList(checkpoint.after))
    )
  )
    problems.push('checkpoint');
  if (problems.length) throw new Broken(`malformed header: bad or missing ${problems.join(', ')}`);
  return value as unknown as ExportHeader;
}

function checkRecordShape(value: unknown): ExportRecordLine {
  if (!isObject(value) || value.type !== 'record') throw new Broken('malformed line: expected {"type":"record",…}');
  const body = value.body;
  if (!isObject(body)) throw new Broken('malformed line: no record body');
  const record = {
    seq: isSeq(body.seq) ? body.seq : undefined,
    recordId: typeof body.record_id === 'string' ? body.record_id : undefined,
  };
  const problems: string[] = [];
  if (record.seq === undefined || record.seq < 1) problems.push('body.seq');
  if (!record.recordId) problems.push('body.record_id');
  if (typeof body.org_id !== 'string') problems.push('body.org_id');
  if (!isHash(body.prev_hash)) problems.push('body.prev_hash');
  if (!isHash(body.params_hash)) problems.push('body.params_hash');
  if (typeof body.key_id !== 'string') problems.push('body.key_id');
  if (typeof body.created_at !== 'string') problems.push('body.created_at');
  // Records appended before policies existed have no `policies`; since then every record has the list.
  if ('policies' in body && !isPolicyList(body.policies)) problems.push('body.policies');
  if ('channel' in body && !INTERACTION_CHANNELS.includes(body.channel as InteractionChannel))
    problems.push('body.channel');
  // Only records of calls through an OAuth connection have `connection`; it is never null.
  if ('connection' in body && !isConnection(body.connection)) problems.push('body.connection');
  if (!isHash(value.record_hash)) problems.push('record_hash');
  if (typeof value.signature !== 'string') problems.push('signature');
  if (problems.length) throw new Broken(`malformed line: bad or missing ${problems.join(', ')}`, record);
  return value as unknown as ExportRecordLine;
}

/**
 * The signing keys by kid: the file's JWKS, and with `trustedKeys` each of them must be one of
 * those (same kid, curve and public point), so a file re-signed with another key fails.
 */
function keysOf(header: ExportHeader, options: VerifyOptions): Map<string, JWK> {
  const own = new Map(header.jwks.keys.filter((k) => typeof k.kid === 'string').map((k) => [k.kid!, k]));
  if (!options.trustedKeys) return own;
  const trusted = new Map(options.trustedKeys.filter((k) => typeof k.kid === 'string').map((k) => [k.kid!, k]));
  for (const [kid, key] of own) {
    const pinned = trusted.get(kid);
    if (!pinned || pinned.kty !== key.kty || pinned.crv !== key.crv || pinned.x !== key.x) {
      throw new Broken(`header: key ${kid} is not one of the trusted keys`);
    }
  }
  return own;
}

/** The Ed25519 public keys by kid, each parsed once; null for a kid whose JWK is not a usable Ed25519 key. */
class KeyRing {
  private readonly parsed = new Map<string, KeyObject | null>();
  constructor(private readonly jwks: Map<string, JWK>) {}

  get(kid: string): KeyObject | null {
    if (!this.parsed.has(kid)) {
      const jwk = this.jwks.get(kid);
      let key: KeyObject | null = null;
      if (jwk?.kty === 'OKP' && jwk.crv === 'Ed25519' && typeof jwk.x === 'string') {
        try {
          key = createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: jwk.x }, format: 'jwk' });
        } catch {
          key = null;
        }
      }
      this.parsed.set(kid, key);
    }
    return this.parsed.get(kid)!;
  }
}

/**
 * Checks an export line by line, holding one record at a time: the header and its signature, then
 * each record's shape, org, params hash, record hash, signature and link to the record before
 * (seqs contiguous, the first one of the chain linked to the genesis hash), and at the end the
 * count, the range and, when the file reaches it, the chain head. Stops at the first problem.
 */
export async function verifyExport(lines: AsyncIterable<string>, options: VerifyOptions = {}): Promise<VerifyResult> {
  let lineNo = 0;
  let header: ExportHeader | undefined;
  let keys = new KeyRing(new Map());
  let previous: { seq: number; hash: string } | undefined;
  let first: RecordBody | undefined;
  let last: RecordBody | undefined;
  let count = 0;
  let policyMatches = 0;
  let beforePolicies = 0;
  const channels: VerifySuccess['channels'] = { rest: 0, graphql: 0, mcp: 0, none: 0 };
  let connections = 0;
  const keyIds = new Set<string>();
  let pendingBlank = 0;
  let tree: ExportTree | undefined;
  try {
    for await (const raw of lines) {
      lineNo += 1;
      const text = raw.endsWith('\r') ? raw.slice(0, -1) : raw;
      if (text === '') {
        // Blank lines may end the file; anywhere else they are malformed.
        pendingBlank = pendingBlank || lineNo;
        continue;
      }
      if (pendingBlank) {
        lineNo = pendingBlank;
        throw new Broken('malformed line: blank line');
      }
      const value = parseLine(text);
      if (!header) {
        header = checkHeader(value);
        keys = new KeyRing(keysOf(header, options));
        const { signature, ...unsigned } = header;
        const headerKey = keys.get(header.key_id);
        if (!headerKey)
          throw new Broken(`header: unknown key: ${header.key_id} is not a usable Ed25519 key of the JWKS`);
        if (!verifyRecordSignature(headerHashOf(unsigned), signature, headerKey))
          throw new Broken('header: bad signature');
        tree = header.checkpoint ? exportTree(header, header.checkpoint, options) : undefined;
        continue;
      }
      const line = checkRecordShape(value);
      const { body } = line;
      const where = { seq: body.seq, recordId: body.record_id };
      if (body.org_id !== header.org_id) throw new Broken(`record of another org (${body.org_id})`, where);
      if (line.params !== null && line.params !== undefined && canonicalHash(line.params) !== body.params_hash) {
        throw new Broken('params mismatch: params do not hash to body.params_hash', where);
      }
      if (recordHashOf(body) !== line.record_hash)
        throw new Broken('hash mismatch: the body does not hash to record_hash', where);
      const key = keys.get(body.key_id);
      if (!key) throw new Broken(`unknown key: ${body.key_id} is not a usable Ed25519 key of the JWKS`, where);
      if (!verifyRecordSignature(line.record_hash, line.signature, key)) throw new Broken('bad signature', where);
      if (previous) {
        if (body.seq !== previous.seq + 1)
          throw new Broken(`broken link: seq ${body.seq} follows seq ${previous.seq}`, where);
        if (body.prev_hash !== previous.hash)
          throw new Broken('broken link: prev_hash is not the record_hash of the record before', where);
      } else {
        if (body.seq !== header.first_seq)
          throw new Broken(
            `broken link: the first record is seq ${body.seq}, the header says ${header.first_seq}`,
            where,
          );
        if (body.seq === 1 && body.prev_hash !== GENESIS_HASH)
          throw new Broken('broken link: seq 1 does not link to the genesis hash', where);
        first = body;
      }
      if (body.seq > header.chain_head.seq)
        throw new Broken(`seq ${body.seq} is past the chain head (${header.chain_head.seq})`, where);
      previous = { seq: body.seq, hash: line.record_hash };
      if (tree && BigInt(body.seq) <= tree.checkpoint.size) {
        tree.frontier.append(recordLeafHash(line.record_hash));
        tree.covered += 1;
      }
      last = body;
      keyIds.add(body.key_id);
      count += 1;
      if (body.policies === undefined) beforePolicies += 1;
      else if (body.policies.length) policyMatches += 1;
      channels[body.channel ?? 'none'] += 1;
      if (body.connection) connections += 1;
    }
  } catch (error) {
    if (error instanceof Broken) return { ok: false, line: lineNo, ...error.record, reason: error.reason };
    throw error;
  }
  if (!header) return { ok: false, line: 0, reason: 'malformed header: the file is empty' };
  const end = { line: lineNo, ...(last ? { seq: last.seq, recordId: last.record_id } : {}) };
  if (count !== header.count)
    return { ok: false, ...end, reason: `count mismatch: ${count} records, the header says ${header.count}` };
  if ((last?.seq ?? null) !== header.last_seq) {
    return {
      ok: false,
      ...end,
      reason: `count mismatch: the last record is seq ${last?.seq ?? 'none'}, the header says ${header.last_seq}`,
    };
  }
  const reachesHead = (last?.seq ?? 0) === header.chain_head.seq;
  if (reachesHead && (previous?.hash ?? GENESIS_HASH) !== header.chain_head.head_hash) {
    return { ok: false, ...end, reason: 'chain head mismatch: the last record is not the chain head of the header' };
  }
  const treeProblem = tree && closeTree(tree, last?.seq ?? null);
  if (treeProblem) return { ok: false, ...end, reason: treeProblem };
  return {
    ok: true,
    orgId: header.org_id,
    count,
    firstSeq: first?.seq ?? null,
    lastSeq: last?.seq ?? null,
    firstCreatedAt: first?.created_at ?? null,
    lastCreatedAt: last?.created_at ?? null,
    keyIds: [...keyIds],
    chainHead: header.chain_head,
    reachesHead,
    checkpoint: tree
      ? {
          treeSize: Number(tree.checkpoint.size),
          origin: tree.checkpoint.origin,
          pinned: tree.pinned,
          covered: tree.covered,
          after: count - tree.covered,
        }
      : null,
    fromGenesis: first?.seq === 1,
    policyMatches,
    beforePolicies,
    channels,
    connections,
  };
}

/** The checkpoint of a header, opened, and the tree rebuilt from the file as its records go by. */
interface ExportTree {
  checkpoint: Checkpoint;
  frontier: MerkleFrontier;
  after: Buffer[];
  pinned: boolean;
  /** Records of the file the checkpoint covers, seen so far. */
  covered: number;
}

const hashesOf = (list: string[], what: string): Buffer[] =>
  list.map((hash) => {
    const bytes = Buffer.from(hash, 'base64');
    if (bytes.length !== HASH_BYTES || bytes.toString('base64') !== hash)
      throw new Broken(`checkpoint: ${what} holds a hash that is not 32 bytes of base64`);
    return bytes;
  });

function exportTree(header: ExportHeader, coverage: ExportCheckpoint, options: VerifyOptions): ExportTree {
  const keys = options.trustedVerifierKeys ?? [coverage.verifier_key];
  const verifiers = keys.map((key) => {
    const parsed = parseVerifierKey(key);
    if ('error' in parsed) throw new Broken(`checkpoint: verifier key: ${parsed.error}`);
    return parsed;
  });
  const opened = openNote(coverage.note, verifiers);
  if ('error' in opened) throw new Broken(`checkpoint: ${opened.error}`);
  const checkpoint = parseCheckpoint(opened.text);
  if ('error' in checkpoint) throw new Broken(`checkpoint: ${checkpoint.error}`);
  if (checkpoint.origin !== opened.signer)
    throw new Broken('checkpoint: its origin is not the name of the key that signed it');
  if (!checkpoint.origin.endsWith(`/orgs/${header.org_id}`))
    throw new Broken(`checkpoint: its origin ${checkpoint.origin} is not the log of org ${header.org_id}`);
  if (checkpoint.size > BigInt(header.chain_head.seq) || coverage.tree_size !== Number(checkpoint.size))
    throw new Broken('checkpoint: its tree size is past the chain head of the export');
  const firstLeaf =
    header.first_seq === null || BigInt(header.first_seq) - 1n >= checkpoint.size
      ? checkpoint.size
      : BigInt(header.first_seq) - 1n;
  const before = hashesOf(coverage.before, 'before');
  if (before.length !== completeSubtrees(0n, firstLeaf).length)
    throw new Broken('checkpoint: before does not cover the leaves before the first record');
  return {
    checkpoint,
    frontier: MerkleFrontier.of(firstLeaf, Buffer.concat(before)),
    after: hashesOf(coverage.after, 'after'),
    pinned: Boolean(options.trustedVerifierKeys),
    covered: 0,
  };
}

/** Adds the subtrees after the last record; why the rebuilt tree is not the checkpoint's, if it is not. */
function closeTree(tree: ExportTree, lastSeq: number | null): string | undefined {
  const size = tree.checkpoint.size;
  const after = completeSubtrees(lastSeq === null || BigInt(lastSeq) > size ? size : BigInt(lastSeq), size);
  if (after.length !== tree.after.length)
    return 'checkpoint mismatch: after does not cover the leaves after the last record';
  after.forEach((node, i) => tree.frontier.appendSubtree(node.level, tree.after[i]));
  if (tree.frontier.size !== size || !tree.frontier.root().equals(tree.checkpoint.root))
    return 'checkpoint mismatch: the records do not rebuild the root of the checkpoint';
  return undefined;
}
