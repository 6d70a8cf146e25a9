// Debounce: a burst of enqueues with one key makes one job, with the last payload.
import { describe, expect, it } from 'vitest';
import { TuskValidationError } from '../src/index.js';
import { tusk as cli, cliEnv } from './cli.js';
import { eventually, sleep, useTestDb } from './helpers.js';

const db = useTestDb(import.meta.url);

describe('debounce', () => {
  it('1 000 enqueues over 2 s with one key: one job, the last payload, run once after the burst', async () => {
    const seen: unknown[] = [];
    const worker = db.worker({ queues: ['deb'], pollMs: 50, tasks: { save: (p: unknown) => void seen.push(p) } });
    await worker.start();
    const ids = new Set<string>();
    let deduplicated = 0;
    const started = Date.now();
    const send = async (n: number) => {
      const r = await db.tusk.enqueue('save', { n }, { queue: 'deb', debounce: { key: 'doc-7', delayMs: 400 } });
      ids.add(r.id);
      if (r.deduplicated) deduplicated++;
    };
    // 4 producers at once, each paced to spread its share over 2 s; then the last one alone,
    // so that "the last payload" is known
    await Promise.all(
      [0, 1, 2, 3].map(async (p) => {
        for (let n = p; n < 999; n += 4) {
          await send(n);
          const due = (2000 * n) / 999 - (Date.now() - started);
          // the burst's pace, the scenario itself: a stall over 400 ms between two enqueues lets the job run mid-burst
          if (due > 0) await sleep(due);
        }
      }),
    );
    await send(999);
    console.log(`debounce: 1 000 enqueues with one key in ${Date.now() - started} ms from 4 producers`);
    expect(deduplicated).toBe(999);
    expect(ids.size).toBe(1);
    const [id] = [...ids] as [string];
    expect(seen).toEqual([]); // the burst kept moving its start
    await eventually(async () => (await db.tusk.getJob(id))?.state === 'succeeded', 5000);
    expect(seen).toEqual([{ n: 999 }]);
    // the next burst makes a new job
    const next = await db.tusk.enqueue('save', { n: 1000 }, { queue: 'deb', debounce: { key: 'doc-7', delayMs: 50 } });
    expect(next).toMatchObject({ deduplicated: false });
    expect(next.id).not.toBe(id);
    await worker.stop();
  });

  it('maxWaitMs bounds how far a steady stream moves the start; keys are per tenant; concurrent enqueues make one job', async () => {
    const first = await db.tusk.enqueue('save', 1, {
      queue: 'deb-2',
      debounce: { key: 'k', delayMs: 60_000, maxWaitMs: 1000 },
    });
    const again = await db.tusk.enqueue('save', 2, {
      queue: 'deb-2',
      debounce: { key: 'k', delayMs: 60_000, maxWaitMs: 1000 },
    });
    expect(again.id).toBe(first.id);
    const job = await db.tusk.getJob(first.id);
    expect((job?.runAt.getTime() ?? 0) - (job?.createdAt.getTime() ?? 0)).toBeLessThanOrEqual(1000);
    expect(job?.payload).toBe(2);

    const other = await db.tusk.enqueue('save', 3, {
      queue: 'deb-2',
      tenant: 'b',
      debounce: { key: 'k', delayMs: 60_000 },
    });
    expect(other.id).not.toBe(first.id);

    const racing = await Promise.all(
      Array.from({ length: 20 }, (_, n) =>
        db.another().enqueue('save', n, { queue: 'deb-3', debounce: { key: 'race', delayMs: 60_000 } }),
      ),
    );
    expect(new Set(racing.map((r) => r.id)).size).toBe(1);
    expect(racing.filter((r) => !r.deduplicated)).toHaveLength(1);
  });

  it('once the job is due, the next enqueue starts a new burst, though no one has made the job available yet', async () => {
    const first = await db.tusk.enqueue(
      'save',
      { v: 1 },
      { queue: 'deb-due', debounce: { key: 'doc-9', delayMs: 200 } },
    );
    // due on the database's clock; no worker, fetch or upkeep has promoted it
    await db.clockPast('SELECT run_at FROM $schema.jobs WHERE id = $1', [first.id]);
    const runAt = (await db.tusk.getJob(first.id))?.runAt;
    // before, the due job still matched the key: its payload replaced and its start moved later
    const second = await db.tusk.enqueue(
      'save',
      { v: 2 },
      { queue: 'deb-due', debounce: { key: 'doc-9', delayMs: 200 } },
    );
    expect(second.deduplicated).toBe(false);
    expect(second.id).not.toBe(first.id);
    const job = await db.tusk.getJob(first.id);
    expect(job).toMatchObject({ state: 'available', payload: { v: 1 } });
    expect(job?.runAt).toEqual(runAt);
    expect(await db.tusk.getJob(second.id)).toMatchObject({ state: 'scheduled', payload: { v: 2 } });
    await db.pool.query(`DELETE FROM "${db.schema}".jobs WHERE queue = 'deb-due'`);
  });

  it("enqueues in a transaction open longer than the delay still make one job: due is reckoned by the transaction's clock", async () => {
    const producer = await db.pool.connect();
    try {
      await producer.query('BEGIN');
      await producer.query('SELECT pg_sleep(0.5)'); // the transaction's other work
      const sent = [];
      for (const v of [1, 2, 3]) {
        sent.push(
          await db.tusk.enqueue(
            'save',
            { v },
            { client: producer, queue: 'deb-tx', debounce: { key: 'doc-10', delayMs: 200 } },
          ),
        );
      }
      await producer.query('COMMIT');
      // before, each enqueue found the one before due (by the clock) and made a new job
      expect(sent.map((r) => r.deduplicated)).toEqual([false, true, true]);
      const jobs = await db.rows<{ payload: unknown }>('SELECT payload FROM $schema.jobs WHERE queue = $1', ['deb-tx']);
      expect(jobs).toEqual([{ payload: { v: 3 } }]);
    } finally {
      producer.release();
    }
    await db.pool.query(`DELETE FROM "${db.schema}".jobs WHERE queue = 'deb-tx'`);
  });

  it('refuses debounce with runAt, delayMs or a dedup key, and a delay of 0', async () => {
    const refused = (options: object) =>
      expect(db.tusk.enqueue('save', null, options as never)).rejects.toThrow(TuskValidationError);
    await refused({ debounce: { key: 'k', delayMs: 100 }, runAt: new Date() });
    await refused({ debounce: { key: 'k', delayMs: 100 }, delayMs: 5 });
    await refused({ debounce: { key: 'k', delayMs: 100 }, dedupKey: 'd' });
    await refused({ debounce: { key: 'k', delayMs: 0 } });
    await refused({ debounce: { key: '', delayMs: 10 } });
  });

  it('from the CLI: --debounce-key with --debounce-ms', async () => {
    const env = cliEnv(db.url, db.schema);
    const args = ['enqueue', 'save', '--queue', 'deb-cli', '--debounce-key', 'c', '--debounce-ms', '60000'];
    const first = await cli(env, ...args.slice(0, 2), '{"n":1}', ...args.slice(2));
    const second = await cli(env, ...args.slice(0, 2), '{"n":2}', ...args.slice(2));
    expect([first.code, second.code]).toEqual([0, 0]);
    expect(second.stdout).toBe(first.stdout);
    expect(second.stderr).toMatch(/debounced: the key's waiting job \(\d+\) takes this payload/);
    expect((await db.tusk.getJob(first.stdout.trim()))?.payload).toEqual({ n: 2 });
    const alone = await cli(env, 'enqueue', 'save', '--debounce-key', 'c');
    expect(alone.code).toBe(1);
    expect(alone.stderr).toMatch(/--debounce-key: and --debounce-ms go together/);
  });
});
