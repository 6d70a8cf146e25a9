import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import type { Job, JobContext } from '../src/index.js';
import { Gate } from './gate.js';
import { eventually, sleep, useSessions, useTestDb } from './helpers.js';

const db = useTestDb(import.meta.url);
const session = useSessions(() => db.url);
const finished = (id: string, timeoutMs = 10_000) =>
  eventually(async () => {
    const job = await db.tusk.getJob(id);
    return job && ['succeeded', 'dead', 'cancelled', 'expired'].includes(job.state) ? job : null;
  }, timeoutMs);
const stateOf = async (id: string) => (await db.tusk.getJob(id))?.state;

/** A Standard Schema whose validation never settles; `begun()`: a validation was asked for. */
function hungSchema() {
  let asked = false;
  const validate = () => {
    asked = true;
    return new Promise<never>(() => {});
  };
  return { schema: { '~standard': { version: 1 as const, vendor: 'test', validate } }, begun: () => asked };
}

/**
 * A worker of `queue` with one slot: job 1 (payload n 1) runs until `release()`, job 2 is
 * claimed ahead behind it; returns once that is so. `ran`: the payloads' n as their
 * handlers began.
 */
async function oneRunningOneAhead(queue: string) {
  let release!: () => void;
  const released = new Promise<void>((resolve) => {
    release = resolve;
  });
  const ran: number[] = [];
  const worker = db.worker({
    queues: [queue],
    concurrency: 1,
    prefetch: 1,
    tasks: {
      work: async (p: { n: number }) => {
        ran.push(p.n);
        if (p.n === 1) await released;
      },
    },
  });
  const { ids } = await db.tusk.enqueueMany([1, 2].map((n) => ({ task: 'work', payload: { n }, queue })));
  await worker.start();
  await eventually(async () => ran.length === 1 && (await stateOf(ids[1] as string)) === 'running');
  return { worker, ids, ran, release };
}

/**
 * Runs `body` with `notified(enqueue)`, which enqueues and returns once a probe connection
 * listening on the schema's channel has the notification (the worker's listening
 * connection gets it as well), and a moment more.
 */
async function withProbe(body: (notified: (enqueue: () => Promise<void>) => Promise<void>) => Promise<void>) {
  const probe = new pg.Client({ connectionString: db.url });
  await probe.connect();
  let announced = 0;
  probe.on('notification', () => void announced++);
  await probe.query(`LISTEN "${db.schema}:jobs"`);
  try {
    await body(async (enqueue) => {
      const before = announced;
      await enqueue();
      await eventually(() => announced > before, 10_000, 5, 'the notification');
      await sleep(100);
    });
  } finally {
    await probe.end();
  }
}

/**
 * A worker of `queue` (concurrency 2, no prefetch, a 10-minute poll) on a pool that
 * answers its claims as usual, but for `holds` claims in a row whose answers wait for
 * `during(n)`: the first is the last of the look-agains that follow a job (2, 4 … 256 ms
 * apart), the claim sent 500 ms or more after the job's claim and 200 ms or more after
 * the claim before it. The claim after the held ones, once answered, waits for
 * `afterNext()`. Enqueues job 0, which runs until `done()` has returned (so one slot is
 * left, and no job's end or outcome wakes the loops and cuts a look-again short), and
 * returns the payloads' `n` in the order the jobs started.
 */
async function runHeld(
  queue: string,
  holds: number,
  steps: { during(n: number): Promise<void>; afterNext?(): Promise<void>; done(): Promise<void> },
): Promise<number[]> {
  const pool = new pg.Pool({ connectionString: db.url, max: 4 });
  const query = pool.query.bind(pool) as (...args: unknown[]) => Promise<{ rows?: unknown[] }>;
  let lastClaimAt = 0;
  let lastJobsAt = Number.POSITIVE_INFINITY;
  let held = 0;
  let next = false;
  pool.query = ((...args: unknown[]) => {
    const first = args[0] as string | { text?: string };
    const text = typeof first === 'string' ? first : first?.text;
    if (next || !text?.includes('claim_jobs')) return query(...args);
    const now = performance.now();
    const gap = now - lastClaimAt;
    lastClaimAt = now;
    const hold = held === holds ? 0 : held > 0 || (gap >= 200 && now - lastJobsAt >= 500) ? ++held : 0;
    const after = hold === 0 && held === holds;
    next ||= after;
    return query(...args).then(async (result) => {
      if ((result.rows?.length ?? 0) > 0) lastJobsAt = performance.now();
      if (hold > 0) await steps.during(hold);
      if (after) await steps.afterNext?.();
      return result;
    });
  }) as typeof pool.query;
  const tusk = db.another({ pool });
  const ran: number[] = [];
  let release: () => void = () => {};
  const released = new Promise<void>((resolve) => {
    release = resolve;
  });
  const worker = db.worker(
    {
      queues: [queue],
      concurrency: 2,
      prefetch: 0,
      pollMs: 600_000,
      tasks: {
        step: async (p: { n: number }) => {
          ran.push(p.n);
          if (p.n === 0) await released;
        },
      },
    },
    tusk,
  );
  try {
    await worker.start();
    await db.tusk.enqueue('step', { n: 0 }, { queue });
    await steps.done();
  } finally {
    release();
    await worker.stop();
    await tusk.close();
    await pool.end();
  }
  return ran;
}

describe('worker', () => {
  it('runs a job and records result, stats and timings', async () => {
    const worker = db.worker({
      queues: ['basic'],
      tasks: {
        add: async (p: { a: number; b: number }, ctx: JobContext) => {
          ctx.stats({ rows: 3 });
          ctx.stats({ bytes: 10 });
          // the handler's own run time, which runMs must record: a duration, not a wait for anything
          await sleep(30);
          return { sum: p.a + p.b, attempt: ctx.job.attempt, tenant: ctx.job.tenant };
        },
      },
    });
    await worker.start();
    const { id } = await db.tusk.enqueue('add', { a: 2, b: 3 }, { queue: 'basic', tenant: 'acme' });
    const job = (await finished(id)) as Job;
    await worker.stop();
    expect(job).toMatchObject({
      state: 'succeeded',
      attempts: 1,
      result: { sum: 5, attempt: 1, tenant: 'acme' },
      stats: { rows: 3, bytes: 10 },
      error: null,
    });
    expect(job.runMs).toBeGreaterThanOrEqual(25);
    // the wait is from when it could run to when it started: read back from its times
    expect(job.waitMs).toBeGreaterThanOrEqual(0);
    expect(Math.abs((job.waitMs ?? -1) - ((job.startedAt?.getTime() ?? 0) - job.runAt.getTime()))).toBeLessThanOrEqual(
      1,
    );
    expect(job.finishedAt?.getTime()).toBeGreaterThanOrEqual(job.startedAt?.getTime() ?? Number.POSITIVE_INFINITY);
  });

  it('stop() asked while start() is under way: the worker ends stopped, unregistered, and runs nothing after (3 times)', async () => {
    for (let round = 0; round < 3; round++) {
      const ran = { stopped: 0, other: 0 };
      const worker = db.worker({ queues: [`stop-starting-${round}`], tasks: { work: () => void ran.stopped++ } });
      const started = worker.start();
      const stopped = worker.stop(); // before the start has registered or connected
      await Promise.all([started, stopped]);
      expect(worker.state).toBe('stopped');
      expect(await db.rows('SELECT id FROM $schema.workers WHERE id = $1', [worker.id])).toEqual([]);
      // a job for its queue, then a worker that takes it: the stopped one took nothing
      await db.tusk.enqueue('work', null, { queue: `stop-starting-${round}` });
      const other = db.worker({ queues: [`stop-starting-${round}`], tasks: { work: () => void ran.other++ } });
      await other.start();
      await eventually(() => ran.other + ran.stopped === 1, 10_000, 20, 'the job run');
      await other.stop();
      expect(ran).toEqual({ stopped: 0, other: 1 });
    }
  });

  it('runs jobs FIFO by (priority, enqueue order)', async () => {
    const order: number[] = [];
    const specs = [5, 0, 5, -1, 0, 5, -1, 0].map((priority, i) => ({
      task: 'rec',
      payload: { i },
      priority,
      queue: 'fifo',
    }));
    await db.tusk.enqueueMany(specs);
    const worker = db.worker({
      queues: ['fifo'],
      concurrency: 1,
      prefetch: 0,
      tasks: { rec: (p: { i: number }) => void order.push(p.i) },
    });
    await worker.start();
    await eventually(() => order.length === specs.length);
    await worker.stop();
    const expected = specs
      .map((s, i) => ({ p: s.priority, i }))
      .sort((a, b) => a.p - b.p || a.i - b.i)
      .map((x) => x.i);
    expect(order).toEqual(expected);
  });

  it('does not start a delayed job early, and starts it when due without waiting for a poll', async () => {
    let startedAt = 0;
    const worker = db.worker({
      queues: ['delay'],
      pollMs: 600_000,
      tasks: {
        later: () => {
          startedAt = Date.now();
        },
      },
    });
    await worker.start();
    const enqueuedAt = Date.now();
    const { id } = await db.tusk.enqueue('later', {}, { queue: 'delay', delayMs: 700 });
    await finished(id, 60_000);
    await worker.stop();
    expect(startedAt - enqueuedAt).toBeGreaterThanOrEqual(700);
    // generous: a loaded machine delays the wake-up by seconds, the 10-minute poll would by minutes
    expect(startedAt - enqueuedAt).toBeLessThan(60_000);
  });

  it('claims again after empty claims that notifications overlapped, even at the end of its look-agains (3 times)', async () => {
    // Two claims in a row have their answers held: the last look-again after a job and the
    // next. While the first is held, a job of another queue is enqueued, and while the
    // second is held, one of the worker's queue: each notification wakes the other claim
    // loop, which has no room while the held claim asks for the one slot left, and each held
    // claim comes back empty. The loop must look again at once after the first, then soon
    // after the second: at the end of its look-agains it used to sleep a whole poll.
    await withProbe(async (notified) => {
      for (let round = 0; round < 3; round++) {
        const queue = `overlap-${round}`;
        const enqueued: string[] = [];
        const ran = await runHeld(queue, 2, {
          async during(n) {
            const target = n === 1 ? `${queue}-elsewhere` : queue;
            await notified(async () => {
              enqueued.push((await db.tusk.enqueue('step', { n }, { queue: target })).id);
            });
          },
          async done() {
            await eventually(() => enqueued.length === 2, 30_000, 10, 'two claims held');
            await finished(enqueued[1] as string, 30_000);
          },
        });
        expect(ran).toEqual([0, 2]);
      }
    });
  });

  it('looks again after a look at once that came back empty, while a locked tenant row hides the job (3 times)', async () => {
    // The last look-again after a job has its answer held while a job is enqueued for a
    // tenant with slots (claimed under its row lock) whose row a transaction holds: the
    // held claim comes back empty, its look at once too (the row is skipped, and no
    // notification overlapped it). The row is let go then: the loop must go on looking,
    // where it used to sleep a whole poll.
    await withProbe(async (notified) => {
      for (let round = 0; round < 3; round++) {
        const queue = `locked-row-${round}`;
        const tenant = `locked-row-${round}`;
        await db.tusk.tenants.set(tenant, { slots: 5 });
        const locker = await db.pool.connect();
        let id = '';
        try {
          const ran = await runHeld(queue, 1, {
            async during() {
              await locker.query('BEGIN');
              await locker.query(`SELECT 1 FROM "${db.schema}".tenants WHERE tenant = $1 FOR UPDATE`, [tenant]);
              await notified(async () => {
                id = (await db.tusk.enqueue('step', { n: 1 }, { queue, tenant })).id;
              });
            },
            async afterNext() {
              await locker.query('COMMIT');
            },
            async done() {
              await eventually(() => id !== '', 30_000, 10, 'a claim held');
              await finished(id, 30_000);
            },
          });
          expect(ran).toEqual([0, 1]);
        } finally {
          await locker.query('ROLLBACK'); // a no-op once committed
          locker.release();
        }
      }
    });
  });

  it("a limited tenant's next job starts once the job before it ends, not at the next poll", async () => {
    // One slot: a claim takes one job and comes back short, and the loops go on to their
    // look-agains, then to a poll (10 minutes here). Nothing announces the slot that the
    // job's outcome frees: the outcome written wakes a loop.
    const tenant = 'one-slot';
    await db.tusk.tenants.set(tenant, { slots: 1 });
    const ends: number[] = [];
    const worker = db.worker({
      queues: ['one-slot'],
      concurrency: 4,
      pollMs: 600_000,
      tasks: {
        // past the look-agains (510 ms in all): only a wake-up starts the next one
        long: async () => {
          await sleep(700);
          ends.push(performance.now());
        },
      },
    });
    await worker.start();
    try {
      const ids = [];
      for (let i = 0; i < 3; i++) ids.push((await db.tusk.enqueue('long', {}, { queue: 'one-slot', tenant })).id);
      for (const id of ids) expect((await finished(id, 20_000))?.state).toBe('succeeded');
      expect(ends).toHaveLength(3);
    } finally {
      await worker.stop();
    }
  });

  it("a claim under way when a limited tenant's outcome is written looks again: the next job does not wait for the poll (3 times)", async () => {
    // The job's end wakes a loop, whose claim takes all the room and is answered after the
    // outcome commits, with a snapshot from before it: empty. The other loop had no room
    // and sleeps a poll. The outcome written must count as an announcement the claim
    // overlapped, so that it looks again.
    for (let round = 0; round < 3; round++) {
      const queue = `slot-race-${round}`;
      const tenant = `slot-race-${round}`;
      await db.tusk.tenants.set(tenant, { slots: 1 });
      const pool = new pg.Pool({ connectionString: db.url, max: 4 });
      const query = pool.query.bind(pool) as (...args: unknown[]) => Promise<unknown>;
      let armed = false;
      let written!: () => void;
      const outcome = new Promise<void>((resolve) => {
        written = resolve;
      });
      pool.query = ((...args: unknown[]) => {
        const first = args[0] as string | { text?: string };
        const text = typeof first === 'string' ? first : first?.text;
        if (armed && text?.includes('claim_jobs')) {
          // answered once the outcome is written and announced
          return query(...args).then(async (result) => {
            await outcome;
            await sleep(50);
            return result;
          });
        }
        if (armed && text?.includes('finish_jobs')) {
          return query(...args).then((result) => {
            written();
            return result;
          });
        }
        return query(...args);
      }) as typeof pool.query;
      const tusk = db.another({ pool });
      let release!: () => void;
      const held = new Promise<void>((resolve) => {
        release = resolve;
      });
      const worker = db.worker(
        {
          queues: [queue],
          concurrency: 2,
          prefetch: 0,
          pollMs: 600_000,
          tasks: {
            step: async (p: { n: number }) => {
              if (p.n === 0) await held;
            },
          },
        },
        tusk,
      );
      try {
        await worker.start();
        const first = await db.tusk.enqueue('step', { n: 0 }, { queue, tenant });
        await eventually(async () => (await db.tusk.getJob(first.id))?.state === 'running');
        const second = await db.tusk.enqueue('step', { n: 1 }, { queue, tenant });
        // past the look-agains after the claims the second job's notification woke
        await sleep(800);
        armed = true;
        release();
        expect((await finished(second.id, 10_000))?.state).toBe('succeeded');
      } finally {
        release();
        await worker.stop();
        await tusk.close();
        await pool.end();
      }
    }
  });

  it('retries a failing job with backoff until dead, keeping every attempt error', async () => {
    const worker = db.worker({
      queues: ['retry'],
      tasks: {
        flaky: {
          handler: (_p, ctx) => {
            throw new Error(`failure #${ctx.job.attempt}`);
          },
          retry: { backoff: 20 },
        },
      },
    });
    await worker.start();
    const { id } = await db.tusk.enqueue('flaky', {}, { queue: 'retry', maxAttempts: 3 });
    const job = (await finished(id)) as Job;
    await worker.stop();
    expect(job.state).toBe('dead');
    expect(job.attempts).toBe(3);
    expect(job.errors.map((e) => [e.attempt, e.message])).toEqual([
      [1, 'failure #1'],
      [2, 'failure #2'],
      [3, 'failure #3'],
    ]);
    expect(job.error?.stack).toContain('failure #3');
    expect(job.error?.name).toBe('Error');
  });

  it('a job that failed once and then succeeded keeps its error history', async () => {
    const worker = db.worker({
      queues: ['retry2'],
      tasks: {
        once: {
          handler: (_p, ctx) => {
            if (ctx.job.attempt === 1) throw 'a plain string';
            return 'ok';
          },
          retry: { backoff: 0 },
        },
      },
    });
    await worker.start();
    const { id } = await db.tusk.enqueue('once', {}, { queue: 'retry2' });
    const job = (await finished(id)) as Job;
    await worker.stop();
    expect(job).toMatchObject({ state: 'succeeded', attempts: 2, result: 'ok' });
    expect(job.errors).toHaveLength(1);
    expect(job.errors[0]).toMatchObject({
      attempt: 1,
      name: 'NonError',
      message: 'a non-Error value was thrown: "a plain string"',
    });
  });

  it('ends a job whose expiresAt passed before it ran as expired, without running it', async () => {
    let ran = false;
    const { id } = await db.tusk.enqueue('stale', {}, { queue: 'expiry', expiresAt: new Date(Date.now() + 100) });
    await db.clockPast('SELECT expires_at FROM $schema.jobs WHERE id = $1', [id]);
    const worker = db.worker({
      queues: ['expiry'],
      tasks: {
        stale: () => {
          ran = true;
        },
      },
    });
    await worker.start();
    const job = (await finished(id)) as Job;
    await worker.stop();
    expect(job.state).toBe('expired');
    expect(job.startedAt).toBeNull();
    expect(ran).toBe(false);
  });

  it('fails a job of an unknown task with a clear error and keeps running others', async () => {
    const worker = db.worker({ queues: ['unknown'], tasks: { known: () => 'fine' } });
    await worker.start();
    const { id: bad } = await db.tusk.enqueue('nobody_handles_this', {}, { queue: 'unknown', maxAttempts: 1 });
    const { id: good } = await db.tusk.enqueue('known', {}, { queue: 'unknown' });
    const [badJob, goodJob] = await Promise.all([finished(bad), finished(good)]);
    await worker.stop();
    expect(badJob).toMatchObject({ state: 'dead' });
    expect(badJob?.error).toMatchObject({
      name: 'UnknownTaskError',
      message: 'no handler for task "nobody_handles_this" in this worker (it has: "known")',
    });
    expect(goodJob?.state).toBe('succeeded');
  });

  it('times out a handler that never resolves, and records it', async () => {
    const worker = db.worker({
      queues: ['timeout'],
      tasks: { hang: { handler: () => new Promise(() => {}), timeoutMs: 150, retry: { backoff: 0 } } },
    });
    await worker.start();
    const { id } = await db.tusk.enqueue('hang', {}, { queue: 'timeout', maxAttempts: 2 });
    const job = (await finished(id)) as Job;
    await worker.stop();
    expect(job.state).toBe('dead');
    expect(job.errors.map((e) => e.name)).toEqual(['JobTimeoutError', 'JobTimeoutError']);
    expect(job.error?.message).toBe('the job ran past its timeout of 150 ms');
  });

  it('times out an attempt whose payload validation never settles, as a handler that never returns', async () => {
    const hung = hungSchema();
    const worker = db.worker({
      queues: ['hung-validate'],
      tasks: { checked: { handler: () => 'never', schema: hung.schema, timeoutMs: 200 } },
    });
    await worker.start();
    const { id } = await db.tusk.enqueue('checked', {}, { queue: 'hung-validate', maxAttempts: 1 });
    // before, the time limit started with the handler, after the validation: the job ran for good
    const job = await eventually(async () => {
      const j = await db.tusk.getJob(id);
      return j?.state === 'dead' ? j : null;
    }, 10_000);
    expect(job.error?.name).toBe('JobTimeoutError');
    await worker.stop();
  });

  it('cancels a running job: its signal aborts and it ends cancelled', async () => {
    let aborted: unknown = null;
    let started = false;
    const worker = db.worker({
      queues: ['cancel'],
      tasks: {
        long: (_p, ctx) =>
          new Promise((_resolve, reject) => {
            started = true;
            ctx.signal.addEventListener('abort', () => {
              aborted = ctx.signal.reason;
              reject(ctx.signal.reason);
            });
          }),
      },
    });
    await worker.start();
    const { id } = await db.tusk.enqueue('long', {}, { queue: 'cancel' });
    // its handler running, not only its row claimed (a job held ahead ends cancelled unstarted)
    await eventually(() => started);
    expect(await db.tusk.cancel(id)).toBe('running');
    const job = (await finished(id)) as Job;
    await worker.stop();
    expect(job.state).toBe('cancelled');
    expect((aborted as Error).name).toBe('JobCancelledError');
  });

  it('cancels a job claimed ahead and not started: it never runs, though a slot frees before the heartbeat that reads the cancel answers', async () => {
    const { worker, ids, ran, release } = await oneRunningOneAhead('cancel-ahead');
    // the heartbeat the cancel asks for waits: the worker's row is locked
    const locker = await session();
    await locker.query('BEGIN');
    await locker.query(`SELECT 1 FROM "${db.schema}".workers WHERE id = $1 FOR UPDATE`, [worker.id]);
    expect(await db.tusk.cancel(ids[1] as string)).toBe('running');
    await eventually(
      async () =>
        (await db.rows(`SELECT 1 FROM pg_stat_activity WHERE query LIKE '%heartbeat(%' AND wait_event_type = 'Lock'`))
          .length > 0,
    );
    // job 1 ends: its slot is free while that heartbeat waits (before, job 2 started then)
    release();
    await eventually(async () => (await stateOf(ids[0] as string)) === 'succeeded');
    await sleep(200);
    expect(ran).toEqual([1]);
    await locker.query('COMMIT');
    expect(await finished(ids[1] as string)).toMatchObject({ state: 'cancelled' });
    await worker.stop();
    expect(ran).toEqual([1]);
  });

  it("a notification on the cancel channel from anyone (no right on the schema) cancels nothing: the job's row decides", async () => {
    let release!: () => void;
    const released = new Promise<void>((resolve) => {
      release = resolve;
    });
    let started = false;
    let aborted = false;
    const worker = db.worker({
      queues: ['cancel-spoof'],
      tasks: {
        long: async (_p, ctx) => {
          started = true;
          ctx.signal.addEventListener('abort', () => {
            aborted = true;
          });
          await released;
          return 'done';
        },
      },
    });
    await worker.start();
    const { id } = await db.tusk.enqueue('long', {}, { queue: 'cancel-spoof' });
    await eventually(() => started);
    const outsider = await session();
    const probe = await session();
    let heard = false;
    probe.on('notification', () => {
      heard = true;
    });
    await probe.query(`LISTEN "${db.schema}:cancel"`);
    // a role that may not call cancel_job, nor read the schema; NOTIFY needs no privilege
    await outsider.query('SET ROLE pg_monitor');
    await expect(outsider.query(`SELECT "${db.schema}".cancel_job($1)`, [id])).rejects.toThrow(/permission denied/);
    await outsider.query('SELECT pg_notify($1, $2)', [`${db.schema}:cancel`, id]);
    // the worker hears it when the probe does; before, it aborted the handler at once
    await eventually(() => heard);
    await sleep(200);
    release();
    const job = (await finished(id)) as Job;
    await worker.stop();
    expect(aborted).toBe(false);
    expect(job).toMatchObject({ state: 'succeeded', result: 'done' });
  });

  it("cancels a job whose cancel was heard before its claim's answer came: it never runs", async () => {
    // The claim commits, then the cancel, whose notification reaches the worker's listening
    // connection before the claim's answer (held at a gate) reaches the worker. Before, the
    // job was held with no cancel heard of it and started on its claim alone: its handler
    // ran, to be aborted by the next heartbeat.
    const gate = await Gate.open(db.url);
    // the pool through the gate, its connections kept (a new one would be held at its
    // startup); the listening connection, which takes the pool's settings, straight there
    const gated = new pg.Pool({ connectionString: gate.url, max: 8, idleTimeoutMillis: 0 });
    const pool = new Proxy(gated, {
      get(target, key) {
        if (key === 'options') return { ...target.options, connectionString: db.url };
        const value = Reflect.get(target, key, target);
        return typeof value === 'function' ? value.bind(target) : value;
      },
    });
    const tusk = db.another({ pool });
    const ran: string[] = [];
    const worker = db.worker(
      {
        queues: ['cancel-in-flight'],
        concurrency: 1,
        // its claim loops sleep until a job is announced, and no upkeep of its own holds a connection
        pollMs: 60_000,
        maintenanceMs: 600_000,
        tasks: {
          long: (_p, ctx) => {
            ran.push(ctx.job.id);
            return new Promise((_resolve, reject) => {
              ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason));
            });
          },
        },
      },
      tusk,
    );
    const probe = await session();
    let heard = 0;
    probe.on('notification', () => {
      heard++;
    });
    await probe.query(`LISTEN "${db.schema}:cancel"`);
    // the claim loops asleep: none of the pool's connections busy for longer than their look-agains last
    const quiet = async () =>
      (
        await db.rows(
          `SELECT 1 FROM pg_stat_activity WHERE client_port = ANY($1)
           AND (state <> 'idle' OR state_change > clock_timestamp() - interval '600 ms')`,
          [gate.ports()],
        )
      ).length === 0;
    try {
      await Promise.all(Array.from({ length: 8 }, () => gated.query('SELECT pg_sleep(0.01)')));
      await worker.start();
      for (let round = 0; round < 5; round++) {
        await eventually(quiet);
        gate.hold();
        const { id } = await db.tusk.enqueue('long', {}, { queue: 'cancel-in-flight' });
        // its claim committed, its answer held at the gate
        await eventually(async () => (await stateOf(id)) === 'running');
        const before = heard;
        expect(await db.tusk.cancel(id)).toBe('running');
        // the worker hears it when the probe does (a moment more for the worker)
        await eventually(() => heard > before);
        await sleep(50);
        gate.release();
        expect(await finished(id)).toMatchObject({ state: 'cancelled' });
        expect(ran).toEqual([]);
      }
    } finally {
      gate.release();
      await worker.stop();
      await tusk.close();
      await gated.end();
      await gate.close();
    }
  });

  it('a notification of a cancel no one asked for, of a job held ahead, holds it back one heartbeat: it then runs', async () => {
    const { worker, ids, ran, release } = await oneRunningOneAhead('cancel-spoof-ahead');
    await db.pool.query('SELECT pg_notify($1, $2)', [`${db.schema}:cancel`, ids[1]]);
    release();
    expect(await finished(ids[1] as string)).toMatchObject({ state: 'succeeded' });
    await worker.stop();
    expect(ran).toEqual([1, 2]);
  });
});

describe('throughput options', () => {
  it('batchSize bounds claims and writes; asyncCommit still records every outcome', async () => {
    const { ids } = await db.tusk.enqueueMany(
      Array.from({ length: 300 }, (_, i) => ({ task: 'even', payload: i, queue: 'tp' })),
    );
    const worker = db.worker({
      queues: ['tp'],
      batchSize: 50,
      asyncCommit: true,
      tasks: {
        even: { handler: (n: number) => (n % 2 ? Promise.reject(new Error('odd')) : n), retry: { backoff: 0 } },
      },
    });
    await worker.start();
    await eventually(async () => (await db.rows(`SELECT 1 FROM $schema.jobs WHERE queue = 'tp'`)).length === 0);
    await worker.stop();
    const states = await db.rows<{ state: string; n: number }>(
      `SELECT state::text, count(*)::int AS n FROM $schema.job_history WHERE id = ANY($1::bigint[]) GROUP BY 1 ORDER BY 1`,
      [ids],
    );
    expect(states).toEqual([
      { state: 'dead', n: 150 },
      { state: 'succeeded', n: 150 },
    ]);
    expect(worker.counters.claimed).toBe(300 + 150 * 4); // odd ones: 5 attempts each
  });
});

describe('graceful stop', () => {
  it('lets running jobs finish within the grace period', async () => {
    let started = false;
    const worker = db.worker({
      queues: ['stop1'],
      tasks: {
        slow: async () => {
          started = true;
          // running on once stop() waits (no event marks that): a stop stalled 300 ms first would hide an early abort
          await sleep(300);
          return 'done';
        },
      },
    });
    await worker.start();
    const { id } = await db.tusk.enqueue('slow', {}, { queue: 'stop1' });
    // its handler running, not only its row claimed (a job held ahead is handed back unstarted)
    await eventually(() => started);
    await worker.stop();
    expect(await db.tusk.getJob(id)).toMatchObject({ state: 'succeeded', result: 'done' });
  });

  it('aborts and releases jobs still running after the grace period (attempt counted)', async () => {
    let started = false;
    let signalled = false;
    const worker = db.worker({
      queues: ['stop2'],
      shutdownTimeoutMs: 200,
      tasks: {
        stuck: (_p, ctx) =>
          new Promise(() => {
            started = true;
            ctx.signal.addEventListener('abort', () => {
              signalled = true;
            });
          }),
      },
    });
    await worker.start();
    const { id } = await db.tusk.enqueue('stuck', {}, { queue: 'stop2' });
    // its handler running, not only its row claimed: a job the stop finds still held
    // ahead is handed back unstarted, and no handler hears an abort (a failed run)
    await eventually(() => started);
    // the handler never settles: stop() returns only because the grace period ends it
    await worker.stop();
    expect(signalled).toBe(true);
    const job = await db.tusk.getJob(id);
    expect(job).toMatchObject({ state: 'available', attempts: 1 });
    expect(job?.error?.name).toBe('WorkerStoppingError');
    expect((await db.tusk.tenants.get('default'))?.running).toBe(0);
  });

  it('a job aborted at the stop with no attempt left ends dead, not retried past maxAttempts', async () => {
    let started = false;
    const worker = db.worker({
      queues: ['stop-last'],
      shutdownTimeoutMs: 200,
      tasks: {
        stuck: () =>
          new Promise(() => {
            started = true;
          }),
      },
    });
    await worker.start();
    const { id } = await db.tusk.enqueue('stuck', {}, { queue: 'stop-last', maxAttempts: 1 });
    // its handler running, not only its row claimed (a job held ahead is handed back unstarted)
    await eventually(() => started);
    await worker.stop();
    const job = await db.tusk.getJob(id);
    expect(job).toMatchObject({ state: 'dead', attempts: 1 });
    expect(job?.error?.name).toBe('WorkerStoppingError');
  });

  it("renews its running jobs' leases while it waits for them to finish: a grace longer than the lease loses none", async () => {
    let release!: () => void;
    const released = new Promise<void>((resolve) => {
      release = resolve;
    });
    let started = false;
    const worker = db.worker({
      queues: ['stop-lease'],
      leaseMs: 2000,
      shutdownTimeoutMs: 60_000,
      tasks: {
        long: async () => {
          started = true;
          await released;
          return 'done';
        },
      },
    });
    await worker.start();
    const { id } = await db.tusk.enqueue('long', {}, { queue: 'stop-lease' });
    // its handler running, not only claimed (a job held ahead is given back at the stop)
    await eventually(() => started);
    const leaseOf = async () =>
      (await db.rows<{ until: Date }>('SELECT lease_until AS until FROM $schema.jobs WHERE id = $1', [id]))[0]?.until;
    const stopped = worker.stop();
    try {
      const atStop = await leaseOf();
      // before, the heartbeats stopped with the claims: the lease ran out while the handler
      // ran, and an upkeep gave the job to another worker
      await eventually(async () => ((await leaseOf())?.getTime() ?? 0) > (atStop?.getTime() ?? 0), 6000);
      await eventually(async () => ((await leaseOf())?.getTime() ?? 0) > Date.now() + 1000, 6000);
      await db.tusk.upkeep().runOnce();
      expect(await stateOf(id)).toBe('running');
    } finally {
      release();
      await stopped;
    }
    expect(await db.tusk.getJob(id)).toMatchObject({ state: 'succeeded', attempts: 1, result: 'done' });
  });

  it('stops within its grace while a payload validation never settles, and gives the job back', async () => {
    const hung = hungSchema();
    const worker = db.worker({
      queues: ['stop-validate'],
      leaseMs: 2000,
      shutdownTimeoutMs: 300,
      tasks: { checked: { handler: () => 'never', schema: hung.schema } },
    });
    await worker.start();
    const { id } = await db.tusk.enqueue('checked', {}, { queue: 'stop-validate' });
    // its attempt begun, not only claimed (a job held ahead is given back at the stop)
    await eventually(hung.begun);
    // before, the abort did not reach the validation: stop() never returned, and its beats
    // kept the job this worker's for good
    const outcome = await Promise.race([
      worker.stop().then(() => 'stopped'),
      sleep(10_000).then(() => 'still stopping'),
    ]);
    expect(outcome).toBe('stopped');
    const job = await db.tusk.getJob(id);
    expect(job).toMatchObject({ state: 'available', attempts: 1 });
    expect(job?.error?.name).toBe('WorkerStoppingError');
  });

  it('gives back jobs claimed ahead but not started, without counting an attempt', async () => {
    const { ids } = await db.tusk.enqueueMany(Array.from({ length: 6 }, () => ({ task: 'slow', queue: 'stop3' })));
    // the first job runs until the stop has begun: the five behind it are still held ahead
    let finish!: () => void;
    const held = new Promise<void>((resolve) => {
      finish = resolve;
    });
    let runs = 0;
    const slow = async () => {
      runs++;
      await held;
    };
    const worker = db.worker({ queues: ['stop3'], concurrency: 1, prefetch: 5, tasks: { slow } });
    await worker.start();
    await eventually(
      async () =>
        (await db.rows(`SELECT 1 FROM $schema.jobs WHERE queue = 'stop3' AND state = 'running'`)).length === 6,
    );
    await eventually(() => runs === 1);
    const stopped = worker.stop();
    finish();
    await stopped;
    expect(runs).toBe(1);
    const jobs = await Promise.all(ids.map((id) => db.tusk.getJob(id)));
    expect(jobs.filter((j) => j?.state === 'succeeded')).toHaveLength(1);
    expect(jobs.filter((j) => j?.state === 'available').every((j) => j?.attempts === 0 && j.error === null)).toBe(true);
    expect(jobs.filter((j) => j?.state === 'available')).toHaveLength(5);
  });
});

describe('exactly-once claim', () => {
  it('three workers on 600 jobs: each job runs once, never twice at the same time', async () => {
    const runs = new Map<string, number>();
    let overlap = 0;
    const active = new Set<string>();
    const handler = async (_p: unknown, ctx: JobContext) => {
      if (active.has(ctx.job.id)) overlap++;
      active.add(ctx.job.id);
      runs.set(ctx.job.id, (runs.get(ctx.job.id) ?? 0) + 1);
      // random run times mix the three workers' claims and finishes: an interleaving, not a wait
      await sleep(Math.random() * 3);
      active.delete(ctx.job.id);
    };
    const { ids } = await db.tusk.enqueueMany(
      Array.from({ length: 600 }, (_, i) => ({ task: 'once', queue: 'race', tenant: `t${i % 4}` })),
    );
    const workers = [0, 1, 2].map(() =>
      db.worker({ queues: ['race'], concurrency: 8, tasks: { once: handler } }, db.another()),
    );
    await Promise.all(workers.map((w) => w.start()));
    await eventually(
      async () => (await db.rows(`SELECT 1 FROM $schema.jobs WHERE queue = 'race'`)).length === 0,
      20_000,
    );
    await Promise.all(workers.map((w) => w.stop()));
    expect(overlap).toBe(0);
    expect(ids.every((id) => runs.get(id) === 1)).toBe(true);
    const history = await db.rows<{ n: number }>(
      `SELECT count(*)::int AS n FROM $schema.job_history WHERE queue = 'race' AND state = 'succeeded'`,
    );
    expect(history[0]?.n).toBe(600);
  });
});
