// A worker that stalls past its lease must never run two attempts of a job side
// by side, nor lose the lease of the newer one. 50 runs of each: fencing.stress.ts.
import { beforeAll, describe, it } from 'vitest';
import { useTestDb } from '../helpers.js';
import { stallByHeldReplies, stallBySigstop } from './scenarios.js';
import { createSpansTable } from './spans.js';

const db = useTestDb(import.meta.url);
beforeAll(() => createSpansTable(db));

describe('a worker that stalls past its lease', () => {
  it('frozen (SIGSTOP) while upkeep requeues its job: one run at a time, then success (3 runs)', async () => {
    for (let trial = 1; trial <= 3; trial++) await stallBySigstop(db, trial);
  }, 120_000);

  it('whose replies are held while upkeep requeues its job: one run at a time, then success (2 runs)', async () => {
    for (let trial = 1; trial <= 2; trial++) await stallByHeldReplies(db, trial);
  }, 60_000);
});
