/**
 * Fair sharing of a process's work between tenants (orgs). One event loop serves every org, and it
 * takes requests in the order their sockets became readable: while one org keeps 16 requests
 * coming, another org's request is served after the 16 ahead of it. Worse, a request whose database
 * answers at once (embedded PGlite runs in the same thread) runs from start to end without giving
 * the loop back, so nothing else can interleave with it.
 *
 * So a request does not start its work when it arrives: it asks for a turn, and turns are handed
 * out one per pass of the event loop (`defer`: setImmediate in the service), after the loop has
 * read every request that arrived meanwhile. Each pass starts the waiting request of the tenant
 * with the fewest requests running (ties: the tenant whose last start is the oldest, so waiting
 * tenants take turns), if that tenant
 *
 * - has nothing running: a quiet org never waits behind a busy one; or
 * - is alone (no other tenant active within `activeWindowMs`) and runs fewer than `perTenant`:
 *   a single org keeps the concurrency its throughput needs; or
 * - runs fewer than its share of `capacity` among the active tenants (at least MIN_SHARE): while
 *   others are active, a busy org's requests in progress, which every other request interleaves
 *   with, stay few.
 *
 * Turns alone leave a tenant that sends one request at a time (an agent waiting for each answer)
 * about half the loop against a busy one, so its latency doubles: the busy tenant's request starts
 * in the gap between the answer and the next request, and that next request then waits for it.
 * So the scheduler anticipates (as disk schedulers do for a process reading one block at a time):
 * when a request is answered whose tenant has nothing else running or waiting, while others wait,
 * the busy tenants' requests are held for `anticipationMs`, in which the answered tenant's next
 * request usually arrives and starts first. A busy tenant starts in at least one of every
 * `anticipationLimit` windows in a row, so it keeps a share however steady the other is.
 *
 * A tenant with `perTenant + maxQueuedPerTenant` requests running and waiting (those resuming after
 * a wait outside among them) is refused more: the edge answers 429. Counting what it has in the
 * process, rather than its waiting ones alone, keeps the refusal to what the answer says the limit
 * is: a request back from its tool waits beside new ones, and one refused with its slot free between
 * passes was refused below the limit.
 * Nothing here knows of HTTP: admission is a promise, and release a function to call once.
 */

/**
 * The least a tenant may run while others are active: with one, a request of it held up by a lock
 * or a slow statement would hold up all its others.
 */
export const MIN_SHARE = 2;

export interface FairSchedulerOptions {
  /** Requests running at once, shared out among the tenants active together. */
  capacity: number;
  /** Requests of one tenant running at once, when it is alone. */
  perTenant: number;
  /** Requests of one tenant waiting for their turn beyond `perTenant` running; more are refused. */
  maxQueuedPerTenant: number;
  /** How long after its last request a tenant still counts as active (its share stays reserved). */
  activeWindowMs: number;
  /**
   * How long, after the answer to a tenant with nothing else running or waiting, the requests of
   * busy tenants (more than one running or waiting) are held for that tenant's next; 0: never.
   */
  anticipationMs?: number;
  /** A busy tenant starts in at least one of every this many windows in a row (held in the others). */
  anticipationLimit?: number;
  /** Runs `turn` on the next pass of the event loop (setImmediate); tests pass turns by hand. */
  defer?: (turn: () => void) => void;
  /** Runs `turn` after `ms` milliseconds (an unref'd setTimeout); tests pass time by hand. */
  later?: (turn: () => void, ms: number) => void;
  /** Milliseconds of a monotonic clock (performance.now); tests move it by hand. */
  now?: () => number;
}

export type Admission =
  | { admitted: true; release: () => void }
  /** The tenant already has `running` requests running and `queued` waiting: come back later. */
  | { admitted: false; running: number; queued: number };

interface Tenant {
  running: number;
  waiting: ((admission: Admission) => void)[];
  /** When a request of it last began or ended. */
  lastSeen: number;
  /** The scheduler's count of starts when one of its requests last started (0: never). */
  lastStart: number;
  /** Anticipation windows opened while it waited, since its last start. */
  heldWindows: number;
}

export class FairScheduler {
  private readonly tenants = new Map<string, Tenant>();
  private running = 0;
  /** Tenants with requests waiting. */
  private readonly turns: string[] = [];
  private starts = 0;
  private turnPending = false;
  /** Until when busy tenants are held (the clock's milliseconds). */
  private anticipateUntil = -Infinity;
  private wakePending = false;
  private readonly defer: (turn: () => void) => void;
  private readonly later: (turn: () => void, ms: number) => void;
  private readonly now: () => number;

  constructor(private readonly options: FairSchedulerOptions) {
    this.defer = options.defer ?? ((turn) => setImmediate(turn));
    this.later = options.later ?? ((turn, ms) => setTimeout(turn, ms).unref());
    this.now = options.now ?? (() => performance.now());
  }

  /** Requests running and waiting, all tenants together (for metrics and tests). */
  get load(): { running: number; waiting: number } {
    let waiting = 0;
    for (const tenant of this.tenants.values()) waiting += tenant.waiting.length;
    return { running: this.running, waiting };
  }

  /**
   * Waits for a turn of the tenant. `resuming`: the request had a turn and gave it back while it
   * waited for something outside (a tool); it is never refused, since its work has begun.
   */
  admit(tenantId: string, resuming = false): Promise<Admission> {
    const tenant = this.tenantOf(tenantId);
    tenant.lastSeen = this.now();
    if (
      !resuming &&
      tenant.running + tenant.waiting.length >= this.options.perTenant + this.options.maxQueuedPerTenant
    ) {
      return Promise.resolve({ admitted: false, running: tenant.running, queued: tenant.waiting.length });
    }
    // Alone, with nobody waiting, there is nobody to be fair to: a pass of the loop per start
    // would only cap a single org's throughput (it cost evaluate about a tenth of its rate).
    if (!this.turns.length && tenant.running < this.options.perTenant && this.activeTenants() <= 1) {
      return Promise.resolve(this.started(tenant));
    }
    if (!tenant.waiting.length) this.turns.push(tenantId);
    const admitted = new Promise<Admission>((resolve) => tenant.waiting.push(resolve));
    this.scheduleTurn();
    return admitted;
  }

  private tenantOf(tenantId: string): Tenant {
    let tenant = this.tenants.get(tenantId);
    if (!tenant) {
      tenant = { running: 0, waiting: [], lastSeen: this.now(), lastStart: 0, heldWindows: 0 };
      this.tenants.set(tenantId, tenant);
    }
    return tenant;
  }

  /** Tenants with requests running or waiting, or seen within the window; forgets the others. */
  private activeTenants(): number {
    const since = this.now() - this.options.activeWindowMs;
    let active = 0;
    for (const [id, tenant] of this.tenants) {
      if (tenant.running || tenant.waiting.length || tenant.lastSeen >= since) active++;
      else this.tenants.delete(id);
    }
    return active;
  }

  private limitOf(tenant: Tenant, active: number): number {
    if (tenant.running === 0) return 1;
    if (active <= 1) return this.options.perTenant;
    return Math.min(this.options.perTenant, Math.max(MIN_SHARE, Math.floor(this.options.capacity / active)));
  }

  private scheduleTurn(): void {
    if (this.turnPending) return;
    this.turnPending = true;
    this.defer(() => {
      this.turnPending = false;
      this.turn();
    });
  }

  /** Whether `tenant` waits out the anticipation window: it is busy, and this is not its limit-th in a row. */
  private held(tenant: Tenant): boolean {
    return (
      this.now() < this.anticipateUntil &&
      tenant.running + tenant.waiting.length > 1 &&
      tenant.heldWindows < (this.options.anticipationLimit ?? Infinity)
    );
  }

  /** A pass once the anticipation window has passed (one pending at a time). */
  private wakeAfterWindow(): void {
    if (this.wakePending) return;
    this.wakePending = true;
    this.later(
      () => {
        this.wakePending = false;
        this.scheduleTurn();
      },
      Math.max(0, this.anticipateUntil - this.now()),
    );
  }

  /** One pass of the loop: starts one waiting request, the fairest, and asks for another pass if more wait. */
  private turn(): void {
    const active = this.activeTenants();
    let chosen = -1;
    let best: Tenant | undefined;
    let anyHeld = false;
    for (let i = 0; i < this.turns.length; i++) {
      const tenant = this.tenants.get(this.turns[i])!;
      if (tenant.running >= this.limitOf(tenant, active)) continue;
      if (this.held(tenant)) {
        anyHeld = true;
        continue;
      }
      if (
        !best ||
        tenant.running < best.running ||
        (tenant.running === best.running && tenant.lastStart < best.lastStart)
      ) {
        chosen = i;
        best = tenant;
      }
    }
    if (!best) {
      if (anyHeld) this.wakeAfterWindow();
      return;
    }
    // One start a pass keeps a run of one org's requests from going ahead of another's. Alone, an
    // org starts all its limit allows: a start a pass capped its throughput at the loop's pass rate.
    const starts = active <= 1 ? this.options.perTenant : 1;
    for (let n = 0; n < starts && best.waiting.length && best.running < this.limitOf(best, active); n++) {
      best.waiting.shift()!(this.started(best));
    }
    if (!best.waiting.length) this.turns.splice(chosen, 1);
    if (this.turns.length) this.scheduleTurn();
  }

  /** The answered tenant has nothing else running or waiting, and others wait: hold the busy ones a moment. */
  private anticipate(): void {
    const window = this.options.anticipationMs ?? 0;
    if (window <= 0) return;
    this.anticipateUntil = this.now() + window;
    for (const id of this.turns) this.tenants.get(id)!.heldWindows++;
  }

  private started(tenant: Tenant): Admission {
    tenant.heldWindows = 0;
    tenant.lastStart = ++this.starts;
    tenant.running++;
    this.running++;
    let released = false;
    return {
      admitted: true,
      release: () => {
        if (released) return;
        released = true;
        tenant.running--;
        this.running--;
        tenant.lastSeen = this.now();
        if (!this.turns.length) return;
        if (tenant.running === 0 && !tenant.waiting.length) this.anticipate();
        this.scheduleTurn();
      },
    };
  }
}
