import { describe, expect, it } from 'vitest';
import { Batcher } from '../../src/worker/batcher.js';

describe('Batcher', () => {
  it('goes on writing when its after-write callback throws, and leaves no rejection unhandled', async () => {
    const written: number[][] = [];
    const batcher = new Batcher<number>(
      async (items) => {
        written.push(items);
      },
      10,
      () => {
        throw new Error('a wake-up that failed');
      },
    );
    batcher.add(1);
    await batcher.drain();
    batcher.add(2);
    batcher.add(3);
    await batcher.drain();
    // before, the throw rejected the write's promise with no handler: the process ended
    expect(written).toEqual([[1], [2, 3]]);
  });
});
