import { randomBytes } from 'node:crypto';
import type { Prisma } from '../../generated/prisma/client.js';
import { currentRequest } from '../../http/request-state.js';
import { bumpConfigVersion } from '../../lib/config-cache.js';
import type { Actor, AuditEvent } from './audit-events.js';

type Tx = Prisma.TransactionClient;

/** Sortable by time, unique without coordination: `aud_` + ms timestamp + random. */
export function auditId(now = Date.now()): string {
  return `aud_${now.toString(36).padStart(9, '0')}${randomBytes(8).toString('hex')}`;
}

/**
 * Writes an audit entry with the transaction of the change it describes, so an entry exists
 * exactly when the change committed.
 */
export async function recordAudit(tx: Tx, orgId: string, actor: Actor, event: AuditEvent): Promise<void> {
  await tx.auditLog.create({
    data: {
      id: auditId(),
      orgId,
      actorType: actor.type,
      actorId: actor.id,
      actorLabel: actor.label,
      action: event.action,
      targetType: event.targetType,
      targetId: event.targetId,
      before: (event.before ?? undefined) as Prisma.InputJsonValue | undefined,
      after: (event.after ?? undefined) as Prisma.InputJsonValue | undefined,
      reason: event.reason,
      requestId: currentRequest()?.requestId,
    },
  });
  // Every audited write may change what gateways cache (keys, manifests, tools, settings).
  await bumpConfigVersion(tx);
}
