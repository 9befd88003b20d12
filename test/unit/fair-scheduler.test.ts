import { FairScheduler, type Admission, type FairSchedulerOptions } from '../../src/lib/fair-scheduler.js';

/**
 * The scheduler with the event loop's passes and the clock in the test's hands: `pass()` runs the
 * turns the scheduler asked for (one start each), `clock.ms` is the time.
 */
function scheduler(options: Omit<FairSchedulerOptions, 'defer' | 'now' | 'later'>) {
  const turns: (() => void)[] = [];
  const timers: { at: number; turn: () => void }[] = [];
  const clock = { ms: 0 };
  const fair = new FairScheduler({
    ...options,
    defer: (turn) => turns.push(turn),
    later: (turn, ms) => timers.push({ at: clock.ms + ms, turn }),
    now: () => clock.ms,
  });
  const requests: { tenant: string; admission?: Admission }[] = [];
  return {
    fair,
    clock,
    /** A request of `tenant` asks for its turn. */
    ask(tenant: string) {
      const request: { tenant: string; admission?: Admission } = { tenant };
      requests.push(request);
      void fair.admit(tenant).then((admission) => (request.admission = admission));
      return request;
    },
    /** One pass of the event loop, and the promise callbacks it resolved. */
    async pass() {
      const due = turns.splice(0);
      for (const turn of due) turn();
      await new Promise((resolve) => setImmediate(resolve));
    },
    /** `ms` pass on the clock: the timers due run, then a pass of the event loop. */
    async advance(ms: number) {
      clock.ms += ms;
      for (const timer of timers.filter((t) => t.at <= clock.ms)) {
        timers.splice(timers.indexOf(timer), 1);
        timer.turn();
      }
      await this.pass();
    },
    /** Timers the scheduler has asked for and that have not run. */
    pendingTimers: () => timers.length,
    async passes(n: number) {
      for (let i = 0; i < n; i++) await this.pass();
    },
    /** A request of `tenant` that came and went: the tenant counts as active for the window. */
    async seen(tenant: string) {
      const request = this.ask(tenant);
      await this.pass();
      this.done(request);
    },
    /** Which tenants' requests started, in the order they asked. */
    started: () =>
      requests
        .filter((r) => r.admission?.admitted)
        .map((r) => r.tenant)
        .join(''),
    done(request: { admission?: Admission }) {
      if (!request.admission?.admitted) throw new Error('not started');
      request.admission.release();
    },
  };
}

const options = { capacity: 4, perTenant: 3, maxQueuedPerTenant: 100, activeWindowMs: 1000 };

test('alone with nobody waiting, a request starts at once: there is nobody to be fair to', async () => {
  const s = scheduler(options);
  s.ask('a');
  s.ask('a');
  await new Promise((resolve) => setImmediate(resolve));
  expect(s.started()).toBe('aa');
});

test('alone, a tenant whose requests wait for its limit starts all that fit in one pass', async () => {
  const s = scheduler(options);
  const a = Array.from({ length: 6 }, () => s.ask('a'));
  await new Promise((resolve) => setImmediate(resolve));
  expect(s.fair.load).toEqual({ running: 3, waiting: 3 });
  s.done(a[0]);
  s.done(a[1]);
  await s.pass();
  expect(s.fair.load).toEqual({ running: 3, waiting: 1 });
});

test('while another tenant is active, nothing starts before a pass of the event loop, then one request a pass', async () => {
  const s = scheduler(options);
  await s.seen('z');
  s.ask('a');
  s.ask('a');
  await new Promise((resolve) => setImmediate(resolve));
  expect(s.started()).toBe('z');
  await s.pass();
  expect(s.started()).toBe('za');
  await s.pass();
  expect(s.started()).toBe('zaa');
});

test('a tenant alone runs up to its own limit; the rest wait in order', async () => {
  const s = scheduler(options);
  const a = Array.from({ length: 5 }, () => s.ask('a'));
  await s.passes(10);
  expect(s.started()).toBe('aaa');
  expect(s.fair.load).toEqual({ running: 3, waiting: 2 });
  s.done(a[1]);
  await s.passes(2);
  expect(a.map((r) => Boolean(r.admission?.admitted))).toEqual([true, true, true, true, false]);
});

test('a tenant with nothing running goes before a busy one, whose share shrinks while the other is active', async () => {
  const s = scheduler({ ...options, perTenant: 10 });
  const a = Array.from({ length: 8 }, () => s.ask('a'));
  await s.passes(8);
  // Alone, a runs as many as its own limit allows.
  expect(s.fair.load).toEqual({ running: 8, waiting: 0 });
  const b = s.ask('b');
  const more = Array.from({ length: 4 }, () => s.ask('a'));
  await s.pass();
  // b has nothing running: its turn comes first, and a's waiting ones do not start over a's share (4 / 2).
  expect(b.admission?.admitted).toBe(true);
  await s.passes(3);
  expect(more.every((r) => !r.admission)).toBe(true);
  for (const request of a.slice(0, 6)) s.done(request);
  await s.passes(3);
  // a is down to 2 running: its share is 2, nothing more starts.
  expect(more.filter((r) => r.admission?.admitted)).toHaveLength(0);
  s.done(a[6]);
  await s.passes(3);
  expect(more.filter((r) => r.admission?.admitted)).toHaveLength(1);
});

test('waiting tenants take turns: the one with fewer running first', async () => {
  const s = scheduler({ ...options, capacity: 2, perTenant: 3 });
  await s.seen('z');
  const a = Array.from({ length: 4 }, () => s.ask('a'));
  const b = Array.from({ length: 4 }, () => s.ask('b'));
  await s.passes(1);
  expect(s.started()).toBe('za');
  // b has none running: b next, then a and b alternate up to their shares (at least 2 each).
  await s.passes(1);
  expect(s.started()).toBe('zab');
  await s.passes(6);
  expect(s.started()).toBe('zaabb');
  s.done(a[0]);
  await s.passes(2);
  expect(s.started()).toBe('zaaabb');
  void b;
});

test('on a tie the tenant whose last start is the oldest goes first, however long the other has waited', async () => {
  const s = scheduler(options);
  await s.seen('z');
  const a = Array.from({ length: 4 }, () => s.ask('a'));
  await s.pass();
  // Requests that end within their pass (a database in the same thread): a has nothing running again.
  s.done(a[0]);
  const b = s.ask('b');
  await s.pass();
  expect(b.admission?.admitted).toBe(true);
  expect(s.started()).toBe('zab');
});

test('a tenant seen within the window keeps the busy one at its share; once the window passed, the busy one grows back', async () => {
  const s = scheduler({ ...options, capacity: 4, perTenant: 10 });
  const b = s.ask('b');
  await s.pass();
  s.done(b);
  Array.from({ length: 6 }, () => s.ask('a'));
  await s.passes(8);
  // b ended its request, but is still active: a's share is 4 / 2.
  expect(s.fair.load.running).toBe(2);
  s.clock.ms += 1001;
  s.ask('a');
  await s.passes(8);
  expect(s.fair.load.running).toBe(7);
});

test('past its waiting limit a tenant is refused with what it has running and waiting; others are not', async () => {
  const s = scheduler({ ...options, perTenant: 1, maxQueuedPerTenant: 2 });
  s.ask('a');
  await s.pass();
  s.ask('a');
  s.ask('a');
  await s.passes(3);
  expect(await s.fair.admit('a')).toEqual({ admitted: false, running: 1, queued: 2 });
  const b = s.ask('b');
  await s.pass();
  expect(b.admission?.admitted).toBe(true);
});

test('the waiting limit counts what a tenant has in the process: a slot free between passes, or a request back from its tool, leaves room', async () => {
  const s = scheduler({ ...options, perTenant: 1, maxQueuedPerTenant: 2 });
  const first = s.ask('a');
  await s.pass();
  s.ask('a');
  s.ask('a');
  await s.pass();
  // Its running request ends: two wait for the next pass, and one more fits (three in all).
  s.done(first);
  expect(s.fair.load).toEqual({ running: 0, waiting: 2 });
  const third = s.ask('a');
  expect(await s.fair.admit('a')).toEqual({ admitted: false, running: 0, queued: 3 });
  await s.passes(3);
  expect(third.admission).toBeUndefined();

  // One running gives its turn back for a tool and comes back at once: it waits beside one new
  // request, so a second new one still fits, and a third is refused.
  const t = scheduler({ ...options, perTenant: 1, maxQueuedPerTenant: 2 });
  const running = t.ask('a');
  await t.pass();
  t.ask('a');
  await t.pass();
  t.done(running);
  void t.fair.admit('a', true);
  expect(t.fair.load).toEqual({ running: 0, waiting: 2 });
  t.ask('a');
  expect(await t.fair.admit('a')).toEqual({ admitted: false, running: 0, queued: 3 });
});

test('a request resuming after a wait outside is never refused, even past the waiting limit', async () => {
  const s = scheduler({ ...options, perTenant: 1, maxQueuedPerTenant: 1 });
  s.ask('a');
  await s.pass();
  s.ask('a');
  expect(await s.fair.admit('a')).toMatchObject({ admitted: false });
  let resumed: Admission | undefined;
  void s.fair.admit('a', true).then((admission) => (resumed = admission));
  await s.passes(3);
  expect(resumed).toBeUndefined();
  expect(s.fair.load).toEqual({ running: 1, waiting: 2 });
});

test('with several tenants active, each keeps at least two running: one request held up cannot hold up its others', async () => {
  const s = scheduler({ ...options, capacity: 2, perTenant: 10 });
  await s.seen('z');
  const requests = ['a', 'a', 'a', 'b', 'c', 'd'].map((tenant) => s.ask(tenant));
  await s.passes(10);
  expect(requests.filter((r) => r.tenant === 'a' && r.admission?.admitted)).toHaveLength(2);
});

test('releasing twice frees one slot', async () => {
  const s = scheduler({ ...options, perTenant: 1 });
  const a = Array.from({ length: 3 }, () => s.ask('a'));
  await s.pass();
  s.done(a[0]);
  s.done(a[0]);
  await s.passes(3);
  expect(s.fair.load).toEqual({ running: 1, waiting: 1 });
});

describe('anticipation: an org that sends one request at a time', () => {
  const anticipating = { ...options, perTenant: 10, anticipationMs: 1, anticipationLimit: 3 };

  /** b alone with one request running, and a with three asking: a's first starts. */
  async function steadyAndBusy() {
    const s = scheduler(anticipating);
    const b = s.ask('b');
    await s.pass();
    const a = Array.from({ length: 3 }, () => s.ask('a'));
    await s.pass();
    expect(s.started()).toBe('ba');
    return { s, b, a };
  }

  test('after its answer, busy tenants wait the window for its next request, which starts first', async () => {
    const { s, b } = await steadyAndBusy();
    s.done(b);
    await s.passes(3);
    // a has more waiting, but is held for b's next request.
    expect(s.started()).toBe('ba');
    s.ask('b');
    await s.pass();
    expect(s.started()).toBe('bab');
    // Once the window has passed, the timer the scheduler asked for lets a's next start.
    expect(s.pendingTimers()).toBe(1);
    await s.advance(1);
    expect(s.started()).toBe('baab');
  });

  test('when the steady tenant does not come back, the busy one starts once the window has passed', async () => {
    const { s, b } = await steadyAndBusy();
    s.done(b);
    await s.pass();
    await s.advance(0.5);
    expect(s.started()).toBe('ba');
    await s.advance(0.5);
    expect(s.started()).toBe('baa');
  });

  test('a busy tenant starts in at least one of every three windows in a row, however steady the other', async () => {
    const { s, b } = await steadyAndBusy();
    let current = b;
    const windows: string[] = [];
    for (let i = 0; i < 3; i++) {
      s.done(current);
      current = s.ask('b');
      await s.pass();
      windows.push(s.started());
    }
    // Held in the first two windows: b's next starts each time, and nothing else.
    expect(windows).toEqual(['bab', 'babb', 'babbb']);
    // In the third, still within it (the clock has not moved), a's next starts on the next pass.
    await s.pass();
    expect(s.started()).toBe('baabbb');
  });

  test('a tenant with others running or waiting opens no window, nor does an answer when nobody waits', async () => {
    const s = scheduler(anticipating);
    const c = [s.ask('c'), s.ask('c')];
    await s.pass();
    const a = Array.from({ length: 3 }, () => s.ask('a'));
    await s.pass();
    expect(s.started()).toBe('cca');
    // c still has one running: its answer is not a steady tenant's, and a is not held.
    s.done(c[0]);
    await s.pass();
    expect(s.started()).toBe('ccaa');
    // Nobody waiting when b is answered: nothing to hold, no timer.
    const quiet = scheduler(anticipating);
    const b = quiet.ask('b');
    await quiet.pass();
    quiet.done(b);
    await quiet.pass();
    expect(quiet.pendingTimers()).toBe(0);
    void a;
  });

  test('two busy tenants never hold each other, and a tenant alone is never held', async () => {
    const s = scheduler(anticipating);
    const a = Array.from({ length: 3 }, () => s.ask('a'));
    const d = Array.from({ length: 3 }, () => s.ask('d'));
    await s.passes(4);
    // a was alone at first: all three started; d keeps its share of two, its third waits.
    expect(s.fair.load).toEqual({ running: 5, waiting: 1 });
    s.done(a[0]);
    s.done(d[0]);
    await s.passes(2);
    expect(s.fair.load).toEqual({ running: 4, waiting: 0 });
    expect(s.pendingTimers()).toBe(0);
  });

  test('without anticipationMs nothing is held', async () => {
    const s = scheduler({ ...options, perTenant: 10 });
    const b = s.ask('b');
    await s.pass();
    Array.from({ length: 3 }, () => s.ask('a'));
    await s.pass();
    s.done(b);
    await s.pass();
    expect(s.started()).toBe('baa');
  });
});
