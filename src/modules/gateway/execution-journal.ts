import { randomInt } from 'node:crypto';
import type { Deps } from '../../deps.js';
import type { NewRecord, RecordService } from '../record/record.service.js';
import {
  executionsOf,
  forgetExecutions,
  otherOwners,
  ownerIsUnused,
  withOwnerLock,
  type JournalEntry,
} from './gateway.store.js';

/**
 * The write-ahead journal that makes "every tool invocation has a record" hold across crashes.
 *
 *   commit   the budget statement writes a journal entry for the allowed action (gateway.store.ts)
 *   call     the tool runs
 *   record   the interaction's record is appended; then the entry is forgotten (in batches)
 *
 * A process that dies between commit and record leaves its entries behind. Each process owns its
 * entries through an `owner` id whose advisory lock it holds on a connection of its own while it
 * lives (Database.holdProcessLock). Recovery, at start and every `executionRecoverySeconds`, takes
 * the lock of every other owner with entries: it is free only when that process is gone. Entries
 * without a record then get one, marked EXECUTION_INTERRUPTED (allowed and executed, outcome
 * unknown: the tool may have run); entries whose record was written are just forgotten. A
 * process also settles its own entries whose request ended without a record (the append failed).
 */

// The advisory-lock class of journal owners (the objid is the owner id); distinct from the single-key
// locks of the migrations and the signing keys.
const OWNER_LOCK_CLASS = 0x61677778;
const FORGET_DELAY_MS = 100;

export const INTERRUPTED_REASON = {
  code: 'EXECUTION_INTERRUPTED',
  message:
    'The gateway stopped after allowing this action and before recording its outcome; the tool may have run. Recorded on recovery.',
} as const;

/** The record of an execution whose outcome was lost. */
export function interruptedRecord({ id: _id, params, approvalId, ...subject }: JournalEntry): NewRecord {
  return {
    ...subject,
    params: params ?? undefined,
    decision: 'allow',
    executed: true,
    reasons: [{ ...INTERRUPTED_REASON }],
    resultHash: null,
    approvalId,
  };
}

export function createExecutionJournal({ db, logger, env }: Deps, records: RecordService) {
  let owner: Promise<number> | undefined;
  /** Entries of requests still running here: never settled by this process's own sweep. */
  const running = new Set<string>();
  let recorded: string[] = [];
  let forgetTimer: NodeJS.Timeout | undefined;
  let sweep: NodeJS.Timeout | undefined;
  let recovering: Promise<number> | undefined;
  let stopped = false;

  async function claimOwner(): Promise<number> {
    for (;;) {
      const candidate = randomInt(1, 2 ** 31 - 1);
      // An id that a dead process left entries under stays theirs until recovered.
      if ((await ownerIsUnused(db.sql, candidate)) && (await db.holdProcessLock(OWNER_LOCK_CLASS, candidate))) return candidate;
    }
  }

  /** This process's owner id, claimed on first use. */
  function ownerId(): Promise<number> {
    owner ??= claimOwner().catch((error) => {
      owner = undefined;
      throw error;
    });
    return owner;
  }

  /** Before the commit: the entry about to be written belongs to a running request. */
  function begin(id: string): void {
    running.add(id);
  }

  /** After the request: `hasRecord` when its record was appended (or nothing was journaled). */
  function end(id: string, hasRecord: boolean): void {
    running.delete(id);
    if (!hasRecord) return;
    recorded.push(id);
    // After stop the database may be closing: the entries stay, and the next recovery forgets them.
    if (stopped) return;
    forgetTimer ??= setTimeout(() => void forgetRecorded(), FORGET_DELAY_MS);
    forgetTimer.unref();
  }

  async function forgetRecorded(): Promise<void> {
    clearTimeout(forgetTimer);
    forgetTimer = undefined;
    const ids = recorded;
    recorded = [];
    if (!ids.length) return;
    // Left behind on failure: recovery finds their records and forgets them then.
    await forgetExecutions(db.sql, ids).catch((error) => logger.warn({ err: error }, 'could not forget journaled executions'));
  }

  /** Records what is missing for these entries and forgets them; answers how many records it wrote. */
  async function settle(entries: JournalEntry[]): Promise<number> {
    if (!entries.length) return 0;
    const withRecord = await records.existing(entries.map((e) => e.id));
    const missing = entries.filter((e) => !withRecord.has(e.id));
    const appended = await Promise.allSettled(missing.map((e) => records.append(e.id, interruptedRecord(e), e.params !== null)));
    const failed = new Set(missing.filter((_, i) => appended[i].status === 'rejected').map((e) => e.id));
    for (const [i, outcome] of appended.entries()) {
      if (outcome.status === 'rejected') logger.error({ err: outcome.reason, interaction_id: missing[i].id }, 'could not record an interrupted execution');
    }
    await forgetExecutions(db.sql, entries.filter((e) => !failed.has(e.id)).map((e) => e.id));
    const written = missing.length - failed.size;
    if (written) logger.warn({ records: written }, 'recorded executions interrupted by a stopped gateway process');
    return written;
  }

  async function recoverOnce(): Promise<number> {
    const self = await ownerId();
    let written = 0;
    for (const other of await otherOwners(db.sql, self)) {
      await withOwnerLock(db.sql, OWNER_LOCK_CLASS, other, async () => {
        written += await settle(await executionsOf(db.sql, other));
      });
    }
    const orphans = (await executionsOf(db.sql, self)).filter((e) => !running.has(e.id));
    return written + (await settle(orphans));
  }

  /** Settles the entries of stopped processes and this one's orphans; one run at a time. */
  function recover(): Promise<number> {
    recovering ??= recoverOnce().finally(() => (recovering = undefined));
    return recovering;
  }

  return {
    ownerId,
    begin,
    end,
    recover,
    /** Claims the owner id, recovers once, then sweeps periodically. */
    async start(): Promise<void> {
      await recover();
      sweep = setInterval(() => {
        recover().catch((error) => logger.warn({ err: error }, 'execution recovery failed'));
      }, env.executionRecoverySeconds * 1000);
      sweep.unref();
    },
    async stop(): Promise<void> {
      stopped = true;
      clearInterval(sweep);
      await recovering?.catch(() => undefined);
      await forgetRecorded();
    },
  };
}

export type ExecutionJournal = ReturnType<typeof createExecutionJournal>;
