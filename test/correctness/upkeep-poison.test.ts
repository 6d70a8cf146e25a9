// Durations past 2^31 ms (24.8 days) failed whole batches, and then every upkeep.
import { describe, expect, it } from 'vitest';
import { useTestDb } from '../helpers.js';
import { daysAgo, settledStates, stateOf, statesAfter } from './common.js';
import { startUpkeep } from './hooks.js';

const db = useTestDb(import.meta.url);

describe('a job that waited more than 24.8 days', () => {
  it('finishes like any other, and so do the jobs finished in the same batch', async () => {
    const { id: old } = await db.tusk.enqueue('ok', null, { queue: 'p-batch', runAt: daysAgo(30) });
    const { ids } = await db.tusk.enqueueMany(Array.from({ length: 5 }, () => ({ task: 'ok', queue: 'p-batch' })));
    // a short lease: stop() gives up retrying the writes that fail after it
    const worker = db.worker({ queues: ['p-batch'], concurrency: 6, leaseMs: 2000, tasks: { ok: () => 'done' } });
    await worker.start();
    await settledStates(db, [old, ...ids]).finally(() => worker.stop());
    // each ran once: not again after its lease ran out because its outcome could not be written
    const outcomes = await Promise.all(
      [old, ...ids].map(async (id) => {
        const job = await db.tusk.getJob(id).catch((error: Error) => error.message);
        return typeof job === 'string' ? job : `${job?.state} after ${job?.attempts} attempt(s)`;
      }),
    );
    expect(outcomes).toEqual(Array(6).fill('succeeded after 1 attempt(s)'));
    // durations are kept as integer milliseconds, capped at 24.8 days
    expect((await db.tusk.getJob(old))?.waitMs).toBe(2147483647);
  });

  it('can be acked, or nacked to dead, by an external consumer', async () => {
    await db.tusk.enqueue('acked', null, { queue: 'p-ext', runAt: daysAgo(30) });
    await db.tusk.enqueue('nacked', null, { queue: 'p-ext', runAt: daysAgo(30), maxAttempts: 1 });
    const leases = await db.tusk.fetch({ queue: 'p-ext', count: 2 });
    const acked = leases.find((l) => l.task === 'acked');
    const nacked = leases.find((l) => l.task === 'nacked');
    if (!acked || !nacked) throw new Error('both jobs should have been leased');
    expect.soft(await stateOf(db, acked.id)).toBe('running');
    await expect.soft(db.tusk.ack(acked, { ok: true })).resolves.toBeUndefined();
    await expect.soft(db.tusk.nack(nacked, { error: 'no' })).resolves.toBe('dead');
    expect(await settledStates(db, [acked.id, nacked.id], 0)).toEqual(['succeeded', 'dead']);
  });

  it('out of attempts when its lease runs out, does not stop upkeep for the other jobs', async () => {
    const { id: poison } = await db.tusk.enqueue('old', null, {
      queue: 'p-poison',
      runAt: daysAgo(30),
      maxAttempts: 1,
    });
    const [leased] = await db.tusk.fetch({ queue: 'p-poison', leaseMs: 100 });
    expect(leased?.id).toBe(poison);
    // a tenant with one slot whose job's holder vanished: only upkeep frees the slot. Its
    // lease runs out after the old job's: upkeep has met the old job by then
    await db.tusk.tenants.set('victim', { slots: 1 });
    const { id: victim } = await db.tusk.enqueue('held', null, { queue: 'p-victim', tenant: 'victim' });
    const [held] = await db.tusk.fetch({ queue: 'p-victim', leaseMs: 1000 });
    expect(held?.id).toBe(victim);

    const upkeep = await startUpkeep(db);
    const states = await statesAfter(db, [victim, poison], ['running']).finally(() => upkeep.stop());
    // the victim is back in the queue (its slot free again), the old job ended dead
    expect({ victim: states[0], poison: states[1] }).toEqual({ victim: 'available', poison: 'dead' });
    const [again] = await db.tusk.fetch({ queue: 'p-victim' });
    expect(again?.id).toBe(victim);
  });
});
