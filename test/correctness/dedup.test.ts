// Deduplicated batches do not deadlock each other; retry() keeps a job's
// dedup key and its own retry policy.
import { describe, expect, it } from 'vitest';
import { useTestDb } from '../helpers.js';
import { settledStates } from './common.js';

const db = useTestDb(import.meta.url);

describe('enqueueMany with dedup keys', () => {
  /**
   * Runs `pairs` pairs of concurrent calls, ten pairs at a time (each call with a connection
   * of its own at once), pair n with `keys(n)` in one call and in reverse in the other;
   * checks that no call fails and that both calls of a pair get the same job per key.
   */
  async function oppositeOrders(pairs: number, keys: (n: number) => string[]) {
    const tusk = db.another({ maxConnections: 20 });
    const call = (list: string[]) =>
      tusk.enqueueMany(list.map((dedupKey) => ({ task: 'dedup', payload: dedupKey, dedupKey })));
    const results: Array<PromiseSettledResult<{ ids: string[] }>> = [];
    for (let first = 0; first < pairs; first += 10) {
      const wave = Array.from({ length: Math.min(10, pairs - first) }, (_, i) => {
        const list = keys(first + i);
        return Promise.allSettled([call(list), call([...list].reverse())]);
      });
      results.push(...(await Promise.all(wave)).flat());
    }
    await tusk.close();
    const failures = results.flatMap((r) => (r.status === 'rejected' ? [String(r.reason?.message)] : []));
    expect(failures, `${failures.length} of ${2 * pairs} calls failed`).toEqual([]);
    for (let n = 0; n < pairs; n++) {
      const [one, other] = results.slice(2 * n, 2 * n + 2).map((r) => (r.status === 'fulfilled' ? r.value.ids : []));
      expect(one).toEqual([...(other ?? [])].reverse());
      expect(new Set(one).size).toBe(keys(n).length);
    }
  }

  it('100 pairs of concurrent calls with the same two keys in opposite orders: none fails, one job per key', async () => {
    await oppositeOrders(100, (n) => [`two-a-${n}`, `two-b-${n}`]);
  });

  it('10 pairs of concurrent calls with the same 50 keys in opposite orders: none fails, one job per key', async () => {
    await oppositeOrders(10, (n) => Array.from({ length: 50 }, (_, k) => `fifty-${n}-${k}`));
  });
});

describe('retry()', () => {
  /** Leases the job and gives it back until it is dead. */
  async function killJob(queue: string, id: string) {
    for (;;) {
      const [lease] = await db.tusk.fetch({ queue });
      if (lease?.id !== id) throw new Error(`job ${id} should have been leased`);
      if ((await db.tusk.nack(lease, { error: 'failed' })) === 'dead') return;
    }
  }

  it('keeps the dedup key: while the retried job is unfinished, an enqueue with its key returns it', async () => {
    const { id } = await db.tusk.enqueue('keyed', 1, { queue: 'retry-key', dedupKey: 'k', maxAttempts: 1 });
    await killJob('retry-key', id);
    expect(await db.tusk.retry(id)).toBe(true);
    const again = await db.tusk.enqueue('keyed', 2, { queue: 'retry-key', dedupKey: 'k' });
    expect(again).toEqual({ id, deduplicated: true });
  });

  it("keeps the job's own retry policy: its next failure is retried in its backoff, to its retry queue", async () => {
    const { id } = await db.tusk.enqueue('fails', null, {
      queue: 'retry-policy',
      maxAttempts: 2,
      retry: { backoff: 600_000, queue: 'retry-later' },
    });
    await killJob('retry-policy', id);
    expect(await db.tusk.retry(id)).toBe(true);
    const worker = db.worker({
      queues: ['retry-policy'],
      tasks: {
        fails: () => {
          throw new Error('failed again');
        },
      },
    });
    await worker.start();
    await settledStates(db, [id], 0);
    const failedAt = Date.now();
    const job = await (async () => {
      for (;;) {
        const j = await db.tusk.getJob(id);
        if (j?.state !== 'available' && j?.state !== 'running') return j;
        await new Promise((r) => setTimeout(r, 20));
      }
    })().finally(() => worker.stop());
    // the task has no policy of its own: without the job's, the retry would wait ~30 s in its queue
    expect({
      state: job?.state,
      queue: job?.queue,
      retryInMoreThan5Minutes: (job?.runAt.getTime() ?? 0) - failedAt > 300_000,
    }).toEqual({ state: 'failed', queue: 'retry-later', retryInMoreThan5Minutes: true });
  });
});
