import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { bullmqSink, type Drainer, type Logger, type Sink, StagedJob, TuskValidationError } from '../src/index.js';
import { selectStaged } from '../src/queries/staged.js';
import { testQueue } from './bullmq.js';
import { lostMidSend } from './drain-race.js';
import { eventually, sleep, useTestDb } from './helpers.js';
import { needs, redisPresent } from './services.js';

const redisHere = await redisPresent();

const db = useTestDb(import.meta.url);
const stagedCount = () => db.tusk.stagedCount();

const drainers: Drainer[] = [];
const queues: Array<ReturnType<typeof testQueue>> = [];
afterEach(async () => {
  await Promise.all(drainers.splice(0).map((d) => d.stop()));
  await Promise.all(queues.splice(0).map((q) => q.close()));
});
const startDrainer = async (...args: Parameters<typeof db.tusk.drainer>) => {
  const drainer = db.tusk.drainer(...args);
  drainers.push(drainer);
  await drainer.start();
  return drainer;
};
const bullQueue = (label: string) => {
  const q = testQueue(label);
  queues.push(q);
  return q;
};
const stage = async (jobs: Parameters<typeof db.tusk.stageMany>[1]) => db.tusk.stageMany(await db.tusk.pool(), jobs);

/**
 * The sessions of this process's drainers (named after its pid) whose last statement,
 * finished, matches `like`, and that do not hold the drain lock when `holder` is false.
 */
const drainerSessionsAfter = async (like: string, holder: boolean) =>
  (
    await db.rows(
      `SELECT a.pid FROM pg_stat_activity a
       WHERE a.application_name = $1 AND a.state = 'idle' AND a.query LIKE $2
         AND ($3 OR NOT EXISTS (SELECT 1 FROM pg_locks l WHERE l.pid = a.pid AND l.locktype = 'advisory'
                                AND l.granted AND l.classid = hashtext($4)::oid AND l.objid = 0))`,
      [`tusk drainer pid=${process.pid}`, like, holder, `${db.schema}:drain`],
    )
  ).length;

describe("the 'tusk' sink", () => {
  it('moves staged jobs into the queue exactly once, in staging order, with their options', async () => {
    const plain = Array.from({ length: 1200 }, (_, i) => ({ task: 'moved', payload: { i } }));
    await stage(plain);
    const { ids } = await stage([
      {
        task: 'moved_opts',
        payload: { x: 1 },
        tenant: 'acme',
        queue: 'mail',
        priority: -2,
        maxAttempts: 3,
        concurrencyKey: 'user:1',
        retry: { backoff: 1000, queue: 'slow' },
        source: { type: 'Order', id: 42, method: 'ship' },
      },
      { task: 'moved_later', payload: null, delayMs: 60_000 },
      { task: 'moved_dedup', payload: 1, dedupKey: 'k' },
      { task: 'moved_dedup', payload: 2, dedupKey: 'k' },
    ]);
    expect(ids).toHaveLength(4);
    const [stagedLater] = await db.rows<{ staged_at: Date }>(
      "SELECT staged_at FROM $schema.staged_jobs WHERE task = 'moved_later'",
    );
    const batches: number[] = [];
    const drainer = await startDrainer({ sink: 'tusk', onBatch: (b) => batches.push(b.count) });
    await eventually(async () => (await stagedCount()) === 0);
    expect(drainer.forwarded).toBe(1204);
    expect(batches[0]).toBe(1000); // the default batch size

    const moved = await db.rows<{ id: string; i: number }>(
      "SELECT id, (payload->>'i')::int AS i FROM $schema.jobs WHERE task = 'moved' ORDER BY id",
    );
    expect(moved.map((r) => r.i)).toEqual(plain.map((_, i) => i)); // each once, in order
    const [opts] = await db.rows("SELECT * FROM $schema.jobs WHERE task = 'moved_opts'");
    expect(opts).toMatchObject({
      tenant: 'acme',
      queue: 'mail',
      priority: -2,
      max_attempts: 3,
      concurrency_key: 'user:1',
      retry: { backoff: 1000, queue: 'slow' },
      payload: { x: 1 },
      source_type: 'Order',
      source_id: '42',
      source_method: 'ship',
    });
    const [later] = await db.rows<{ state: string; run_at: Date }>(
      "SELECT state, run_at FROM $schema.jobs WHERE task = 'moved_later'",
    );
    // the delay counts from staging, not from the drain
    expect(later?.state).toBe('scheduled');
    expect(Math.abs((later?.run_at.getTime() ?? 0) - (stagedLater?.staged_at.getTime() ?? 0) - 60_000)).toBeLessThan(
      1000,
    );
    const dedup = await db.rows("SELECT payload FROM $schema.jobs WHERE task = 'moved_dedup'");
    expect(dedup).toEqual([{ payload: 1 }]);
  });

  it('a job staged while the drainer idles is moved at once (notification)', async () => {
    await startDrainer({ sink: 'tusk', pollMs: 600_000 });
    // its first batch found nothing (the 'tusk' sink's batch is a transaction): it idles now
    await eventually(async () => (await drainerSessionsAfter('COMMIT', true)) === 1);
    const t0 = Date.now();
    await stage([{ task: 'woken' }]);
    await eventually(
      async () => (await db.rows("SELECT 1 FROM $schema.jobs WHERE task = 'woken'")).length === 1,
      120_000,
    );
    // generous: a loaded machine delays it by seconds, the 10-minute poll would by minutes
    expect(Date.now() - t0).toBeLessThan(60_000);
  });
});

describe('the BullMQ sink', () => {
  describe('with Redis', () => {
    needs(redisHere);
    it('adds staged jobs to BullMQ in order, mapping name, data, delay, attempts and priority', async () => {
      const main = bullQueue('main');
      const other = bullQueue('other');
      await stage(Array.from({ length: 300 }, (_, i) => ({ task: 'bull', payload: { i }, queue: main.name })));
      await stage([
        { task: 'bull_opts', payload: 'x', queue: other.name, delayMs: 60_000, maxAttempts: 4 },
        { task: 'bull_prio', payload: 'y', queue: other.name, priority: 5 },
      ]);
      await startDrainer({ sink: bullmqSink(), batchSize: 128 });
      await eventually(async () => (await stagedCount()) === 0);
      const jobs = await main.jobs();
      expect(jobs.map((j) => j.data)).toEqual(Array.from({ length: 300 }, (_, i) => ({ i })));
      expect(new Set(jobs.map((j) => j.name))).toEqual(new Set(['bull']));
      const [delayed, prioritized] = [...(await other.jobs())].sort((a, b) => a.name.localeCompare(b.name));
      expect(delayed).toMatchObject({ name: 'bull_opts', data: 'x', opts: { attempts: 4 } });
      expect(delayed?.opts.delay).toBeGreaterThan(55_000);
      expect(prioritized).toMatchObject({ name: 'bull_prio', data: 'y', opts: { priority: 5 } });
    });

    it('idempotent: a batch sent twice is added once (non-idempotent: twice)', async () => {
      const q = bullQueue('idem');
      await stage(Array.from({ length: 50 }, (_, i) => ({ task: 'twice', payload: i })));
      const rows = (await selectStaged(db.pool, db.schema, 1000)).filter((r) => r.task === 'twice');
      const batch = rows.map((r) => new StagedJob(r));
      const context = { client: db.pool, schema: db.schema, signal: new AbortController().signal };
      const idempotent = bullmqSink({ queue: q.name, idempotent: true });
      await idempotent.send(batch, context);
      await idempotent.send(batch, context);
      await idempotent.close?.();
      expect(await q.jobs()).toHaveLength(50);
      const plain = bullmqSink({ queue: q.name });
      await plain.send(batch, context);
      await plain.close?.();
      expect(await q.jobs()).toHaveLength(100);
      await db.rows("DELETE FROM $schema.staged_jobs WHERE task = 'twice'");
    });
    it('idempotent: the same staged id in two schemas (or in a schema made again) is two jobs, not one', async () => {
      const q = bullQueue('idem-spaces');
      const schemas = [`${db.schema}_a`, `${db.schema}_b`];
      const sink = bullmqSink({ queue: q.name, idempotent: true });
      try {
        for (const schema of schemas) {
          const tusk = db.another({ schema });
          await tusk.migrate();
          await tusk.stageMany(await tusk.pool(), [{ task: 'spaced', payload: schema }]);
          const batch = (await selectStaged(db.pool, schema, 10)).map((r) => new StagedJob(r));
          expect(batch.map((j) => j.id)).toEqual(['1']);
          await sink.send(batch, { client: db.pool, schema, signal: new AbortController().signal });
        }
        // before, both were BullMQ's job staged-1: the second was taken for a copy and dropped
        expect((await q.jobs()).map((j) => j.data).sort()).toEqual(schemas);
      } finally {
        await sink.close?.();
        for (const schema of schemas) await db.pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      }
    });
  });

  it('unreachable Redis: retries with growing backoff, logs clearly, rows stay staged', async () => {
    const warnings: Array<{ retryInMs: number; msg: string }> = [];
    const logger: Logger = {
      debug() {},
      info() {},
      error() {},
      warn: (obj, msg) => warnings.push({ retryInMs: (obj as { retryInMs: number }).retryInMs, msg: msg ?? '' }),
    };
    const tusk = db.another({ logger });
    await tusk.stageMany(await tusk.pool(), [{ task: 'stuck' }, { task: 'stuck' }]);
    const drainer = tusk.drainer({ sink: bullmqSink({ connection: 'redis://127.0.0.1:1' }), maxBackoffMs: 1000 });
    drainers.push(drainer);
    await drainer.start();
    await eventually(() => warnings.length >= 4, 10_000);
    await drainer.stop();
    expect(warnings.slice(0, 4).map((w) => w.retryInMs)).toEqual([250, 500, 1000, 1000]);
    expect(warnings[0]?.msg).toMatch(
      /drainer: sending to bullmq failed \(Redis at redis:\/\/127\.0\.0\.1:1 is not reachable .*\); the batch stays staged, retrying in 250 ms/,
    );
    expect(await db.rows("SELECT task FROM $schema.staged_jobs WHERE task = 'stuck'")).toHaveLength(2);
    await db.rows("DELETE FROM $schema.staged_jobs WHERE task = 'stuck'");
  });
});

describe('drainer', () => {
  it('a failing sink: the batch stays staged, is sent again after a backoff, then deleted once accepted', async () => {
    const received: string[][] = [];
    let failures = 2;
    const flaky: Sink = {
      name: 'flaky',
      async send(jobs) {
        received.push(jobs.map((j) => j.payload as string));
        if (failures-- > 0) throw new Error('not now');
      },
    };
    await stage([
      { task: 'flaky', payload: 'a' },
      { task: 'flaky', payload: 'b' },
    ]);
    const drainer = await startDrainer({ sink: flaky });
    await eventually(async () => (await stagedCount()) === 0, 5000);
    expect(received).toEqual([
      ['a', 'b'],
      ['a', 'b'],
      ['a', 'b'],
    ]);
    expect(drainer.forwarded).toBe(2);
  });

  it("a sink's open() runs once, before the first send; one that throws is logged and the drainer forwards anyway", async () => {
    const events: string[] = [];
    const warnings: string[] = [];
    const logger: Logger = { debug() {}, info() {}, error() {}, warn: (_obj, msg) => warnings.push(msg ?? '') };
    const tusk = db.another({ logger });
    const sink = (opening: () => Promise<void>): Sink => ({
      name: 'opened',
      async open() {
        events.push('open');
        await opening();
      },
      async send(jobs) {
        events.push(`send ${jobs.length}`);
      },
    });
    await stage([{ task: 'opened' }, { task: 'opened' }, { task: 'opened' }]);
    // slower than the send's time: a first send that waited for it would be given up
    const slow = tusk.drainer({
      sink: sink(async () => {
        await sleep(400);
      }),
      batchSize: 2,
      sendTimeoutMs: 100,
    });
    drainers.push(slow);
    expect(events).toEqual([]);
    await slow.start();
    expect(events).toEqual(['open']);
    await eventually(async () => (await stagedCount()) === 0, 5000);
    expect(events).toEqual(['open', 'send 2', 'send 1']);
    await slow.stop();

    events.length = 0;
    await stage([{ task: 'opened' }]);
    const broken = tusk.drainer({ sink: sink(() => Promise.reject(new Error('no route'))) });
    drainers.push(broken);
    await broken.start();
    await eventually(async () => (await stagedCount()) === 0, 5000);
    expect(events).toEqual(['open', 'send 1']);
    expect(warnings).toEqual(['drainer: opening opened failed (no route); its sends connect again']);
  });

  it('stopped while its sink opens: it starts nothing, and leaves no connection behind', async () => {
    let opened = () => {};
    let opening = false;
    const slow: Sink = {
      name: 'slow to open',
      open: () =>
        new Promise<void>((resolve) => {
          opening = true;
          opened = resolve;
        }),
      async send() {},
    };
    const drainer = db.tusk.drainer({ sink: slow });
    const started = drainer.start();
    await eventually(() => opening);
    await drainer.stop();
    opened();
    await started;
    expect(drainer.state).toBe('stopped');
    const sessions = await db.rows('SELECT 1 FROM pg_stat_activity WHERE application_name = $1', [
      `tusk drainer pid=${process.pid}`,
    ]);
    expect(sessions).toEqual([]);
  });

  it('one active drainer per schema: the others stand by and take over when it stops or dies', async () => {
    const seen: Record<string, number> = { a: 0, b: 0 };
    const counting = (label: string): Sink => ({
      name: label,
      async send(jobs) {
        seen[label] = (seen[label] ?? 0) + jobs.length;
      },
    });
    const a = await startDrainer({ sink: counting('a'), standbyPollMs: 50 });
    await eventually(() => a.state === 'active');
    const other = db.another();
    const b = other.drainer({ sink: counting('b'), standbyPollMs: 50 });
    drainers.push(b);
    await b.start();
    // b has tried for the lock and been refused
    await eventually(async () => (await drainerSessionsAfter('%pg_try_advisory_lock%', false)) === 1);
    expect([a.state, b.state]).toEqual(['active', 'standby']);
    await stage(Array.from({ length: 10 }, () => ({ task: 'one_active' })));
    await eventually(async () => (await stagedCount()) === 0);
    expect(seen).toEqual({ a: 10, b: 0 });

    await a.stop(); // gives the lock up
    await eventually(() => b.state === 'active', 2000);
    await stage(Array.from({ length: 5 }, () => ({ task: 'one_active' })));
    await eventually(async () => (await stagedCount()) === 0);
    expect(seen).toEqual({ a: 10, b: 5 });

    // b's connection dies (as with a crashed process): its lock goes with it; c takes over
    const c = await startDrainer({ sink: counting('a'), standbyPollMs: 50 });
    expect(c.state).toBe('standby');
    await db.pool.query(
      `SELECT pg_terminate_backend(l.pid) FROM pg_locks l
       WHERE l.locktype = 'advisory' AND l.granted AND l.classid = hashtext($1)::oid AND l.objid = 0`,
      [`${db.schema}:drain`],
    );
    await eventually(() => c.state === 'active' || b.state === 'active', 5000);
    await stage(Array.from({ length: 7 }, () => ({ task: 'one_active' })));
    await eventually(async () => (await stagedCount()) === 0, 5000);
    expect((seen.a ?? 0) + (seen.b ?? 0)).toBe(22);
    expect([b.state, c.state].filter((s) => s === 'active')).toHaveLength(1);
  });

  it('bad options: a clear error', () => {
    expect(() => db.tusk.drainer({ sink: 'tusk', sendTimeoutMs: 50 })).toThrow(/options\.sendTimeoutMs/);
    expect(() => db.tusk.drainer({} as never)).toThrow(TuskValidationError);
    expect(() => db.tusk.drainer({ sink: 'redis' as never })).toThrow(/options\.sink: must be 'tusk' or a Sink/);
    expect(() => db.tusk.drainer({ sink: 'tusk', batchSize: 0 })).toThrow(/options\.batchSize/);
  });
});

describe('one send at a time', () => {
  it('the active drainer loses its connection mid-send (its sink deaf to the signal): the standby sends only once that send has ended', async () => {
    for (let trial = 1; trial <= 2; trial++) {
      await lostMidSend(db, trial, { sendMs: 600, sendTimeoutMs: 1000, honorsSignal: false });
    }
  });

  it('the same with a sink that stops on the signal: the lost send stops at once, the standby waits out its time', async () => {
    await lostMidSend(db, 1, { sendMs: 60_000, sendTimeoutMs: 1000, honorsSignal: true });
  });

  it('after a clean stop, or a send that failed, the next drainer does not wait out the send time (a minute here)', async () => {
    const got: string[] = [];
    const working: Sink = {
      name: 'working',
      async send(jobs) {
        got.push(...jobs.map((j) => j.payload as string));
      },
    };
    let failed = 0;
    const failing: Sink = {
      name: 'failing',
      async send() {
        failed++;
        throw new Error('not now');
      },
    };
    const minute = { sendTimeoutMs: 60_000, standbyPollMs: 20 };
    const first = await startDrainer({ sink: working, ...minute });
    await stage([{ task: 'handover', payload: 'before the stop' }]);
    await eventually(() => got.length === 1);
    await first.stop();
    const second = await startDrainer({ sink: failing, ...minute });
    await eventually(() => second.state === 'active', 10_000);
    await stage([{ task: 'handover', payload: 'after a failed send' }]);
    await eventually(() => failed > 0); // it fails to send (the stop waits for that batch's end)
    await second.stop();
    await startDrainer({ sink: working, ...minute });
    await eventually(() => got.length === 2, 10_000);
    expect(got).toEqual(['before the stop', 'after a failed send']);
  });

  it('a send longer than sendTimeoutMs is given up (its signal aborted), the batch stays staged and is sent again', async () => {
    const reasons: string[] = [];
    let calls = 0;
    const stuck: Sink = {
      name: 'stuck once',
      send: (_jobs, { signal }) =>
        new Promise<void>((resolve) => {
          if (++calls > 1) return resolve();
          signal.addEventListener('abort', () => reasons.push(String((signal.reason as Error).message)), {
            once: true,
          });
        }),
    };
    await stage([{ task: 'stuck' }]);
    const drainer = await startDrainer({ sink: stuck, sendTimeoutMs: 200 });
    await eventually(async () => (await stagedCount()) === 0, 5000);
    expect(reasons).toEqual(['the send took longer than sendTimeoutMs (200 ms)']);
    expect({ calls, forwarded: drainer.forwarded }).toEqual({ calls: 2, forwarded: 1 });
  });
});

describe('order', () => {
  /** A sink that records the payloads it is first given, in order. */
  const recording = () => {
    const seen: string[] = [];
    const sink: Sink = {
      name: 'recording',
      async send(jobs) {
        for (const job of jobs) if (!seen.includes(job.payload as string)) seen.push(job.payload as string);
      },
    };
    return { seen, sink };
  };

  it('a row whose transaction is still open holds back none staged after it; it follows once committed', async () => {
    const { seen, sink } = recording();
    const open = new pg.Client({ connectionString: db.url });
    await open.connect();
    try {
      await open.query('BEGIN');
      await db.tusk.stage(open, 'ordered', 'x'); // staged first: the lowest id
      await stage([{ task: 'ordered', payload: 'a' }]);
      await stage([{ task: 'ordered', payload: 'b' }]);
      await startDrainer({ sink, pollMs: 20 });
      await eventually(() => seen.length === 2);
      await open.query('COMMIT');
      await stage([{ task: 'ordered', payload: 'c' }]);
      await eventually(() => seen.length === 4);
      expect(seen).toEqual(['a', 'b', 'x', 'c']);
    } finally {
      await open.end();
    }
  });

  it('a job staged after another job’s transaction committed is forwarded after it (4 connections, 40 transactions at once)', async () => {
    const { seen, sink } = recording();
    await startDrainer({ sink, batchSize: 3, pollMs: 10 });
    const rows: Array<{ label: string; stagedAt: number; committedAt: number }> = [];
    const session = async (c: number) => {
      const client = new pg.Client({ connectionString: db.url });
      await client.connect();
      try {
        for (let t = 0; t < 10; t++) {
          await client.query('BEGIN');
          const mine: typeof rows = [];
          for (let r = 0; r <= (c + t) % 3; r++) {
            const label = `${c}.${t}.${r}`;
            mine.push({ label, stagedAt: performance.now(), committedAt: 0 });
            await db.tusk.stage(client, 'ordered', label);
            // random gaps mix the four sessions' transactions: an interleaving, not a wait
            await sleep(Math.random() * 4);
          }
          await client.query('COMMIT');
          const committedAt = performance.now();
          for (const row of mine) rows.push({ ...row, committedAt });
        }
      } finally {
        await client.end();
      }
    };
    await Promise.all([0, 1, 2, 3].map(session));
    await eventually(() => seen.length === rows.length);
    const position = new Map(seen.map((label, i) => [label, i]));
    // labels are connection.transaction.row
    const sameTransactionBefore = (p: string, q: string) =>
      p.slice(0, p.lastIndexOf('.')) === q.slice(0, q.lastIndexOf('.')) && p < q;
    const wrong = rows.flatMap((p) =>
      rows
        .filter((q) => p.committedAt < q.stagedAt || sameTransactionBefore(p.label, q.label))
        .filter((q) => (position.get(p.label) ?? -1) > (position.get(q.label) ?? -1))
        .map((q) => `${p.label} after ${q.label}`),
    );
    expect(wrong).toEqual([]);
  });
});
