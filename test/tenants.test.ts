import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { type JobContext, TuskValidationError } from '../src/index.js';
import { eventually, sleep, useTestDb } from './helpers.js';

const db = useTestDb(import.meta.url);

/** A handler that records, per tenant and key, how many of its jobs ran at once. */
function concurrencyProbe(ms: number) {
  const now = new Map<string, number>();
  const peak = new Map<string, number>();
  const started: string[] = [];
  const bump = (key: string, by: number) => {
    const n = (now.get(key) ?? 0) + by;
    now.set(key, n);
    peak.set(key, Math.max(peak.get(key) ?? 0, n));
  };
  const handler = async (_p: unknown, ctx: JobContext) => {
    const keys = [ctx.job.tenant, `${ctx.job.tenant}/${(_p as { key?: string } | null)?.key ?? ''}`];
    started.push(ctx.job.tenant);
    for (const k of keys) bump(k, 1);
    // holds its slot, so that jobs allowed to run together overlap (the peaks need it): a measure, not a wait
    await sleep(ms);
    for (const k of keys) bump(k, -1);
  };
  return { handler, peak, started };
}

const finishedIn = async (queue: string) =>
  (await db.rows(`SELECT 1 FROM $schema.jobs WHERE queue = $1`, [queue])).length === 0;

/** The tenant of the job a lease of one from `queue` got (of `tenant`, or of any), or none. */
const fetchOne = async (queue: string, tenant: string | null = null) =>
  (await db.rows<{ tenant: string }>('SELECT tenant FROM $schema.fetch_jobs(1, 60000, $1, $2)', [queue, tenant])).map(
    (r) => r.tenant,
  );

/** How many serves of `tenant` are recorded (its turns, for the order of claims). */
const servesOf = async (tenant: string) =>
  (
    await db.rows<{ n: number }>('SELECT count(*)::integer AS n FROM $schema.tenant_serves WHERE tenant = $1', [tenant])
  )[0]?.n;

describe('tenant settings', () => {
  it('set, get, list, pause, resume, default', async () => {
    expect(await db.tusk.tenants.set('acme', { slots: 5, perKey: 2 })).toMatchObject({
      tenant: 'acme',
      slots: 5,
      ownSlots: 5,
      perKey: 2,
      paused: false,
      running: 0,
    });
    expect((await db.tusk.tenants.set('acme', { paused: true })).slots).toBe(5); // other settings stay
    expect((await db.tusk.tenants.resume('acme')).paused).toBe(false);
    expect((await db.tusk.tenants.pause('acme')).paused).toBe(true);
    await db.tusk.tenants.resume('acme');
    expect((await db.tusk.tenants.set('acme', { perKey: null })).perKey).toBeNull();

    expect(await db.tusk.tenants.getDefault()).toEqual({ slots: null, retention: null });
    await db.tusk.tenants.setDefault({ slots: 3 });
    expect((await db.tusk.tenants.set('newco', {})).slots).toBe(3);
    expect((await db.tusk.tenants.set('acme', { slots: null })).slots).toBe(3);
    await db.tusk.tenants.setDefault({ slots: null });
    expect((await db.tusk.tenants.get('newco'))?.slots).toBeNull();

    await db.tusk.enqueue('x', {}, { tenant: 'only-jobs', queue: 'settings', delayMs: 60_000 });
    const listed = await db.tusk.tenants.list();
    expect(listed.map((t) => t.tenant)).toEqual(expect.arrayContaining(['acme', 'newco', 'only-jobs']));
    expect(listed.find((t) => t.tenant === 'only-jobs')).toMatchObject({ scheduled: 1, ownSlots: null });
  });

  it('bad input: clear errors, nothing written', async () => {
    const count = async () => (await db.rows('SELECT * FROM $schema.tenants')).length;
    const before = await count();
    const cases: Array<[() => Promise<unknown>, RegExp]> = [
      [() => db.tusk.tenants.set('t1', { slots: 0 }), /^settings\.slots: must be an integer from 1/],
      [() => db.tusk.tenants.set('t1', { slots: -2 }), /^settings\.slots/],
      [() => db.tusk.tenants.set('t1', { slots: 2.5 }), /^settings\.slots: must be an integer/],
      [() => db.tusk.tenants.set('t1', { slots: '5' as never }), /^settings\.slots/],
      [() => db.tusk.tenants.set('t1', { perKey: 0 }), /^settings\.perKey/],
      [() => db.tusk.tenants.set('t1', { paused: 'yes' as never }), /^settings\.paused/],
      [() => db.tusk.tenants.set('t1', { slot: 5 } as never), /^settings: unknown option "slot"/],
      [() => db.tusk.tenants.set('', { slots: 1 }), /^tenant: must not be empty/],
      [() => db.tusk.tenants.set('x'.repeat(129), { slots: 1 }), /^tenant: must be at most 128/],
      [() => db.tusk.tenants.setDefault({ slots: 0 }), /^settings\.slots/],
    ];
    for (const [call, message] of cases) {
      const error = await call().catch((e: unknown) => e);
      expect(error).toBeInstanceOf(TuskValidationError);
      expect((error as Error).message).toMatch(message);
    }
    expect(await count()).toBe(before);
    expect(await db.tusk.tenants.get('nobody-at-all')).toBeNull();
  });
});

describe('slots', () => {
  it('a tenant never runs more jobs than its slots, others are not held back', async () => {
    await db.tusk.tenants.set('slow2', { slots: 2 });
    const probe = concurrencyProbe(40);
    await db.tusk.enqueueMany([
      ...Array.from({ length: 12 }, () => ({ task: 'probe', tenant: 'slow2', queue: 'slots' })),
      ...Array.from({ length: 12 }, () => ({ task: 'probe', tenant: 'free', queue: 'slots' })),
    ]);
    const worker = db.worker({ queues: ['slots'], concurrency: 10, tasks: { probe: probe.handler } });
    await worker.start();
    await eventually(() => finishedIn('slots'));
    await worker.stop();
    expect(probe.peak.get('slow2')).toBe(2);
    expect(probe.peak.get('free')).toBeGreaterThan(2);
  });

  it('default slots apply to tenants without their own', async () => {
    await db.tusk.tenants.setDefault({ slots: 1 });
    try {
      const probe = concurrencyProbe(30);
      await db.tusk.enqueueMany(
        Array.from({ length: 6 }, () => ({ task: 'probe', tenant: 'fresh', queue: 'default-slots' })),
      );
      const worker = db.worker({ queues: ['default-slots'], concurrency: 6, tasks: { probe: probe.handler } });
      await worker.start();
      await eventually(() => finishedIn('default-slots'));
      await worker.stop();
      expect(probe.peak.get('fresh')).toBe(1);
    } finally {
      await db.tusk.tenants.setDefault({ slots: null });
    }
  });

  it('a slot change takes effect on the next claim', async () => {
    await db.tusk.tenants.set('grow', { slots: 1 });
    const probe = concurrencyProbe(60);
    await db.tusk.enqueueMany(Array.from({ length: 20 }, () => ({ task: 'probe', tenant: 'grow', queue: 'grow' })));
    const worker = db.worker({ queues: ['grow'], concurrency: 8, tasks: { probe: probe.handler } });
    await worker.start();
    // three jobs ran one after another: claims made while others waited kept to one slot
    await eventually(() => probe.started.length >= 3);
    expect(probe.peak.get('grow')).toBe(1);
    await db.tusk.tenants.set('grow', { slots: 4 });
    await eventually(() => finishedIn('grow'));
    await worker.stop();
    expect(probe.peak.get('grow')).toBe(4);
  });

  it('limiting an unlimited tenant while parallel claims run: never over the limit once earlier jobs drain', async () => {
    const probe = concurrencyProbe(15);
    await db.tusk.enqueueMany(
      Array.from({ length: 400 }, () => ({ task: 'probe', tenant: 'busy', queue: 'limit-live' })),
    );
    const workers = [0, 1].map(() =>
      db.worker({ queues: ['limit-live'], concurrency: 20, tasks: { probe: probe.handler } }, db.another()),
    );
    await Promise.all(workers.map((w) => w.start()));
    await eventually(() => (probe.peak.get('busy') ?? 0) > 3);
    await db.tusk.tenants.set('busy', { slots: 3 });
    // jobs claimed before the change may still run; after they drain, the limit holds
    await eventually(async () => ((await db.tusk.tenants.get('busy'))?.running ?? 4) <= 3, 10_000, 5);
    let over = 0;
    const sampling = (async () => {
      for (let i = 0; i < 150; i++) {
        if (((await db.tusk.tenants.get('busy'))?.running ?? 4) > 3) over++;
      }
    })();
    await sampling;
    await eventually(() => finishedIn('limit-live'), 30_000);
    await Promise.all(workers.map((w) => w.stop()));
    expect(over).toBe(0);
  });

  it('pausing stops new claims and leaves running jobs alone; resuming restarts', async () => {
    const probe = concurrencyProbe(150);
    const { ids } = await db.tusk.enqueueMany(
      Array.from({ length: 4 }, () => ({ task: 'probe', tenant: 'pausy', queue: 'pause' })),
    );
    await db.tusk.tenants.set('pausy', { slots: 1 });
    const worker = db.worker({
      queues: ['pause'],
      concurrency: 4,
      tasks: { probe: probe.handler, other: () => 'ran' },
    });
    await worker.start();
    await eventually(() => probe.started.length === 1);
    await db.tusk.tenants.pause('pausy');
    expect((await db.tusk.waitFor(ids[0] as string))?.state).toBe('succeeded');
    // a job of another tenant, enqueued once pausy's slot was free, is claimed and run: the
    // claim that took it (or one before) would have taken one of pausy's, had the pause not held
    const { id: later } = await db.tusk.enqueue('other', {}, { tenant: 'unpaused', queue: 'pause' });
    expect((await db.tusk.waitFor(later))?.state).toBe('succeeded');
    expect(probe.started.length).toBe(1); // the running job finished, nothing new started
    expect((await db.tusk.getJob(ids[0] as string))?.state).toBe('succeeded');
    expect(await db.tusk.tenants.get('pausy'))?.toMatchObject({ paused: true, running: 0, available: 3 });
    await db.tusk.tenants.resume('pausy');
    await eventually(() => finishedIn('pause'));
    await worker.stop();
    expect(probe.started.length).toBe(4);
  });

  it('concurrency keys: at most perKey running jobs per key inside the tenant', async () => {
    await db.tusk.tenants.set('keyed', { slots: 4, perKey: 1 });
    const probe = concurrencyProbe(30);
    await db.tusk.enqueueMany([
      ...Array.from({ length: 8 }, () => ({
        task: 'probe',
        payload: { key: 'user:1' },
        tenant: 'keyed',
        queue: 'keys',
        concurrencyKey: 'user:1',
      })),
      ...Array.from({ length: 8 }, () => ({
        task: 'probe',
        payload: { key: 'user:2' },
        tenant: 'keyed',
        queue: 'keys-b',
        concurrencyKey: 'user:2',
      })),
      ...Array.from({ length: 8 }, () => ({
        task: 'probe',
        payload: { key: 'user:2' },
        tenant: 'keyed',
        queue: 'keys',
        concurrencyKey: 'user:2',
      })),
      ...Array.from({ length: 8 }, () => ({ task: 'probe', tenant: 'keyed', queue: 'keys' })),
    ]);
    const worker = db.worker({ queues: ['keys', 'keys-b'], concurrency: 10, tasks: { probe: probe.handler } });
    await worker.start();
    await eventually(async () => (await finishedIn('keys')) && finishedIn('keys-b'));
    await worker.stop();
    expect(probe.peak.get('keyed/user:1')).toBe(1);
    expect(probe.peak.get('keyed/user:2')).toBe(1); // across two queues
    expect(probe.peak.get('keyed')).toBeLessThanOrEqual(4);
    expect(probe.peak.get('keyed/')).toBeGreaterThan(1); // jobs without a key are not limited by perKey
  });

  /** The concurrency keys of the jobs a fetch of `n` from `queue` for `tenant` takes, in its order. */
  const fetchKeys = async (n: number, queue: string, tenant: string) =>
    (
      await db.rows<{ k: string }>('SELECT concurrency_key AS k FROM $schema.fetch_jobs($1, 60000, $2, $3)', [
        n,
        queue,
        tenant,
      ])
    ).map((r) => r.k);
  const perKeyJobs = (tenant: string, queue: string, keys: string[]) =>
    db.tusk.enqueueMany(keys.map((key) => ({ task: 'probe', tenant, queue, concurrencyKey: key })));

  it("a per-key tenant's jobs are taken in (priority, id) order across its keys, not in key order", async () => {
    await db.tusk.tenants.set('keyed-fifo', { perKey: 1 });
    // a window of two keys: before, a claim read the keys a and x (key order), not the oldest
    await db.pool.query(`UPDATE "${db.schema}".config SET key_lanes = 2`);
    try {
      await perKeyJobs('keyed-fifo', 'kfifo', ['z', 'y', 'x', 'a']);
      await db.tusk.enqueue('probe', {}, { tenant: 'keyed-fifo', queue: 'kfifo', concurrencyKey: 'b', priority: -1 });
      expect(await fetchKeys(3, 'kfifo', 'keyed-fifo')).toEqual(['b', 'z', 'y']);
      expect(await fetchKeys(3, 'kfifo', 'keyed-fifo')).toEqual(['x', 'a']);
    } finally {
      await db.pool.query(`UPDATE "${db.schema}".config SET key_lanes = DEFAULT`);
    }
  });

  it('expired jobs at the front of a per-key tenant (not yet ended by the upkeep) leave it its live keys', async () => {
    await db.tusk.tenants.set('keyed-expired', { perKey: 1 });
    await perKeyJobs('keyed-expired', 'kexp', ['dead', 'x1', 'x2', 'x3', 'x4', 'x5']);
    await perKeyJobs('keyed-expired', 'kexp', ['live', 'l1', 'l2', 'l3', 'l4', 'l5']);
    // their time ran out while they waited; no upkeep has ended them yet
    await db.pool.query(
      `UPDATE "${db.schema}".jobs SET expires_at = now() - interval '1 second'
       WHERE tenant = 'keyed-expired' AND concurrency_key IN ('dead', 'x1', 'x2', 'x3', 'x4', 'x5')`,
    );
    // before, the expired jobs' keys took the claim's places, and it came back empty
    expect(await fetchKeys(1, 'kexp', 'keyed-expired')).toEqual(['live']);
    expect(await fetchKeys(5, 'kexp', 'keyed-expired')).toEqual(['l1', 'l2', 'l3', 'l4', 'l5']);
    await db.pool.query(`DELETE FROM "${db.schema}".jobs WHERE tenant = 'keyed-expired'`);
  });

  it("a claim reads no lane mark for each of a per-key tenant's key lanes (they have none)", async () => {
    await db.tusk.tenants.set('keyed-marks', { perKey: 1 });
    await perKeyJobs(
      'keyed-marks',
      'kmarks',
      Array.from({ length: 50 }, (_, i) => `m${String(i).padStart(2, '0')}`),
    );
    await db.tusk.enqueueMany([1, 2].map(() => ({ task: 'probe', tenant: 'plain-marks', queue: 'kmarks-plain' })));
    const c = await db.pool.connect();
    try {
      await c.query(`SET track_functions = 'all'`);
      await c.query('BEGIN');
      const { rows } = await c.query(`SELECT id FROM "${db.schema}".fetch_jobs(20, 60000, 'kmarks', 'keyed-marks')`);
      expect(rows).toHaveLength(20);
      const calls = await c.query<{ n: string | null }>(
        `SELECT pg_stat_get_xact_function_calls('"${db.schema}".lane_mark(text, text)'::regprocedure) AS n`,
      );
      // one call outside the lanes; before, one more per key lane: 21
      const perKeyCalls = Number(calls.rows[0]?.n ?? 0);
      expect(perKeyCalls).toBeLessThanOrEqual(1);
      // and a tenant's own lane still reads its mark (the count above is not zero for want of one)
      const plain = await c.query(`SELECT id FROM "${db.schema}".fetch_jobs(1, 60000, 'kmarks-plain', 'plain-marks')`);
      expect(plain.rows).toHaveLength(1);
      const after = await c.query<{ n: string | null }>(
        `SELECT pg_stat_get_xact_function_calls('"${db.schema}".lane_mark(text, text)'::regprocedure) AS n`,
      );
      expect(Number(after.rows[0]?.n ?? 0)).toBeGreaterThan(perKeyCalls);
    } finally {
      await c.query('ROLLBACK');
      await c.query('RESET track_functions');
      c.release();
    }
    await db.pool.query(`DELETE FROM "${db.schema}".jobs WHERE tenant IN ('keyed-marks', 'plain-marks')`);
  });

  it('past a backlog of keys at their limit at the front, the window of key lanes goes to the keys after them', async () => {
    await db.tusk.tenants.set('windowed', { perKey: 1 });
    await db.pool.query(`UPDATE "${db.schema}".config SET key_lanes = 1`);
    try {
      // key a's 40 jobs first: more than a claim of one job reads in order (18)
      await perKeyJobs('windowed', 'window', [...Array.from({ length: 40 }, () => 'a'), 'c', 'b']);
      expect(await fetchKeys(1, 'window', 'windowed')).toEqual(['a']);
      // a is at its limit: the one key of the window is b, not a
      expect(await fetchKeys(1, 'window', 'windowed')).toEqual(['b']);
      expect(await fetchKeys(1, 'window', 'windowed')).toEqual(['c']);
      expect(await fetchKeys(1, 'window', 'windowed')).toEqual([]);
    } finally {
      await db.pool.query(`UPDATE "${db.schema}".config SET key_lanes = DEFAULT`);
    }
  });

  it("a claim of one job reads one of a per-key tenant's keys, not the whole window", async () => {
    await db.tusk.tenants.set('many-keys', { perKey: 1 });
    await perKeyJobs(
      'many-keys',
      'mkeys',
      Array.from({ length: 300 }, (_, i) => `key-${i}`),
    );
    const c = await db.pool.connect();
    try {
      await c.query('BEGIN');
      // index scans of jobs_ready (by key) in this transaction: before, two for each of the
      // 300 keys (the key itself, then its first job)
      const scans = async () =>
        Number(
          (await c.query<{ n: string }>(`SELECT pg_stat_get_xact_numscans('"${db.schema}".jobs_ready'::regclass) AS n`))
            .rows[0]?.n,
        );
      const before = await scans();
      const { rows } = await c.query(`SELECT tenant FROM "${db.schema}".fetch_jobs(1, 60000, 'mkeys', NULL)`);
      expect(rows).toEqual([{ tenant: 'many-keys' }]);
      expect((await scans()) - before).toBeLessThanOrEqual(4);
    } finally {
      await c.query('ROLLBACK');
      c.release();
    }
    await db.pool.query(`DELETE FROM "${db.schema}".jobs WHERE tenant = 'many-keys'`);
  });

  it('a claim of one job goes past a tenant first in turn whose keys are all at their limit', async () => {
    await db.tusk.tenants.set('stuck-keys', { perKey: 1 });
    await db.tusk.tenants.set('waiting', { slots: 5 });
    // served first, its key then at its limit with a job waiting behind it
    for (let i = 0; i < 2; i++)
      await db.tusk.enqueue('probe', {}, { tenant: 'stuck-keys', queue: 'pass', concurrencyKey: 'k' });
    expect(await fetchOne('pass', 'stuck-keys')).toEqual(['stuck-keys']);
    for (let i = 0; i < 3; i++) await db.tusk.enqueue('probe', {}, { tenant: 'waiting', queue: 'pass' });
    expect(await fetchOne('pass', 'waiting')).toEqual(['waiting']);
    // any tenant: 'stuck-keys' is first in turn and yields nothing
    expect(await fetchOne('pass')).toEqual(['waiting']);
    expect(await fetchOne('pass')).toEqual(['waiting']);
    expect(await fetchOne('pass')).toEqual([]);
  });

  it('an idle claim passing over a tenant with nothing to give writes nothing', async () => {
    await db.tusk.tenants.set('idle-keys', { perKey: 1 });
    await db.tusk.tenants.set('idle-full', { slots: 1 });
    // each with a job running and one waiting that cannot start: a key at its limit, a slot
    for (const tenant of ['idle-keys', 'idle-full']) {
      for (let i = 0; i < 2; i++) await db.tusk.enqueue('probe', {}, { tenant, queue: 'idle', concurrencyKey: 'k' });
      expect(await fetchOne('idle', tenant)).toEqual([tenant]);
    }
    const before = await servesOf('idle-keys');
    expect(await fetchOne('idle')).toEqual([]);
    expect(await fetchOne('idle')).toEqual([]);
    expect(await servesOf('idle-keys')).toBe(before);
  });

  it('claims of one job side by side, each held open, each take the next tenant in turn', async () => {
    // tenants without limits, one job each: a claim locks no job it does not take, so the
    // claims beside it find the next tenant's job, not an empty turn
    const tenants = Array.from({ length: 10 }, (_, i) => `side-${i}`);
    for (const tenant of tenants) await db.tusk.enqueue('probe', {}, { tenant, queue: 'side' });
    // their rows, which a first claim inserts (a claim held open would hold the others there)
    await db.rows('INSERT INTO $schema.tenants (tenant) SELECT unnest($1::text[]) ON CONFLICT DO NOTHING', [tenants]);
    const sessions = await Promise.all(
      [0, 1, 2, 3].map(async () => {
        const c = new pg.Client({ connectionString: db.url });
        await c.connect();
        await c.query('BEGIN');
        return c;
      }),
    );
    try {
      const got: string[][] = [];
      for (const c of sessions) {
        const { rows } = await c.query<{ tenant: string }>(
          `SELECT tenant FROM "${db.schema}".claim_jobs(NULL, 1, 60000, '{side}')`,
        );
        got.push(rows.map((r) => r.tenant));
      }
      expect(got).toEqual([['side-0'], ['side-1'], ['side-2'], ['side-3']]);
    } finally {
      await Promise.all(
        sessions.map(async (c) => {
          await c.query('ROLLBACK');
          await c.end();
        }),
      );
    }
  });

  it('a tenant without a limit whose only job another claim holds keeps its turn', async () => {
    await db.tusk.tenants.set('turn-l', { slots: 5 });
    const tenants = ['turn-l', 'turn-s', 'turn-c', 'turn-d'];
    const claimOne = async (on: pg.ClientBase | pg.Pool, tenant: string | null = null) =>
      (
        await on.query<{ tenant: string }>(
          `SELECT tenant FROM "${db.schema}".claim_jobs(NULL, 1, 60000, '{turn}', $1)`,
          [tenant],
        )
      ).rows.map((r) => r.tenant);
    // served in this order, then one job each waiting
    for (const tenant of tenants) {
      await db.tusk.enqueue('probe', {}, { tenant, queue: 'turn' });
      expect(await claimOne(db.pool, tenant)).toEqual([tenant]);
    }
    for (const tenant of tenants) await db.tusk.enqueue('probe', {}, { tenant, queue: 'turn' });
    const first = new pg.Client({ connectionString: db.url });
    await first.connect();
    try {
      await first.query('BEGIN');
      // first in turn: 'turn-l'; its claim also locks 'turn-s''s job (a share in each lane) and leaves it
      expect(await claimOne(first)).toEqual(['turn-l']);
      const before = await servesOf('turn-s');
      // 'turn-s' comes back empty here only because of that lock: it is not served, and keeps its turn
      expect(await claimOne(db.pool)).toEqual(['turn-c']);
      expect(await servesOf('turn-s')).toBe(before);
    } finally {
      await first.query('ROLLBACK');
      await first.end();
    }
    expect(await claimOne(db.pool)).toEqual(['turn-l']);
    expect(await claimOne(db.pool)).toEqual(['turn-s']);
  });
});

describe('fairness', () => {
  it('a tenant with one job waiting is served before the flooding tenant’s next job', async () => {
    const order: string[] = [];
    await db.tusk.tenants.set('flood', { slots: 2 });
    await db.tusk.enqueueMany(
      Array.from({ length: 300 }, (_, i) => ({ task: 'rec', payload: { i }, tenant: 'flood', queue: 'fair' })),
    );
    const worker = db.worker({
      queues: ['fair'],
      concurrency: 2,
      prefetch: 0,
      tasks: {
        rec: async (_p, ctx) => {
          order.push(ctx.job.tenant);
          // the flood's pace, so that it is still running when the small tenant's job comes
          await sleep(10);
        },
      },
    });
    await worker.start();
    await eventually(() => order.length >= 6);
    await db.tusk.enqueue('rec', {}, { tenant: 'small', queue: 'fair' });
    const at = order.length;
    await eventually(() => order.includes('small'));
    const served = order.indexOf('small');
    await db.pool.query(`DELETE FROM "${db.schema}".jobs WHERE queue = 'fair' AND state <> 'running'`);
    await eventually(() => finishedIn('fair'));
    await worker.stop();
    // started within the next couple of claims, not after the remaining ~290 flood jobs: at
    // the enqueue's return each of the worker's two claim loops may have a claim in flight
    // whose snapshot came before it, and two flood jobs claimed but not yet started (on a
    // loaded machine: CI saw 3 once)
    expect(served - at).toBeLessThanOrEqual(4);
  });

  it('FIFO by (priority, enqueue order) inside a tenant while tenants are interleaved', async () => {
    const order: string[] = [];
    await db.tusk.enqueueMany([
      { task: 'rec', payload: 'a1', tenant: 'ta', queue: 'rr' },
      { task: 'rec', payload: 'a2', tenant: 'ta', queue: 'rr' },
      { task: 'rec', payload: 'a0', tenant: 'ta', queue: 'rr', priority: -1 },
      { task: 'rec', payload: 'b1', tenant: 'tb', queue: 'rr' },
      { task: 'rec', payload: 'b2', tenant: 'tb', queue: 'rr' },
    ]);
    const worker = db.worker({
      queues: ['rr'],
      concurrency: 1,
      prefetch: 0,
      tasks: { rec: (p: string) => void order.push(p) },
    });
    await worker.start();
    await eventually(() => order.length === 5);
    await worker.stop();
    expect(order.filter((x) => x.startsWith('a'))).toEqual(['a0', 'a1', 'a2']);
    expect(order.filter((x) => x.startsWith('b'))).toEqual(['b1', 'b2']);
    // round-robin: no tenant runs twice in a row while the other waits
    expect(order.slice(0, 4).join(',')).toMatch(/^(a.,b.,a.,b.|b.,a.,b.,a.)$/);
  });
});

describe('stats', () => {
  it('counts by state per tenant and queue, with the oldest waiting job’s age', async () => {
    await db.tusk.enqueueMany([
      { task: 'a', tenant: 'st1', queue: 'stats-q' },
      { task: 'a', tenant: 'st1', queue: 'stats-q' },
      { task: 'a', tenant: 'st2', queue: 'stats-q', delayMs: 60_000 },
    ]);
    await db.clockPast(`SELECT max(run_at) + interval '50 milliseconds' FROM $schema.jobs WHERE tenant = 'st1'`);
    const stats = await db.tusk.stats();
    const st1 = stats.tenants.find((t) => t.tenant === 'st1');
    expect(st1?.counts).toMatchObject({ available: 2, scheduled: 0 });
    expect(st1?.oldestWaitingMs).toBeGreaterThanOrEqual(40);
    expect(stats.tenants.find((t) => t.tenant === 'st2')?.counts.scheduled).toBe(1);
    const q = stats.queues.find((x) => x.queue === 'stats-q');
    expect(q?.counts).toMatchObject({ available: 2, scheduled: 1 });
    await db.pool.query(`DELETE FROM "${db.schema}".jobs WHERE queue = 'stats-q'`);
  });
});
