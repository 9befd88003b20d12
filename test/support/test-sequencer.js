import Sequencer from '@jest/test-sequencer';

/**
 * Jest's order (failed first, then slowest first by the last run's times), with one change: the
 * suites that measure this process's live heap (`*-memory.test.ts`) start first, each on a fresh
 * worker. A worker keeps growing over the files it runs, and those suites force full garbage
 * collections, which cost in proportion to the heap: audit-export-memory took 37 s on a fresh
 * worker and 105–137 s after others.
 */
const measuresHeap = (test) => /-memory\.test\.ts$/.test(test.path);

export default class HeapSuitesFirst extends Sequencer.default {
  sort(tests) {
    const sorted = super.sort(tests);
    return [...sorted.filter(measuresHeap), ...sorted.filter((test) => !measuresHeap(test))];
  }
}
