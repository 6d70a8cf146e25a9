import { beforeAll, describe, expect, it } from 'vitest';
import { type JobContext, TuskValidationError } from '../src/index.js';
import { eventually, sleep, useTestDb } from './helpers.js';

const db = useTestDb(import.meta.url);

const finishedIn = async (queue: string) =>
  (await db.rows(`SELECT 1 FROM $schema.jobs WHERE queue = $1`, [queue])).length === 0;

// Each claim's time, the clock the limit counts by (the history keeps when the handler
// began, a moment later, which may fall in the next window), kept by a trigger
beforeAll(() =>
  db.pool.query(`
    CREATE TABLE "${db.schema}".claim_times (tenant text, at timestamptz);
    CREATE FUNCTION "${db.schema}".keep_claim_time() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN INSERT INTO "${db.schema}".claim_times VALUES (NEW.tenant, NEW.started_at); RETURN NULL; END $$;
    CREATE TRIGGER keep_claim_time AFTER UPDATE ON "${db.schema}".jobs FOR EACH ROW
      WHEN (NEW.state = 'running' AND OLD.state <> 'running') EXECUTE FUNCTION "${db.schema}".keep_claim_time()`),
);

/** Claims of `tenant`'s jobs per epoch-aligned window of `perMs` (the windows the limit counts in). */
async function claimsPerWindow(tenant: string, perMs: number): Promise<Map<number, number>> {
  const rows = await db.rows<{ w: string; n: number }>(
    `SELECT floor(extract(epoch FROM at) * 1000 / $2)::bigint AS w, count(*)::int AS n
     FROM $schema.claim_times WHERE tenant = $1 GROUP BY 1 ORDER BY 1`,
    [tenant, perMs],
  );
  return new Map(rows.map((r) => [Number(r.w), r.n]));
}

describe('tenant rate limits', () => {
  it('settings: set, shown, removed; bad input refused', async () => {
    expect((await db.tusk.tenants.set('r-set', { rate: { limit: 100, perMs: 60_000 } })).rate).toEqual({
      limit: 100,
      perMs: 60_000,
    });
    expect((await db.tusk.tenants.set('r-set', { slots: 3 })).rate).toEqual({ limit: 100, perMs: 60_000 });
    expect((await db.tusk.tenants.set('r-set', { rate: null })).rate).toBeNull();
    const cases: Array<[unknown, RegExp]> = [
      [{ rate: { limit: 0, perMs: 1000 } }, /^settings\.rate\.limit: must be an integer from 1/],
      [{ rate: { limit: 5, perMs: 0 } }, /^settings\.rate\.perMs: must be an integer from 1/],
      [{ rate: { limit: 5 } }, /^settings\.rate\.perMs/],
      [{ rate: 5 }, /^settings\.rate: must be \{ limit, perMs \} or null/],
      [{ rate: { limit: 5, perMs: 10, burst: 2 } }, /^settings\.rate: unknown option "burst"/],
    ];
    for (const [settings, message] of cases) {
      const error = await db.tusk.tenants.set('r-bad', settings as never).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(TuskValidationError);
      expect((error as Error).message).toMatch(message);
    }
  });

  it('three workers: at most the limit per window, exactly; other tenants are not held back', async () => {
    const limit = 5;
    const perMs = 500;
    const jobs = 30;
    await db.tusk.tenants.set('metered', { rate: { limit, perMs } });
    const started: Record<string, number[]> = { metered: [], free: [] };
    const tasks = {
      tick: (_p: unknown, ctx: JobContext) => void started[ctx.job.tenant]?.push(Date.now()),
    };
    await db.tusk.enqueueMany([
      ...Array.from({ length: jobs }, () => ({ task: 'tick', tenant: 'metered', queue: 'rate' })),
      ...Array.from({ length: 300 }, () => ({ task: 'tick', tenant: 'free', queue: 'rate' })),
    ]);
    const workers = [0, 1, 2].map(() =>
      db.worker({ queues: ['rate'], concurrency: 4, prefetch: 0, tasks }, db.another({ maxConnections: 4 })),
    );
    await Promise.all(workers.map((w) => w.start()));
    await eventually(() => finishedIn('rate'), 30_000);
    await Promise.all(workers.map((w) => w.stop()));

    const windows = await claimsPerWindow('metered', perMs);
    const counts = [...windows.values()];
    console.log(`rate ${limit} per ${perMs} ms, 3 workers: starts per window ${counts.join(' ')}`);
    // each job claimed once, or more if a loaded machine lost a lease (each claim a start)
    expect(counts.reduce((a, b) => a + b, 0)).toBeGreaterThanOrEqual(jobs);
    // counted in the window of its claim, as the limit counts: never more than the limit
    // (how many each window had while jobs waited depends on how busy the machine is)
    expect(Math.max(...counts)).toBeLessThanOrEqual(limit);
    const [first, last] = [Math.min(...windows.keys()), Math.max(...windows.keys())];
    expect(last - first + 1).toBeGreaterThanOrEqual(jobs / limit);
    // the other tenant's 300 jobs went through while the metered one waited for windows:
    // all of them started before the metered tenant's last job (an order; how many
    // milliseconds they took depends on how busy the machine is, and is the benches' job)
    expect(started.free).toHaveLength(300);
    expect(Math.max(...(started.free as number[]))).toBeLessThan(Math.max(...(started.metered as number[])));
  });

  it('composes with slots: never more running than the slots, never more starts than the rate', async () => {
    const limit = 6;
    const perMs = 400;
    await db.tusk.tenants.set('both', { slots: 2, rate: { limit, perMs } });
    let running = 0;
    let peak = 0;
    const tasks = {
      slow: async () => {
        peak = Math.max(peak, ++running);
        // the job holds its slot a while, so that the slots are what limits: a measure, not a wait
        await sleep(30);
        running--;
      },
    };
    await db.tusk.enqueueMany(Array.from({ length: 24 }, () => ({ task: 'slow', tenant: 'both', queue: 'both' })));
    const workers = [0, 1].map(() =>
      db.worker({ queues: ['both'], concurrency: 4, prefetch: 0, tasks }, db.another({ maxConnections: 4 })),
    );
    await Promise.all(workers.map((w) => w.start()));
    await eventually(() => finishedIn('both'), 30_000);
    await Promise.all(workers.map((w) => w.stop()));
    expect(peak).toBeLessThanOrEqual(2);
    const counts = [...(await claimsPerWindow('both', perMs)).values()];
    expect(Math.max(...counts)).toBeLessThanOrEqual(limit);
    expect(counts.reduce((a, b) => a + b, 0)).toBeGreaterThanOrEqual(24);
  });

  it('fetch (external leases) counts against the rate too, exactly, from several processes at once', async () => {
    const perMs = 60_000;
    await db.tusk.tenants.set('leased', { rate: { limit: 3, perMs } });
    await db.tusk.enqueueMany(Array.from({ length: 10 }, () => ({ task: 'x', tenant: 'leased', queue: 'lease-rate' })));
    // all in one window of the database's clock (the limit's): not within a second of its end
    await db.roomInWindow(perMs, 1000);
    const others = [db.another(), db.another()];
    const got = await Promise.all([db.tusk, ...others].map((t) => t.fetch({ queue: 'lease-rate', count: 10 })));
    const again = await Promise.all([db.tusk, ...others].map((t) => t.fetch({ queue: 'lease-rate', count: 10 })));
    expect(got.flat().length + again.flat().length).toBe(3);
    await db.pool.query(`DELETE FROM "${db.schema}".jobs WHERE queue = 'lease-rate'`);
  });
  it("a window made longer starts the count afresh (it stopped the tenant); a new limit alone keeps the window's count", async () => {
    await db.tusk.tenants.set('rewindowed', { rate: { limit: 2, perMs: 1000 } });
    await db.tusk.enqueueMany(
      Array.from({ length: 10 }, () => ({ task: 'x', tenant: 'rewindowed', queue: 'rewindow' })),
    );
    const fetched = async () => (await db.tusk.fetch({ queue: 'rewindow', count: 10 })).length;
    await db.roomInWindow(1000, 300);
    expect(await fetched()).toBe(2);
    // before, the count stayed in seconds: a window number 60 times the current one in
    // minutes, taken for the current window, used up, for centuries
    await db.tusk.tenants.set('rewindowed', { rate: { limit: 2, perMs: 60_000 } });
    await db.roomInWindow(60_000, 5000);
    expect(await fetched()).toBe(2);
    // the limit alone: the two starts of this window still count
    await db.tusk.tenants.set('rewindowed', { rate: { limit: 3, perMs: 60_000 } });
    expect(await fetched()).toBe(1);
    // removed and set again: a new count
    await db.tusk.tenants.set('rewindowed', { rate: null });
    await db.tusk.tenants.set('rewindowed', { rate: { limit: 3, perMs: 60_000 } });
    expect(await fetched()).toBe(3);
    await db.pool.query(`DELETE FROM "${db.schema}".jobs WHERE queue = 'rewindow'`);
  });
});
