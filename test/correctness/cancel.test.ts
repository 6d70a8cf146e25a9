// A cancel survives the job being put back in the queue (by upkeep, a nack, a
// worker's failed attempt), and cancel() never answers "unknown" for a live job. 50 runs
// of each race: fencing.stress.ts.
import { beforeAll, describe, expect, it } from 'vitest';
import { exited } from '../cli.js';
import { eventually, useTestDb } from '../helpers.js';
import { settledStates } from './common.js';
import { startUpkeep } from './hooks.js';
import { cancelDuringFailure, cancelDuringNack, cancelThenLeaseRunsOut } from './scenarios.js';
import { createSpansTable, recordedSpans, startSpanWorker } from './spans.js';

const db = useTestDb(import.meta.url);
beforeAll(() => createSpansTable(db));

describe('a cancel', () => {
  it('of a leased job whose lease then runs out: the job ends cancelled (3 runs)', async () => {
    for (let trial = 1; trial <= 3; trial++) await cancelThenLeaseRunsOut(db, trial);
  });

  it('while a nack of the job commits: cancel() knows the job, which ends cancelled (3 runs)', async () => {
    for (let trial = 1; trial <= 3; trial++) await cancelDuringNack(db, trial);
  });

  it('as the handler fails: the job ends cancelled, its handler not run again (3 runs)', async () => {
    for (let trial = 1; trial <= 3; trial++) await cancelDuringFailure(db, trial);
  });

  it('of a job whose worker process dies before it hears of the cancel: the job ends cancelled', async () => {
    const child = startSpanWorker(db, '-q', 'cancel-killed');
    try {
      const { id } = await db.tusk.enqueue('span', { ms: 60_000 }, { queue: 'cancel-killed', maxAttempts: 3 });
      await eventually(async () => (await recordedSpans(db, [id])).length > 0, 20_000);
      child.kill('SIGSTOP'); // it cannot act on the cancel
      expect(await db.tusk.cancel(id)).toBe('running');
      child.kill('SIGKILL');
      await exited(child);
      const upkeep = await startUpkeep(db);
      const [final] = await settledStates(db, [id], 5000).finally(() => upkeep.stop());
      expect({ final, runs: (await recordedSpans(db, [id])).length }).toEqual({ final: 'cancelled', runs: 1 });
    } finally {
      child.kill('SIGKILL');
    }
  });
});
