import type { SqlConnection } from '../../db/sql.js';
import type { HistoryFact } from '../policy/policy-condition.js';
import { historyAfter, KEPT_SECONDS, MAX_HISTORY_ENTRIES, type NumberedFact } from './agent-history.store.js';

/**
 * An agent's history as its decisions read it (docs/decisions/0086-policy-history-and-labels.md),
 * kept in the process for the agents it serves most recently: each read asks the database only for
 * the entries after the newest one held. Their order (`seq`) is the order the agent's lock
 * serialized them in, and an entry commits before the lock is released, so whatever a read finds
 * after the newest held entry is everything there is after it: no later read can turn up an
 * entry before it. A read of 1,000 entries per decision was a query the size of the window
 * (≈29 ms on the embedded database, holding its one connection, with the agent's lock); after the
 * first, it is the entries written since, usually one.
 */

/** How many agents' histories a process keeps (each at most MAX_HISTORY_ENTRIES entries). */
const KEPT_AGENTS = 128;

interface Kept {
  /** The newest entry's place in the agent's order; every entry up to it is held (within a day and the cap). */
  seq: number;
  entries: NumberedFact[];
}

export function createHistoryReader({ keptAgents = KEPT_AGENTS }: { keptAgents?: number } = {}) {
  // Oldest use first: a Map keeps insertion order, and a read puts its agent last.
  const kept = new Map<string, Kept>();

  /** The agent's entries since `since`, oldest first, the newest MAX_HISTORY_ENTRIES; `now` the request's time. */
  async function since(
    conn: SqlConnection,
    orgId: string,
    svcId: string,
    from: Date,
    now: number,
  ): Promise<HistoryFact[]> {
    const key = `${orgId}/${svcId}`;
    const horizon = now - KEPT_SECONDS * 1000;
    const held = kept.get(key);
    const newer = await historyAfter(conn, orgId, svcId, held?.seq ?? 0, new Date(horizon));
    // Another read of this agent may have kept newer entries meanwhile: both hold all there is
    // up to their newest, so what this one found after that is added.
    const base = kept.get(key) ?? held;
    const baseSeq = base?.seq ?? 0;
    const merged = [...(base?.entries ?? []), ...newer.filter((entry) => entry.seq > baseSeq)];
    const first = merged.findIndex((entry) => entry.fact.at.getTime() >= horizon);
    const entries = (first < 0 ? [] : merged.slice(first)).slice(-MAX_HISTORY_ENTRIES);
    kept.delete(key);
    kept.set(key, { seq: Math.max(baseSeq, newer.at(-1)?.seq ?? 0), entries });
    if (kept.size > keptAgents) kept.delete(kept.keys().next().value!);
    const fromMs = from.getTime();
    return entries.filter((entry) => entry.fact.at.getTime() >= fromMs).map((entry) => entry.fact);
  }

  return { since };
}

export type HistoryReader = ReturnType<typeof createHistoryReader>;
