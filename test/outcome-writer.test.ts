import { describe, expect, it } from 'vitest';
import { createLogger } from '../src/log.js';
import { OutcomeWriter } from '../src/worker/outcomeWriter.js';
import { useTestDb } from './helpers.js';

const db = useTestDb(import.meta.url);

describe('OutcomeWriter', () => {
  it('a write is no longer counted unwritten when the claim loops are told of it', async () => {
    const seen: number[] = [];
    const options = { schema: db.schema, log: createLogger(false), batchSize: 10, asyncCommit: false, leaseMs: 5000 };
    // the loops woken by `written` hold back while outcomes are unwritten: they must see 0
    const writer: OutcomeWriter = new OutcomeWriter(db.pool, options, () => seen.push(writer.unwritten));
    for (const state of ['succeeded', 'dead', 'cancelled'] as const) {
      // no job holds these tokens: the write is fenced off, and it is still a write
      writer.finish(state, { id: '1', token: '1' });
      await writer.drain();
    }
    writer.requeue({ id: '1', token: '1' });
    await writer.drain();
    expect(seen).toEqual([0, 0, 0, 0]);
  });
});
