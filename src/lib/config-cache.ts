import type { SqlConnection, SqlDriver } from '../db/sql.js';
import { incrementConfigVersion, readConfigVersion } from './config-cache.store.js';

/**
 * In-process caches for what the gateway reads on every call (API keys, manifests, tools, org
 * settings). Every write of cached data bumps `config_versions` in its transaction (the owning
 * service calls bumpConfigVersion); each process polls that counter and drops its caches when it moved, and the writing process
 * drops them at once. A suspended manifest or a deleted key therefore stops working everywhere
 * within one poll interval, without a database read per request.
 */

const caches = new Set<ConfigCache>();

/** Drops every cache of this process (called by the writer, before its commit). */
export function configChangedLocally(): void {
  for (const cache of caches) cache.clear();
}

/** Bumps the shared version inside the writing transaction. */
export async function bumpConfigVersion(tx: {
  $executeRaw: (q: TemplateStringsArray) => Promise<number>;
}): Promise<void> {
  await incrementConfigVersion(tx);
  configChangedLocally();
}

export class ConfigCache {
  private readonly entries = new Map<string, Promise<unknown>>();
  private version: string | undefined;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly sql: SqlDriver | SqlConnection,
    private readonly pollMs = 250,
  ) {}

  start(): this {
    caches.add(this);
    this.timer = setInterval(() => void this.poll(), this.pollMs);
    this.timer.unref();
    return this;
  }

  stop(): void {
    caches.delete(this);
    clearInterval(this.timer);
  }

  clear(): void {
    this.entries.clear();
  }

  /** The cached value of `key`, loading it once; a failed load is not cached. */
  get<T>(key: string, load: () => Promise<T>): Promise<T> {
    let entry = this.entries.get(key) as Promise<T> | undefined;
    if (!entry) {
      entry = load();
      this.entries.set(key, entry);
      entry.catch(() => this.entries.delete(key));
    }
    return entry;
  }

  private async poll(): Promise<void> {
    try {
      const version = await readConfigVersion(this.sql);
      if (this.version !== undefined && version !== this.version) this.clear();
      this.version = version;
    } catch {
      // The database is away (shutdown, outage): nothing cached can be trusted.
      this.clear();
      this.version = undefined;
    }
  }
}
