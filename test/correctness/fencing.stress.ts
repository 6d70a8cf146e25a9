// `npm run stress`: the races of a stalled worker and of cancels, 50 runs each. Every run is made; the
// test then lists the runs that went wrong.
import { beforeAll, describe, expect, it } from 'vitest';
import type { TestDb } from '../helpers.js';
import { useTestDb } from '../helpers.js';
import {
  cancelDuringFailure,
  cancelDuringNack,
  cancelThenLeaseRunsOut,
  stallByHeldReplies,
  stallBySigstop,
} from './scenarios.js';
import { createSpansTable } from './spans.js';

const RUNS = 50;
const db = useTestDb(import.meta.url);
beforeAll(() => createSpansTable(db));

async function everyRun(scenario: (db: TestDb, trial: number) => Promise<void>) {
  const failed: string[] = [];
  for (let trial = 1; trial <= RUNS; trial++) {
    try {
      await scenario(db, trial);
    } catch (error) {
      failed.push((error as Error).message.split('\n')[0] ?? '');
    }
  }
  console.log(`${scenario.name}: ${RUNS - failed.length} of ${RUNS} runs right`);
  expect(failed, `${failed.length} of ${RUNS} runs went wrong`).toEqual([]);
}

describe(`a worker stalled past its lease, ${RUNS} runs each`, () => {
  it('a worker frozen (SIGSTOP) past its lease', () => everyRun(stallBySigstop));
  it('a worker whose replies are held past its lease', () => everyRun(stallByHeldReplies));
});

describe(`cancels that stick, ${RUNS} runs each`, () => {
  it('a cancel, then the lease runs out', () => everyRun(cancelThenLeaseRunsOut));
  it('a cancel while a nack commits', () => everyRun(cancelDuringNack));
  it('a cancel as the handler fails', () => everyRun(cancelDuringFailure));
});
