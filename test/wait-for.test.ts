// waitFor and long polls: woken when the job's end commits, one connection for all waiters.
import { describe, expect, it } from 'vitest';
import { createServer } from '../src/index.js';
import { useTestDb } from './helpers.js';

const db = useTestDb(import.meta.url);

describe('tusk.waitFor', () => {
  it('resolves with the finished job; an unknown id is null; a timeout gives the job as it is', async () => {
    const { id } = await db.tusk.enqueue('w', { n: 1 }, { queue: 'wait-1' });
    const waiting = db.tusk.waitFor(id, { timeoutMs: 20_000 });
    const [lease] = await db.tusk.fetch({ queue: 'wait-1' });
    await db.tusk.ack(lease as never, { done: 1 });
    expect(await waiting).toMatchObject({ id, state: 'succeeded', result: { done: 1 } });
    expect(await db.tusk.waitFor(id)).toMatchObject({ state: 'succeeded' }); // finished already
    expect(await db.tusk.waitFor('999999999')).toBeNull();
    const { id: idle } = await db.tusk.enqueue('w', null, { queue: 'wait-nobody' });
    expect(await db.tusk.waitFor(idle, { timeoutMs: 100 })).toMatchObject({ id: idle, state: 'available' });
  });

  it('ends of every kind wake it: dead, cancelled', async () => {
    const { id: dead } = await db.tusk.enqueue('w', null, { queue: 'wait-2', maxAttempts: 1 });
    const { id: cancelled } = await db.tusk.enqueue('w', null, { queue: 'wait-2-later', delayMs: 60_000 });
    const waits = [db.tusk.waitFor(dead, { timeoutMs: 20_000 }), db.tusk.waitFor(cancelled, { timeoutMs: 20_000 })];
    const [lease] = await db.tusk.fetch({ queue: 'wait-2' });
    await db.tusk.nack(lease as never, { error: 'no' });
    await db.tusk.cancel(cancelled);
    expect((await Promise.all(waits)).map((j) => j?.state)).toEqual(['dead', 'cancelled']);
  });

  it('1 000 concurrent waiters resolve as a worker finishes their jobs, on one listening connection', async () => {
    const listening = async () =>
      (
        await db.pool.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1`,
          [`tusk waiters pid=${process.pid}`],
        )
      ).rows[0]?.n ?? 0;
    const before = await listening(); // other instances of this file's tests
    const waiter = db.another({ maxConnections: 4 });
    const { ids } = await db.tusk.enqueueMany(
      Array.from({ length: 1000 }, (_, n) => ({ task: 'echo', payload: n, queue: 'wait-many' })),
    );
    const waits = ids.map((id) => waiter.waitFor(id, { timeoutMs: 60_000 }));
    const worker = db.worker({ queues: ['wait-many'], concurrency: 20, tasks: { echo: (n: unknown) => n } });
    await worker.start();
    const jobs = await Promise.all(waits);
    await worker.stop();
    expect(jobs.every((j, n) => j?.state === 'succeeded' && j.result === n)).toBe(true);
    const pool = await waiter.pool();
    expect(pool.totalCount).toBeLessThanOrEqual(4);
    expect(await listening()).toBe(before + 1);
  });
});

describe('GET /api/jobs/:id?waitMs=', () => {
  it('answers once the job is finished (a long poll), and refuses a wait past 60 s', async () => {
    const server = await createServer(db.tusk, { auth: 'none' });
    const get = (path: string) => Promise.resolve(server.app.request(path, { headers: { host: '127.0.0.1' } }));
    const { id } = await db.tusk.enqueue('w', null, { queue: 'wait-http' });
    const polled = get(`/api/jobs/${id}?waitMs=20000`).then(async (r) => ({ status: r.status, body: await r.json() }));
    const [lease] = await db.tusk.fetch({ queue: 'wait-http' });
    await db.tusk.ack(lease as never, 'ok');
    expect(await polled).toMatchObject({ status: 200, body: { id, state: 'succeeded', result: 'ok' } });
    expect((await get(`/api/jobs/${id}?waitMs=60001`)).status).toBe(400);
    await server.close();
  });
});
