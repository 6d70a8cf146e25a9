import { afterEach, describe, expect, it } from 'vitest';
import { bullmqSink, type Drainer, type Logger, type Sink, StagedJob, TuskValidationError } from '../src/index.js';
import { testQueue } from './bullmq.js';
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
    await sleep(100);
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
      const rows = await db.rows<ConstructorParameters<typeof StagedJob>[0]>(
        "SELECT id::text, task, payload::text AS payload, options, staged_at FROM $schema.staged_jobs WHERE task = 'twice' ORDER BY id",
      );
      const batch = rows.map((r) => new StagedJob(r));
      const context = { client: db.pool, schema: db.schema };
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
    await sleep(200);
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
    expect(() => db.tusk.drainer({} as never)).toThrow(TuskValidationError);
    expect(() => db.tusk.drainer({ sink: 'redis' as never })).toThrow(/options\.sink: must be 'tusk' or a Sink/);
    expect(() => db.tusk.drainer({ sink: 'tusk', batchSize: 0 })).toThrow(/options\.batchSize/);
  });
});
