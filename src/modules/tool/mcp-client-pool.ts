/**
 * A bounded pool of clients reused across calls, least recently used first out
 * (docs/decisions/0049-mcp-upstream-pool.md). Each client serves one key; an owner (a tool) has at
 * most one key at a time, so a client made with a tool's old settings is retired when its new ones
 * are first used. A client leaves the pool when it is evicted, idle for `idleMs`, dropped by a call
 * or the pool closes; it is closed once no call uses it any more.
 */

export interface Closable {
  close(): Promise<void>;
}

export interface PoolOptions {
  /** Clients kept at most; 0 keeps none (every call opens its own and closes it). */
  maxClients: number;
  idleMs: number;
}

/** One call's use of a client. */
export interface Lease<C extends Closable> {
  readonly client: C;
  /** The client was opened for this call (not found in the pool). */
  readonly opened: boolean;
  /** Ends the use; `keep` false takes the client out of the pool, so that the next call opens another. */
  release(keep: boolean): void;
}

interface Entry<C extends Closable> {
  key: string;
  owner: string;
  client: C;
  calls: number;
  pooled: boolean;
  idleTimer?: NodeJS.Timeout;
}

export function createClientPool<C extends Closable>({ maxClients, idleMs }: PoolOptions) {
  /** In order of last use, least recent first (a Map keeps insertion order). */
  const entries = new Map<string, Entry<C>>();
  const keyOfOwner = new Map<string, string>();
  let closed = false;

  /** Out of the pool; closed now when idle, else when its last call ends. */
  function retire(entry: Entry<C>): Promise<void> | undefined {
    if (entry.pooled) {
      entry.pooled = false;
      entries.delete(entry.key);
      if (keyOfOwner.get(entry.owner) === entry.key) keyOfOwner.delete(entry.owner);
    }
    clearTimeout(entry.idleTimer);
    return entry.calls === 0 ? entry.client.close().catch(() => undefined) : undefined;
  }

  /** A new client's entry: into the pool when it is to be kept, retiring its owner's previous client and the least recently used. */
  function enter(key: string, owner: string, client: C, pooled: boolean): Entry<C> {
    const entry: Entry<C> = { key, owner, client, calls: 0, pooled: pooled && !closed && maxClients > 0 };
    if (!entry.pooled) return entry;
    const previous = keyOfOwner.get(owner);
    if (previous !== undefined) retire(entries.get(previous)!);
    while (entries.size >= maxClients) retire(entries.values().next().value!);
    entries.set(key, entry);
    keyOfOwner.set(owner, key);
    return entry;
  }

  function release(entry: Entry<C>, keep: boolean) {
    entry.calls--;
    if (!keep || !entry.pooled) {
      if (!keep || entry.calls === 0) void retire(entry);
      return;
    }
    if (entry.calls > 0) return;
    entry.idleTimer = setTimeout(() => void retire(entry), idleMs);
    entry.idleTimer.unref();
  }

  return {
    /**
     * The pooled client of `key`, or a new one from `open`, which the pool keeps when `admit` says
     * so (and it is neither off nor closed); one it does not keep closes after the call.
     */
    lease(key: string, owner: string, open: () => C, admit: boolean): Lease<C> {
      let entry = entries.get(key);
      const opened = entry === undefined;
      if (entry) {
        // Most recently used: to the end of the order.
        entries.delete(key);
        entries.set(key, entry);
        clearTimeout(entry.idleTimer);
      } else {
        entry = enter(key, owner, open(), admit);
      }
      entry.calls++;
      const leased = entry;
      let released = false;
      return {
        client: leased.client,
        opened,
        release(keep: boolean) {
          if (released) return;
          released = true;
          release(leased, keep);
        },
      };
    },
    /** Clients in the pool now. */
    get size() {
      return entries.size;
    },
    /** Closes the idle clients now and the others as their calls end; later calls get clients of their own, closed after them. */
    async close(): Promise<void> {
      closed = true;
      await Promise.all([...entries.values()].map(retire));
    },
  };
}

export type ClientPool<C extends Closable> = ReturnType<typeof createClientPool<C>>;
