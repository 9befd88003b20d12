import { randomBytes } from 'node:crypto';
import type { Deps } from '../../deps.js';
import { FieldErrors, notFound } from '../../errors.js';
import type { InteractionRecord, Prisma } from '../../generated/prisma/client.js';
import { GENESIS_HASH, recordHashOf, signRecordHash, verifyRecordSignature, type RecordBody } from './record-chain.js';

type Tx = Prisma.TransactionClient;

export interface NewRecord {
  orgId: string;
  svcId: string;
  agentId: string;
  actionType: string;
  tool: string;
  capability: string;
  paramsHash: string;
  params: Record<string, unknown> | undefined;
  decision: 'allow' | 'deny';
  executed: boolean;
  reasons: { code: string; message: string }[];
  resultHash: string | null;
  approvalId: string | null;
}

export interface RecordFilter {
  agent_id?: string | null;
  action?: string | null;
  status?: 'approved' | 'denied' | null;
  from?: Date | null;
  to?: Date | null;
  limit?: number | null;
  offset?: number | null;
}

export const newInteractionId = () => `int_${randomBytes(12).toString('base64url')}`;

/** The canonical body of a stored record, exactly as it was hashed when appended. */
export function bodyOf(record: InteractionRecord): RecordBody {
  return {
    record_id: record.id,
    org_id: record.orgId,
    seq: Number(record.seq),
    svc_id: record.svcId,
    agent_id: record.agentId,
    action: { type: record.actionType, tool: record.tool },
    capability: record.capability,
    params_hash: record.paramsHash,
    decision: record.status === 'approved' ? 'allow' : 'deny',
    status: record.status,
    executed: record.executed,
    reasons: record.reasons as RecordBody['reasons'],
    result_hash: record.resultHash,
    approval_id: record.approvalId,
    prev_hash: record.prevHash,
    created_at: record.createdAt.toISOString(),
    key_id: record.keyId,
  };
}

export function createRecordService({ db, keys }: Deps) {
  /**
   * Appends to the org's chain in a transaction of its own. The chain head row is locked until it
   * commits, so concurrent appends queue and the chain never forks.
   */
  async function append(id: string, entry: NewRecord, storeParams: boolean): Promise<InteractionRecord> {
    // Outside the transaction: on PGlite a second query path would wait for the transaction's connection.
    const key = await keys.activeKey('record');
    return db.prisma.$transaction((tx) => appendIn(tx, id, entry, storeParams, key));
  }

  async function appendIn(
    tx: Tx,
    id: string,
    entry: NewRecord,
    storeParams: boolean,
    key: Awaited<ReturnType<typeof keys.activeKey>>,
  ): Promise<InteractionRecord> {
    await tx.$executeRaw`
      INSERT INTO record_chain_heads (org_id, seq, head_hash, updated_at)
      VALUES (${entry.orgId}::uuid, 0, ${GENESIS_HASH}, now()) ON CONFLICT (org_id) DO NOTHING`;
    const [head] = await tx.$queryRaw<{ seq: bigint; head_hash: string }[]>`
      SELECT seq, head_hash FROM record_chain_heads WHERE org_id = ${entry.orgId}::uuid FOR UPDATE`;
    const seq = head.seq + 1n;
    const createdAt = new Date();
    const body: RecordBody = {
      record_id: id,
      org_id: entry.orgId,
      seq: Number(seq),
      svc_id: entry.svcId,
      agent_id: entry.agentId,
      action: { type: entry.actionType, tool: entry.tool },
      capability: entry.capability,
      params_hash: entry.paramsHash,
      decision: entry.decision,
      status: entry.decision === 'allow' ? 'approved' : 'denied',
      executed: entry.executed,
      reasons: entry.reasons.map(({ code, message }) => ({ code, message })),
      result_hash: entry.resultHash,
      approval_id: entry.approvalId,
      prev_hash: head.head_hash,
      created_at: createdAt.toISOString(),
      key_id: key.kid,
    };
    const recordHash = recordHashOf(body);
    const record = await tx.interactionRecord.create({
      data: {
        id,
        orgId: entry.orgId,
        seq,
        svcId: entry.svcId,
        agentId: entry.agentId,
        actionType: entry.actionType,
        tool: entry.tool,
        capability: entry.capability,
        paramsHash: entry.paramsHash,
        params: storeParams && entry.params ? (entry.params as Prisma.InputJsonValue) : undefined,
        status: body.status,
        executed: entry.executed,
        reasons: body.reasons as Prisma.InputJsonValue,
        resultHash: entry.resultHash,
        approvalId: entry.approvalId,
        prevHash: head.head_hash,
        recordHash,
        signature: signRecordHash(recordHash, key.privateKey),
        keyId: key.kid,
        createdAt,
      },
    });
    await tx.$executeRaw`
      UPDATE record_chain_heads SET seq = ${seq}, head_hash = ${recordHash}, updated_at = now()
      WHERE org_id = ${entry.orgId}::uuid`;
    return record;
  }

  async function get(orgId: string, recordId: string) {
    const record = await db.prisma.interactionRecord.findFirst({ where: { id: recordId, orgId } });
    if (!record) throw notFound('Record');
    return record;
  }

  async function list(orgId: string, filter: RecordFilter) {
    const errors = new FieldErrors();
    const limit = filter.limit ?? 100;
    const offset = filter.offset ?? 0;
    if (limit < 1 || limit > 1000) errors.add('limit', 'must be from 1 to 1000');
    if (offset < 0) errors.add('offset', 'must be 0 or more');
    errors.throwIfAny();
    const [type, tool] = filter.action?.includes(':') ? filter.action.split(':', 2) : [filter.action, undefined];
    const where: Prisma.InteractionRecordWhereInput = {
      orgId,
      ...(filter.agent_id ? { agentId: filter.agent_id } : {}),
      ...(type ? { actionType: type } : {}),
      ...(tool ? { tool } : {}),
      ...(filter.status ? { status: filter.status } : {}),
      ...(filter.from || filter.to
        ? { createdAt: { ...(filter.from ? { gte: filter.from } : {}), ...(filter.to ? { lt: filter.to } : {}) } }
        : {}),
    };
    const [items, total] = await Promise.all([
      db.prisma.interactionRecord.findMany({ where, orderBy: [{ seq: 'desc' }], take: limit, skip: offset }),
      db.prisma.interactionRecord.count({ where }),
    ]);
    return { items, total };
  }

  /** Recomputes the hash, checks the signature against the signing key and the link to the previous record. */
  async function verify(orgId: string, recordId: string) {
    const record = await get(orgId, recordId);
    const hash = recordHashOf(bodyOf(record)) === record.recordHash;
    const key = await keys.byId(record.keyId);
    const signature = Boolean(key && key.purpose === 'record' && verifyRecordSignature(record.recordHash, record.signature, key.publicKey));
    let chain: boolean;
    if (record.seq === 1n) {
      chain = record.prevHash === GENESIS_HASH;
    } else {
      const previous = await db.prisma.interactionRecord.findUnique({
        where: { orgId_seq: { orgId, seq: record.seq - 1n } },
        select: { recordHash: true },
      });
      chain = previous?.recordHash === record.prevHash;
    }
    return { record_id: record.id, valid: hash && signature && chain, checks: { hash, signature, chain } };
  }

  return { append, get, list, verify };
}

export type RecordService = ReturnType<typeof createRecordService>;
