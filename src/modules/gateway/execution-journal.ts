import { randomInt } from 'node:crypto';
import { isDatabaseUnavailable } from '../../db/unavailable.js';
import type { Deps } from '../../deps.js';
import type { NewRecord, RecordService } from '../record/record.service.js';
import {
  adoptExecutions,
  claimOwner,
  executionsOf,
  forgetExecutions,
  renewLease,
  type JournalEntry,
} from './gateway.store.js';

/**
 * The write-ahead journal that makes "every tool invocation has a record" hold across crashes and
 * database outages.
 *
 *   commit   the budget statement writes a journal entry for the allowed action (gateway.store.ts)
 *   call     the tool runs
 *   record   the interaction's record is appended; then the entry is forgotten (in batches)
 *
 * Each process owns its entries through an `owner` id it holds a lease on (a row renewed every
 * third of `executionLeaseSeconds`): leases need nothing that outlives a transaction, so they work
 * behind a pooler in transaction mode and survive any number of dropped connections. A process
 * that dies between commit and record leaves its entries behind; once its lease has run out,
 * another process's recovery sweep adopts them. Entries without a record then get one, marked
 * EXECUTION_INTERRUPTED (allowed and executed, outcome unknown: the tool may have run); entries
 * whose record was written are just forgotten. A process also settles its own entries whose
 * request ended without a record.
 *
 * A live process must never be taken for a dead one, or a record would claim "interrupted" for a
 * call still running. Two rules keep leases honest through a database outage, when nobody can
 * renew: a process adopts others' entries only after its own renewals have succeeded for a whole
 * lease (everyone alive has renewed by then), and the commit refuses an owner whose lease row is
 * gone, so a process declared gone claims a new owner id instead of journaling under the old one.
 *
 * When the tool ran but its record cannot be written because the database is unreachable, the
 * outcome is kept in memory and appended once the database is back ("deferred"), so the record
 * says what happened rather than "interrupted".
 */

/**
 * The advisory-lock class under which earlier gateway versions held their owner id while they
 * lived: their entries are adopted only when that lock is free.
 */
const LEGACY_OWNER_LOCK_CLASS = 0x61677778;
const FORGET_DELAY_MS = 100;
const DEFERRED_RETRY_FIRST_MS = 500;
const DEFERRED_RETRY_MAX_MS = 10_000;

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
    originalResultHash: null,
    redactions: [],
    approvalId,
  };
}

interface DeferredRecord {
  record: NewRecord;
  storeParams: boolean;
}

export function createExecutionJournal({ db, logger, env }: Deps, records: RecordService) {
  const leaseSeconds = env.executionLeaseSeconds;
  let owner: Promise<number> | undefined;
  /** When (performance.now()) the current run of successful lease writes began; undefined after a failed one. */
  let healthySince: number | undefined;
  /** Entries of requests still running here: never settled by this process's own sweep. */
  const running = new Set<string>();
  /** Executions whose tool ran and whose record waits for the database. */
  const deferred = new Map<string, DeferredRecord>();
  let deferredRetry: NodeJS.Timeout | undefined;
  /**
   * An append of the deferred records is under way. One at a time: a second run started by a
   * later `defer` would append the same waiting records again, and the second append of each
   * fails on the record's id (its first committed meanwhile).
   */
  let appendingDeferred = false;
  let deferredDelay = DEFERRED_RETRY_FIRST_MS;
  let recorded: string[] = [];
  let forgetTimer: NodeJS.Timeout | undefined;
  let sweep: NodeJS.Timeout | undefined;
  let renewal: NodeJS.Timeout | undefined;
  let recovering: Promise<number> | undefined;
  let stopped = false;

  /** A lease write succeeded or failed: how long the database has answered without a break. */
  function leaseWrite<T>(write: Promise<T>): Promise<T> {
    return write.then(
      (value) => {
        healthySince ??= performance.now();
        return value;
      },
      (error: unknown) => {
        healthySince = undefined;
        throw error;
      },
    );
  }

  async function claim(): Promise<number> {
    for (;;) {
      const candidate = randomInt(1, 2 ** 31 - 1);
      if (await leaseWrite(claimOwner(db.sql, candidate, leaseSeconds))) return candidate;
    }
  }

  /** This process's owner id, claimed on first use (and again after its lease was lost). */
  function ownerId(): Promise<number> {
    owner ??= claim().catch((error) => {
      owner = undefined;
      throw error;
    });
    return owner;
  }

  /** The commit found no lease for `lostOwner`: the next commit claims a new owner id. */
  async function leaseLost(lostOwner: number): Promise<void> {
    if (owner && (await owner.catch(() => undefined)) === lostOwner) {
      owner = undefined;
      logger.warn(
        { owner: lostOwner },
        'the execution journal lease ran out (the database was unreachable for longer than EXECUTION_LEASE_SECONDS); claiming a new one',
      );
    }
  }

  async function renew(): Promise<void> {
    if (!owner) return;
    const current = await owner;
    if (!(await leaseWrite(renewLease(db.sql, current, leaseSeconds)))) await leaseLost(current);
  }

  /**
   * One execute under the entry `id`: the entry belongs to a running request (never settled by the
   * sweep) from before its commit until `work` is done, however it ends. `work` answers whether the
   * record was appended; a throw means it was not, and recovery records the entry, if one was
   * written, as interrupted. A deferred record (`defer`) keeps the entry running until appended.
   */
  async function run<T>(id: string, work: () => Promise<{ value: T; hasRecord: boolean }>): Promise<T> {
    running.add(id);
    let hasRecord = false;
    try {
      const done = await work();
      hasRecord = done.hasRecord;
      return done.value;
    } finally {
      if (!deferred.has(id)) end(id, hasRecord);
    }
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

  /**
   * The tool ran and its record could not be appended because the database is unreachable: the
   * record is appended once it is back. The entry counts as running meanwhile, so no sweep records
   * it as interrupted; if this process stops first, recovery does.
   */
  function defer(id: string, record: NewRecord, storeParams: boolean): void {
    deferred.set(id, { record, storeParams });
    scheduleDeferred();
  }

  function scheduleDeferred(): void {
    if (stopped || deferredRetry || appendingDeferred || !deferred.size) return;
    deferredRetry = setTimeout(() => {
      deferredRetry = undefined;
      void appendDeferred();
    }, deferredDelay);
    deferredRetry.unref();
  }

  /** Appends what waited for the database; a record that exists (its append committed, only the answer was lost) is done. */
  async function appendDeferred(): Promise<void> {
    appendingDeferred = true;
    const waiting = [...deferred];
    let unavailable = false;
    try {
      const existing = await records.existing(waiting.map(([id]) => id));
      const outcomes = await Promise.allSettled(
        waiting.map(([id, { record, storeParams }]) =>
          existing.has(id) ? undefined : records.append(id, record, storeParams),
        ),
      );
      for (const [i, outcome] of outcomes.entries()) {
        const [id] = waiting[i];
        if (outcome.status === 'rejected' && isDatabaseUnavailable(outcome.reason)) {
          unavailable = true;
          continue;
        }
        // Not the database's absence: recovery records it as interrupted (or finds its record).
        if (outcome.status === 'rejected')
          logger.error(
            { err: outcome.reason, interaction_id: id },
            'could not record an execution after the database came back',
          );
        deferred.delete(id);
        end(id, outcome.status === 'fulfilled');
      }
    } catch (error) {
      if (!isDatabaseUnavailable(error))
        logger.warn({ err: error }, 'could not look up executions whose record waits for the database');
      unavailable = true;
    }
    appendingDeferred = false;
    const written = waiting.length - deferred.size;
    if (written) logger.info({ records: written }, 'recorded executions whose record waited for the database');
    deferredDelay = unavailable ? Math.min(deferredDelay * 2, DEFERRED_RETRY_MAX_MS) : DEFERRED_RETRY_FIRST_MS;
    scheduleDeferred();
  }

  async function forgetRecorded(): Promise<void> {
    clearTimeout(forgetTimer);
    forgetTimer = undefined;
    const ids = recorded;
    recorded = [];
    if (!ids.length) return;
    // Left behind on failure: recovery finds their records and forgets them then.
    await forgetExecutions(db.sql, ids).catch((error) =>
      logger.warn({ err: error }, 'could not forget journaled executions'),
    );
  }

  /** Records what is missing for these entries and forgets them; answers how many records it wrote. */
  async function settle(entries: JournalEntry[]): Promise<number> {
    if (!entries.length) return 0;
    const withRecord = await records.existing(entries.map((e) => e.id));
    const missing = entries.filter((e) => !withRecord.has(e.id));
    const appended = await Promise.allSettled(
      missing.map((e) => records.append(e.id, interruptedRecord(e), e.params !== null)),
    );
    const failed = new Set(missing.filter((_, i) => appended[i].status === 'rejected').map((e) => e.id));
    for (const [i, outcome] of appended.entries()) {
      if (outcome.status === 'rejected')
        logger.error(
          { err: outcome.reason, interaction_id: missing[i].id },
          'could not record an interrupted execution',
        );
    }
    await forgetExecutions(
      db.sql,
      entries.filter((e) => !failed.has(e.id)).map((e) => e.id),
    );
    const written = missing.length - failed.size;
    if (written) logger.warn({ records: written }, 'recorded executions interrupted by a stopped gateway process');
    return written;
  }

  /**
   * Which other owners' entries this run may adopt: on a PGlite database at start every other
   * owner's (this process has the data directory to itself, so nobody else is alive); else those
   * whose lease ran out, once this process's own lease writes have succeeded for a whole lease.
   */
  function adoption(atStart: boolean): 'every_other' | 'expired' | null {
    if (atStart && db.kind === 'pglite') return 'every_other';
    if (healthySince !== undefined && performance.now() - healthySince >= leaseSeconds * 1000) return 'expired';
    return null;
  }

  async function recoverOnce(atStart: boolean): Promise<number> {
    const self = await ownerId();
    const adopt = adoption(atStart);
    if (adopt) await adoptExecutions(db.sql, self, adopt === 'every_other', LEGACY_OWNER_LOCK_CLASS);
    const orphans = (await executionsOf(db.sql, self)).filter((e) => !running.has(e.id) && !deferred.has(e.id));
    return settle(orphans);
  }

  /** Adopts the entries of stopped processes and settles them and this one's orphans; one run at a time. */
  function recover(atStart = false): Promise<number> {
    recovering ??= recoverOnce(atStart).finally(() => (recovering = undefined));
    return recovering;
  }

  return {
    ownerId,
    leaseLost,
    run,
    defer,
    recover,
    /** Claims the owner id, recovers once, then renews the lease and sweeps periodically. */
    async start(): Promise<void> {
      await recover(true);
      renewal = setInterval(
        () => {
          renew().catch((error) => logger.warn({ err: error }, 'could not renew the execution journal lease'));
        },
        (leaseSeconds * 1000) / 3,
      );
      renewal.unref();
      sweep = setInterval(() => {
        recover().catch((error) => logger.warn({ err: error }, 'execution recovery failed'));
      }, env.executionRecoverySeconds * 1000);
      sweep.unref();
    },
    async stop(): Promise<void> {
      stopped = true;
      clearInterval(sweep);
      clearInterval(renewal);
      clearTimeout(deferredRetry);
      await recovering?.catch(() => undefined);
      await forgetRecorded();
      // The lease is not given up: requests still draining may commit under it. It runs out.
      if (deferred.size)
        logger.warn(
          { records: deferred.size },
          'stopping with executions whose record waits for the database: recovery records them as interrupted',
        );
    },
  };
}

export type ExecutionJournal = ReturnType<typeof createExecutionJournal>;
