import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { type Job, type JobContext, LeaseLostError, type Tusk } from '../src/index.js';
import { registerWorker, unregisterWorker } from '../src/queries/workers.js';
import { claimByWeight } from '../src/worker/claimByWeight.js';
import { eventually, useTestDb } from './helpers.js';

const db = useTestDb(import.meta.url);
const finished = (id: string, tusk: Tusk = db.tusk) =>
  eventually(async () => {
    const job = await tusk.getJob(id);
    return job && ['succeeded', 'dead', 'cancelled', 'expired'].includes(job.state) ? job : null;
  });
const emptyQueue = async (queue: string) =>
  (await db.rows('SELECT 1 FROM $schema.jobs WHERE queue = $1 LIMIT 1', [queue])).length === 0;

describe('named queues with weights', () => {
  it('both queues full: the served ratio over 10 000 jobs is 8:1 within 5 %', async () => {
    const per = 12_000;
    for (const queue of ['w-critical', 'w-default']) {
      for (let i = 0; i < per; i += 6000) {
        await db.tusk.enqueueMany(Array.from({ length: 6000 }, () => ({ task: 'count', queue })));
      }
    }
    const served = { 'w-critical': 0, 'w-default': 0 };
    let total = 0;
    const worker = db.worker({
      queues: [
        ['w-critical', 8],
        ['w-default', 1],
      ],
      tasks: {
        count: (_p, ctx) => {
          if (total++ < 10_000) served[ctx.job.queue as keyof typeof served]++;
        },
      },
    });
    await worker.start();
    await eventually(() => total >= 10_000, 60_000);
    await worker.stop();
    const ratio = served['w-critical'] / served['w-default'];
    console.log(
      `weighted queues: ${served['w-critical']} critical / ${served['w-default']} default = ${ratio.toFixed(2)}:1`,
    );
    expect(ratio).toBeGreaterThan(8 * 0.95);
    expect(ratio).toBeLessThan(8 * 1.05);
    await db.pool.query(`DELETE FROM "${db.schema}".jobs WHERE queue IN ('w-critical', 'w-default')`);
  });

  it('a lone low-weight queue is served at once when the high one is empty', async () => {
    const { ids } = await db.tusk.enqueueMany(
      Array.from({ length: 50 }, () => ({ task: 'noop', queue: 'lw-default' })),
    );
    // a poll every 10 minutes: 50 jobs one claim at a time finish within the wait below
    // only if an empty high-weight queue never makes the worker wait for its poll
    const worker = db.worker({
      queues: [
        ['lw-critical', 8],
        ['lw-default', 1],
      ],
      prefetch: 0,
      pollMs: 600_000,
      tasks: { noop: () => {} },
    });
    await worker.start();
    await eventually(() => emptyQueue('lw-default'), 120_000);
    await worker.stop();
    expect((await db.tusk.getJob(ids[49] as string))?.state).toBe('succeeded');
  });

  it('a claim whose last queue is empty takes its share from a queue that has more', async () => {
    await db.tusk.enqueueMany(Array.from({ length: 20 }, () => ({ task: 'noop', queue: 'cw-heavy' })));
    // the worker's registration holds a session lock: its own connection
    const session = new pg.Client({ connectionString: db.url });
    await session.connect();
    try {
      const registration = { id: null, name: 'cw', host: 'h', pid: 1, queues: null, concurrency: 9, version: 't' };
      const worker = await registerWorker(session, db.schema, registration);
      const queues: Array<[string, number]> = [
        ['cw-heavy', 8],
        ['cw-empty', 1],
      ];
      // 9 slots split 8 + 1; the empty queue's one goes back to the heavy queue
      const rows = await claimByWeight(db.pool, db.schema, { worker, want: 9, leaseMs: 60_000, queues });
      expect(rows).toHaveLength(9);
      await unregisterWorker(session, db.schema, worker);
    } finally {
      await session.end();
      await db.pool.query(`DELETE FROM "${db.schema}".jobs WHERE queue = 'cw-heavy'`);
    }
  });

  it('jobs go to their task definition’s queue unless the enqueue names one', async () => {
    const tusk = db.another({ tasks: { mail: { queue: 'mail-q', retry: { maxAttempts: 2 } } } });
    const { id } = await tusk.enqueue('mail', {});
    const { id: other } = await tusk.enqueue('mail', {}, { queue: 'urgent' });
    const { id: plain } = await tusk.enqueue('other', {});
    expect(await tusk.getJob(id)).toMatchObject({ queue: 'mail-q', maxAttempts: 2 });
    expect((await tusk.getJob(other))?.queue).toBe('urgent');
    expect((await tusk.getJob(plain))?.queue).toBe('default');
    await db.pool.query(`DELETE FROM "${db.schema}".jobs WHERE id = ANY($1)`, [[id, other, plain]]);
  });
});

describe('retry policies', () => {
  it('a backoff function returning false ends the job dead at once', async () => {
    const worker = db.worker({
      queues: ['rp1'],
      tasks: {
        picky: { handler: () => Promise.reject(new Error('record not found')), retry: { backoff: () => false } },
      },
    });
    await worker.start();
    const { id } = await db.tusk.enqueue('picky', {}, { queue: 'rp1', maxAttempts: 10 });
    const job = (await finished(id)) as Job;
    await worker.stop();
    expect(job).toMatchObject({ state: 'dead', attempts: 1 });
    expect(job.error?.message).toBe('record not found');
  });

  it('retry.queue moves retries to another queue; the per-enqueue retry wins over the task’s', async () => {
    const seen: string[] = [];
    const handler = (_p: unknown, ctx: JobContext) => {
      seen.push(`${ctx.job.queue}#${ctx.job.attempt}`);
      if (ctx.job.attempt < 3) throw new Error('again');
    };
    const worker = db.worker({
      queues: ['rp2', 'rp2-retries', 'rp2-mine'],
      tasks: { flaky: { handler, retry: { backoff: 10, queue: 'rp2-retries' } } },
    });
    await worker.start();
    const { id } = await db.tusk.enqueue('flaky', {}, { queue: 'rp2' });
    const { id: own } = await db.tusk.enqueue('flaky', {}, { queue: 'rp2', retry: { backoff: 0, queue: 'rp2-mine' } });
    const [job, ownJob] = await Promise.all([finished(id), finished(own)]);
    await worker.stop();
    expect(job).toMatchObject({ state: 'succeeded', attempts: 3, queue: 'rp2-retries' });
    expect(ownJob).toMatchObject({ state: 'succeeded', attempts: 3, queue: 'rp2-mine' });
    expect(seen.filter((s) => s.startsWith('rp2-retries'))).toEqual(['rp2-retries#2', 'rp2-retries#3']);
  });

  it('a backoff function cannot be given per enqueue (it is not data)', async () => {
    await expect(db.tusk.enqueue('x', {}, { retry: { backoff: (() => 5) as never } })).rejects.toThrow(
      /options\.retry\.backoff: must be 'exponential' or a number of milliseconds/,
    );
  });

  it('retry(id) re-queues a dead job, retryAll a set of them', async () => {
    const worker = db.worker({
      queues: ['rp3'],
      tasks: { boom: { handler: () => Promise.reject(new Error('no')), retry: { backoff: 0 } } },
    });
    await worker.start();
    const { ids } = await db.tusk.enqueueMany(
      Array.from({ length: 3 }, () => ({ task: 'boom', queue: 'rp3', maxAttempts: 1 })),
    );
    for (const id of ids) expect((await finished(id))?.state).toBe('dead');
    await worker.stop();

    expect(await db.tusk.retry(ids[0] as string)).toBe(true);
    const revived = await db.tusk.getJob(ids[0] as string);
    expect(revived).toMatchObject({ state: 'available', attempts: 0 });
    expect(revived?.errors).toHaveLength(1); // the old attempt's error is kept
    expect(await db.tusk.retryAll({ task: 'boom', queue: 'rp3', state: 'dead' })).toBe(2);
    expect(await db.tusk.retry('987654321')).toBeNull();

    const fixed = db.worker({ queues: ['rp3'], tasks: { boom: () => 'fixed' } });
    await fixed.start();
    for (const id of ids) expect(await finished(id)).toMatchObject({ state: 'succeeded', result: 'fixed' });
    await fixed.stop();
    expect(await db.tusk.retry(ids[0] as string)).toBe(false); // succeeded jobs are not re-run
  });

  it('one not-found convention: an unknown id or name reads as null, never throws', async () => {
    const unknown = '987654320';
    expect(await db.tusk.getJob(unknown)).toBeNull();
    expect(await db.tusk.cancel(unknown)).toBeNull();
    expect(await db.tusk.retry(unknown)).toBeNull();
    expect(await db.tusk.tenants.get('nf-nobody')).toBeNull();
    expect(await db.tusk.schedules.get('nf-nothing')).toBeNull();
    expect(await db.tusk.schedules.remove('nf-nothing')).toBe(false);
    // known: a job that can be neither cancelled nor retried now says so by its state / false
    const { id } = await db.tusk.enqueue('nf', {}, { queue: 'nf', delayMs: 60_000 });
    expect(await db.tusk.retry(id)).toBe(false);
    expect(await db.tusk.cancel(id)).toBe('cancelled');
    expect(await db.tusk.retry(id)).toBe(true);
    expect((await db.tusk.tenants.get('default'))?.tenant).toBe('default');
    await db.pool.query(`DELETE FROM "${db.schema}".jobs WHERE queue = 'nf'`);
  });
});

describe('Disque-style leases for external workers', () => {
  it('fetch, extendLease, ack; a second ack of the same lease is refused', async () => {
    const { id } = await db.tusk.enqueue('external', { n: 1 }, { queue: 'ext' });
    const [job] = await db.tusk.fetch({ queue: 'ext', count: 5, leaseMs: 10_000 });
    expect(job).toMatchObject({ id, attempt: 1, task: 'external', payload: { n: 1 } });
    expect((await db.tusk.getJob(id))?.state).toBe('running');
    const until = await db.tusk.extendLease(job as never, 60_000);
    expect(until.getTime() - Date.now()).toBeGreaterThan(55_000);
    await db.tusk.ack(job as never, { done: true });
    expect(await db.tusk.getJob(id)).toMatchObject({ state: 'succeeded', result: { done: true } });
    await expect(db.tusk.ack(job as never)).rejects.toThrow(/cannot ack job \d+ \(lease \d+\): it is succeeded now/);
  });

  it('working extends the lease and tells the consumer of a cancel asked for; a lost lease throws', async () => {
    const { ids } = await db.tusk.enqueueMany([
      { task: 'external', queue: 'ext-working' },
      { task: 'external', queue: 'ext-working' },
    ]);
    const [a, b] = await db.tusk.fetch({ queue: 'ext-working', count: 2, leaseMs: 10_000 });
    expect([a?.id, b?.id].sort()).toEqual([...ids].sort());
    const kept = await db.tusk.working(a as never, 60_000);
    expect(kept.cancelRequested).toBe(false);
    expect(kept.leaseUntil.getTime() - Date.now()).toBeGreaterThan(55_000);
    // a cancel asked for while the consumer works: its next WORKING says so, and only for that job
    expect(await db.tusk.cancel(a?.id as string)).toBe('running');
    expect((await db.tusk.working(a as never, 60_000)).cancelRequested).toBe(true);
    expect((await db.tusk.working(b as never, 60_000)).cancelRequested).toBe(false);
    await db.tusk.ack(b as never);
    await expect(db.tusk.working(b as never, 60_000)).rejects.toThrow(
      /cannot extend the lease of job \d+ \(lease \d+\): it is succeeded now/,
    );
    await db.tusk.nack(a as never, { error: 'cancelled' });
  });

  it('nack counts an attempt and returns the job to the queue, dead when out of attempts', async () => {
    const { id } = await db.tusk.enqueue('external', {}, { queue: 'ext-nack', maxAttempts: 2 });
    const [first] = await db.tusk.fetch({ queue: 'ext-nack' });
    expect(await db.tusk.nack(first as never, { error: 'upstream down' })).toBe('available');
    const [second] = await db.tusk.fetch({ queue: 'ext-nack' });
    expect(second?.attempt).toBe(2);
    expect(await db.tusk.nack(second as never, { delayMs: 1000 })).toBe('dead');
    const job = await db.tusk.getJob(id);
    expect(job?.state).toBe('dead');
    expect(job?.errors.map((e) => e.message)).toEqual(['upstream down', 'given back by its consumer']);
  });

  it('a lease that runs out returns the job to the queue; the old lease cannot ack it', async () => {
    const upkeep = db.worker({ queues: ['ext-nobody'], tasks: { x: () => {} }, maintenanceMs: 50 });
    await upkeep.start();
    const { id } = await db.tusk.enqueue('external', {}, { queue: 'ext-lease' });
    const [stale] = await db.tusk.fetch({ queue: 'ext-lease', leaseMs: 100 });
    await eventually(async () => (await db.tusk.getJob(id))?.state === 'available', 5_000);
    const [fresh] = await db.tusk.fetch({ queue: 'ext-lease', leaseMs: 10_000 });
    expect(fresh?.attempt).toBe(2);
    const error = await db.tusk.ack(stale as never).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LeaseLostError);
    expect((error as Error).message).toMatch(/its lease ran out and it was leased again \(now attempt 2, running\)/);
    await db.tusk.ack(fresh as never, 'ok');
    expect((await db.tusk.getJob(id))?.result).toBe('ok');
    await upkeep.stop();
  });

  it('a bare id is not a lease: a clear error', async () => {
    await expect(db.tusk.ack('42' as never)).rejects.toThrow(
      /lease: must be the leased job returned by fetch, or \{ id, token \}/,
    );
  });

  it('the same operations work from plain SQL', async () => {
    await db.tusk.enqueue('sql-task', { from: 'psql' }, { queue: 'ext-sql' });
    const [leased] = await db.rows<{ id: string; lease_token: string; payload: unknown }>(
      `SELECT id, lease_token, payload FROM $schema.fetch_jobs(1, 30000, 'ext-sql')`,
    );
    expect(leased?.payload).toEqual({ from: 'psql' });
    const [acked] = await db.rows<{ ok: boolean }>('SELECT $schema.ack_job($1, $2, $3) AS ok', [
      leased?.id,
      leased?.lease_token,
      '{"via": "sql"}',
    ]);
    expect(acked?.ok).toBe(true);
    expect((await db.tusk.getJob(leased?.id as string))?.result).toEqual({ via: 'sql' });
  });

  it('working() from plain SQL: the new end of the lease and the cancel flag in one row, NULLs once the lease is gone', async () => {
    await db.tusk.enqueue('sql-task', {}, { queue: 'ext-sql-working' });
    const [leased] = await db.rows<{ id: string; lease_token: string }>(
      `SELECT id, lease_token FROM $schema.fetch_jobs(1, 30000, 'ext-sql-working')`,
    );
    const ask = async () =>
      (
        await db.rows<{ left_ms: number | null; cancel: boolean | null }>(
          `SELECT (extract(epoch FROM lease_until - clock_timestamp()) * 1000)::float8 AS left_ms, cancel_requested AS cancel
           FROM $schema.working($1, $2, 90000)`,
          [leased?.id, leased?.lease_token],
        )
      )[0];
    const first = await ask();
    expect(first?.cancel).toBe(false);
    expect(first?.left_ms).toBeGreaterThan(85_000);
    await db.tusk.cancel(leased?.id as string);
    expect((await ask())?.cancel).toBe(true);
    await db.rows('SELECT $schema.nack_job($1, $2)', [leased?.id, leased?.lease_token]);
    expect(await ask()).toEqual({ left_ms: null, cancel: null });
  });

  it('a lease taken or extended in a transaction open a while runs from when it is taken, not from the transaction start', async () => {
    await db.tusk.enqueue('sql-task', {}, { queue: 'ext-late' });
    const c = await db.pool.connect();
    try {
      await c.query('BEGIN');
      // the consumer's transaction has done other work for a second
      await c.query('SELECT pg_sleep(1)');
      const { rows } = await c.query<{ id: string; lease_token: string; left_ms: number }>(
        `SELECT id, lease_token, (extract(epoch FROM lease_until - clock_timestamp()) * 1000)::float8 AS left_ms
         FROM "${db.schema}".fetch_jobs(1, 800, 'ext-late')`,
      );
      // before, a lease of 800 ms ended 200 ms before it was handed out
      expect(rows[0]?.left_ms).toBeGreaterThan(0);
      await c.query('SELECT pg_sleep(1)');
      const extended = await c.query<{ left_ms: number }>(
        `SELECT (extract(epoch FROM "${db.schema}".extend_lease($1, $2, 800) - clock_timestamp()) * 1000)::float8 AS left_ms`,
        [rows[0]?.id, rows[0]?.lease_token],
      );
      expect(extended.rows[0]?.left_ms).toBeGreaterThan(0);
      await c.query('COMMIT');
    } finally {
      await c.query('ROLLBACK').catch(() => {});
      c.release();
    }
    await db.pool.query(`DELETE FROM "${db.schema}".jobs WHERE queue = 'ext-late'`);
  });

  it('ack_job without a token settles nothing: not a job waiting, nor one a lease holds', async () => {
    const waiting = await db.tusk.enqueue('sql-task', {}, { queue: 'ext-no-token' });
    const [acked] = await db.rows<{ ok: boolean }>('SELECT $schema.ack_job($1, NULL) AS ok', [waiting.id]);
    expect(acked?.ok).toBe(false);
    expect((await db.tusk.getJob(waiting.id))?.state).toBe('available');
    const [leased] = await db.rows<{ id: string }>(`SELECT id FROM $schema.fetch_jobs(1, 30000, 'ext-no-token')`);
    const [again] = await db.rows<{ ok: boolean }>('SELECT $schema.ack_job($1, NULL) AS ok', [leased?.id]);
    expect(again?.ok).toBe(false);
    expect((await db.tusk.getJob(leased?.id as string))?.state).toBe('running');
  });

  it('fetch_jobs without a lease length, or with one under 1 ms, or without a count, is refused and leases nothing', async () => {
    // a NULL lease end never runs out, and a fetched job has no worker whose death gives it
    // back: the job stayed running for good, its tenant's slot with it
    const { id } = await db.tusk.enqueue('sql-task', {}, { queue: 'ext-no-lease' });
    for (const ms of [null, 0, -5]) {
      await expect(db.rows(`SELECT id FROM $schema.fetch_jobs(1, $1, 'ext-no-lease')`, [ms])).rejects.toThrow(
        /lease_ms must be a lease length in milliseconds, 1 or more/,
      );
    }
    // a NULL count was no limit: every available job of the queue was leased
    await expect(db.rows(`SELECT id FROM $schema.fetch_jobs(NULL, 30000, 'ext-no-lease')`)).rejects.toThrow(
      /count must be given/,
    );
    await db.rows('SELECT $schema.maintain()');
    expect((await db.tusk.getJob(id))?.state).toBe('available');
    const [leased] = await db.rows<{ id: string; lease_until: Date | null }>(
      `SELECT id, lease_until FROM $schema.fetch_jobs(1, 30000, 'ext-no-lease')`,
    );
    expect(leased?.id).toBe(id);
    expect(leased?.lease_until).toBeInstanceOf(Date);
    await db.tusk.cancel(id);
  });

  it('extend_lease and working without a duration, or with one under 1 ms, are refused, and the lease runs on as it was', async () => {
    // a NULL lease end matched neither a lease that ran out nor a dead worker's job: the
    // job stayed running for good; one of 0 or less was over at once, and the next upkeep
    // took the job back from the worker still on it
    await db.tusk.enqueue('sql-task', {}, { queue: 'ext-null-ms' });
    const [leased] = await db.rows<{ id: string; lease_token: string; lease_until: Date }>(
      `SELECT id, lease_token, lease_until FROM $schema.fetch_jobs(1, 50, 'ext-null-ms')`,
    );
    if (!leased) throw new Error('no job leased');
    await expect(db.rows('SELECT $schema.extend_lease($1, $2, NULL)', [leased.id, leased.lease_token])).rejects.toThrow(
      /ms must be given/,
    );
    await expect(
      db.rows('SELECT * FROM $schema.working($1, $2, NULL)', [leased.id, leased.lease_token]),
    ).rejects.toThrow(/ms must be given/);
    for (const ms of [0, -5]) {
      for (const call of ['SELECT $schema.extend_lease($1, $2, $3)', 'SELECT * FROM $schema.working($1, $2, $3)']) {
        await expect(db.rows(call, [leased.id, leased.lease_token, ms])).rejects.toThrow(
          `ms must be a lease length in milliseconds, 1 or more (got ${ms})`,
        );
      }
    }
    const [held] = await db.rows<{ lease_until: Date | null }>('SELECT lease_until FROM $schema.jobs WHERE id = $1', [
      leased.id,
    ]);
    expect(held?.lease_until).toEqual(leased.lease_until);
    // run out, the lease is given back by the upkeep (whose search for run-out leases is not
    // put off by an earlier slow one)
    await db.clockPast('SELECT lease_until FROM $schema.jobs WHERE id = $1', [leased.id]);
    await db.rows('UPDATE $schema.lane_prune SET reap_searched_at = NULL, reap_search_ms = 0');
    await db.rows('SELECT $schema.maintain()');
    expect((await db.tusk.getJob(leased.id))?.state).toBe('available');
  });
});

describe('deduplication', () => {
  it('50 concurrent identical enqueues produce exactly one job', async () => {
    const tusks = Array.from({ length: 5 }, () => db.another({ maxConnections: 10 }));
    const results = await Promise.all(
      Array.from({ length: 50 }, (_, i) =>
        (tusks[i % 5] as Tusk).enqueue('report', { sql: 'SELECT 1', user: 7 }, { tenant: 'dd', dedupe: true }),
      ),
    );
    const ids = new Set(results.map((r) => r.id));
    expect(ids.size).toBe(1);
    expect(results.filter((r) => !r.deduplicated)).toHaveLength(1);
    const rows = await db.rows(`SELECT id FROM $schema.jobs WHERE tenant = 'dd'`);
    expect(rows).toHaveLength(1);
  });

  it('the key ignores payload key order but not the tenant; a finished job or a passed window frees it', async () => {
    const a = await db.tusk.enqueue('report', { x: 1, y: 2 }, { tenant: 'dd2', dedupe: true });
    const b = await db.tusk.enqueue('report', { y: 2, x: 1 }, { tenant: 'dd2', dedupe: true });
    const c = await db.tusk.enqueue('report', { x: 1, y: 2 }, { tenant: 'dd3', dedupe: true });
    expect(b).toEqual({ id: a.id, deduplicated: true });
    expect(c.deduplicated).toBe(false);
    const k1 = await db.tusk.enqueue('report', {}, { tenant: 'dd2', dedupKey: 'user:9', dedupWindowMs: 100 });
    expect((await db.tusk.enqueue('report', { other: true }, { tenant: 'dd2', dedupKey: 'user:9' })).id).toBe(k1.id);
    await db.clockPast(`SELECT created_at + interval '100 milliseconds' FROM $schema.jobs WHERE id = $1`, [k1.id]);
    const k2 = await db.tusk.enqueue('report', {}, { tenant: 'dd2', dedupKey: 'user:9', dedupWindowMs: 100 });
    expect(k2.deduplicated).toBe(false);
    expect(k2.id).not.toBe(k1.id);
    await db.tusk.cancel(k2.id);
    const k3 = await db.tusk.enqueue('report', {}, { tenant: 'dd2', dedupKey: 'user:9' });
    expect(k3.deduplicated).toBe(false);
  });

  it('a retry keeps a dedup key for one job: jobs that held it in turn, or a retry racing an enqueue of it, are retried', async () => {
    const a = await db.tusk.enqueue('report', {}, { tenant: 'dd6', dedupKey: 'k' });
    await db.tusk.cancel(a.id);
    const b = await db.tusk.enqueue('report', {}, { tenant: 'dd6', dedupKey: 'k' });
    expect(b.id).not.toBe(a.id);
    await db.tusk.cancel(b.id);
    // before: a duplicate in jobs_dedup, and neither was retried
    expect(await db.tusk.retryAll({ tenant: 'dd6', state: 'cancelled' })).toBe(2);
    const keys = await db.rows<{ dedup_key: string | null }>(
      'SELECT dedup_key FROM $schema.jobs WHERE tenant = $1 ORDER BY id',
      ['dd6'],
    );
    expect(keys.map((k) => k.dedup_key)).toEqual(['k', null]);

    const c = await db.tusk.enqueue('report', {}, { tenant: 'dd7', dedupKey: 'k' });
    await db.tusk.cancel(c.id);
    const producer = await db.pool.connect();
    try {
      // a producer's transaction holds a new job with the key, not committed yet
      await producer.query('BEGIN');
      const d = await db.tusk.enqueue('report', {}, { tenant: 'dd7', dedupKey: 'k', client: producer });
      const retried = db.tusk.retry(c.id).catch((e: Error) => e.message);
      await eventually(
        async () =>
          (await db.rows(`SELECT 1 FROM pg_stat_activity WHERE query LIKE '%retry_jobs%' AND wait_event_type = 'Lock'`))
            .length > 0,
      );
      await producer.query('COMMIT');
      // before: the retry's insert met the committed key and failed
      expect(await retried).toBe(true);
      const rows = await db.rows<{ id: string; dedup_key: string | null }>(
        'SELECT id, dedup_key FROM $schema.jobs WHERE tenant = $1 ORDER BY id',
        ['dd7'],
      );
      expect(rows).toEqual([
        { id: c.id, dedup_key: null },
        { id: d.id, dedup_key: 'k' },
      ]);
    } finally {
      await producer.query('ROLLBACK').catch(() => {});
      producer.release();
    }
  });

  it('enqueueMany takes per-job options, deduplication included', async () => {
    const { ids, deduplicated } = await db.tusk.enqueueMany([
      { task: 'm', tenant: 'dd4', dedupKey: 'k', queue: 'q1' },
      { task: 'm', tenant: 'dd4', dedupKey: 'k' },
      { task: 'm', tenant: 'dd4', delayMs: 60_000 },
      { task: 'm', tenant: 'dd5', dedupKey: 'k', runAt: new Date(Date.now() + 60_000) },
    ]);
    expect(deduplicated).toEqual([false, true, false, false]);
    expect(ids[1]).toBe(ids[0]);
    expect(new Set(ids).size).toBe(3);
    expect((await db.tusk.getJob(ids[0] as string))?.queue).toBe('q1');
    expect((await db.tusk.getJob(ids[2] as string))?.state).toBe('scheduled');
    expect((await db.tusk.getJob(ids[3] as string))?.state).toBe('scheduled');
  });
});

describe('delayed jobs', () => {
  it('promoting due jobs reads only the due ones, however many wait for later', async () => {
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      await client.query(
        `INSERT INTO "${db.schema}".jobs (task, payload, queue, state, run_at)
         SELECT 'later', '{}', 'promote', 'scheduled', now() + interval '1 day' FROM generate_series(1, 5000)`,
      );
      await client.query(
        `INSERT INTO "${db.schema}".jobs (task, payload, queue, state, run_at)
         VALUES ('due', '{}', 'promote', 'scheduled', now() - interval '1 second')`,
      );
      const { rows } = await client.query(`SELECT "${db.schema}".promote_due_jobs() AS n`);
      // this transaction's own index statistics: entries the scan of jobs_due returned
      const { rows: stats } = await client.query(
        "SELECT pg_stat_get_xact_tuples_returned(format('%I.jobs_due', $1::text)::regclass)::int AS n",
        [db.schema],
      );
      expect(rows[0].n).toBe(1);
      expect(stats[0].n).toBeLessThan(10); // not the 5 000 jobs due tomorrow
    } finally {
      await client.query('ROLLBACK');
      client.release();
    }
  });

  it('never start early, start in due order, and wake an idle worker by their time, not its poll', async () => {
    const starts: Array<{ id: string; at: number }> = [];
    // a poll every 10 minutes: the jobs can only start this soon if the worker wakes for each one's time
    const worker = db.worker({
      queues: ['delayed'],
      pollMs: 600_000,
      tasks: { at: (_p, ctx) => void starts.push({ id: ctx.job.id, at: Date.now() }) },
    });
    await worker.start();
    const base = Date.now();
    const { ids } = await db.tusk.enqueueMany([
      { task: 'at', queue: 'delayed', delayMs: 300 },
      { task: 'at', queue: 'delayed', runAt: new Date(base + 600) },
      { task: 'at', queue: 'delayed', delayMs: 900 },
    ]);
    await eventually(() => starts.length === 3, 120_000);
    await worker.stop();
    expect(starts.map((s) => s.id)).toEqual(ids);
    const due = [300, 600, 900];
    ids.forEach((id, i) => {
      const late = (starts.find((s) => s.id === id)?.at as number) - base - (due[i] as number);
      expect(late).toBeGreaterThanOrEqual(0);
      // generous: a loaded machine delays a wake-up by seconds, the poll would by minutes
      expect(late).toBeLessThan(60_000);
    });
  });
});

describe('the SQL API from another client (psql)', () => {
  it('examples/sql-worker.psql leases, extends and acks a job', async () => {
    const { execFile } = await import('node:child_process');
    const { promisify } = await import('node:util');
    const { id } = await db.tusk.enqueue('send', { to: 'a@b.c' }, { queue: 'psql-demo' });
    const script = new URL('../examples/sql-worker.psql', import.meta.url).pathname;
    const { stdout } = await promisify(execFile)('psql', [
      db.url,
      '-v',
      `schema=${db.schema}`,
      '-v',
      'queue=psql-demo',
      '-f',
      script,
    ]);
    expect(stdout).toContain(`leased job ${id} (attempt 1) of task send`);
    expect(stdout).toMatch(/lease_extended \| cancel_requested\s*\n[-+]+\n\s*t\s*\| f/);
    expect(stdout).toMatch(/acked\s*\n-+\n\s*t/);
    expect(await db.tusk.getJob(id)).toMatchObject({ state: 'succeeded', result: { sent: true, by: 'psql' } });
    const { stdout: empty } = await promisify(execFile)('psql', [
      db.url,
      '-v',
      `schema=${db.schema}`,
      '-v',
      'queue=psql-demo',
      '-f',
      script,
    ]);
    expect(empty).toContain('no job waiting in queue psql-demo');
  });
});
