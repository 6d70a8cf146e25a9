// Deduplicated batches do not deadlock each other; retry() keeps a job's
// dedup key and its own retry policy.
import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { useSessions, useTestDb } from '../helpers.js';
import { settledStates } from './common.js';

const db = useTestDb(import.meta.url);
const session = useSessions(() => db.url);

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

  it('10 pairs of concurrent calls with the same 100 keys in opposite orders: none fails, one job per key', async () => {
    await oppositeOrders(10, (n) => Array.from({ length: 100 }, (_, k) => `hundred-${n}-${k}`));
  });
});

describe("the keys' locks", () => {
  const s = () => `"${db.schema}"`;
  const keyed = (keys: string[], tenant = 'acme') =>
    JSON.stringify(keys.map((k) => ({ task: 'locks', payload: k, tenant, dedup_key: k })));
  const advisoryLocks = async (c: Awaited<ReturnType<typeof session>>) =>
    Number(
      (
        await c.query<{ n: string }>(
          `SELECT count(*) AS n FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'advisory'`,
        )
      ).rows[0]?.n,
    );

  /** Dead jobs of tenant acme in job_history, one per key, created `age` ago; their ids in order. */
  const deadJobs = async (keys: string[], age = '0 s') =>
    (
      await db.pool.query<{ id: string }>(
        `INSERT INTO ${s()}.job_history (id, tenant, queue, task, payload, priority, state, attempts, max_attempts,
           concurrency_key, dedup_key, created_at, run_at, finished_at)
         SELECT nextval('${db.schema}.jobs_id_seq'), 'acme', 'default', 'locks', 'null', 0, 'dead', 1, 1, '',
                k.key, now() - $2::interval, now() - $2::interval, now()
         FROM unnest($1::text[]) WITH ORDINALITY AS k(key, n) ORDER BY k.n RETURNING id`,
        [keys, age],
      )
    ).rows.map((r) => r.id);

  // PostgreSQL's lock table is the server's, some 64 entries per connection slot in all: a
  // call holding one lock per key (10 000 in one HTTP request) made others fail with
  // "out of shared memory"
  it('a call of 2 000 keys, one of 100 tenants, and a retry of 300 keyed jobs hold no advisory lock', async () => {
    const c = await session();
    await c.query('BEGIN');
    const keys = Array.from({ length: 2000 }, (_, k) => `many-${k}`);
    await c.query(`SELECT count(*) FROM ${s()}.enqueue_dedup($1::jsonb)`, [keyed(keys)]);
    expect(await advisoryLocks(c)).toBe(0);
    await c.query('ROLLBACK');

    await c.query('BEGIN');
    const tenants = JSON.stringify(
      Array.from({ length: 100 }, (_, k) => ({ task: 'locks', payload: k, tenant: `t${k}`, dedup_key: 'one' })),
    );
    await c.query(`SELECT count(*) FROM ${s()}.enqueue_dedup($1::jsonb)`, [tenants]);
    expect(await advisoryLocks(c)).toBe(0);
    await c.query('ROLLBACK');

    const dead = await deadJobs(Array.from({ length: 300 }, (_, g) => `dead-${g + 1}`));
    await c.query('BEGIN');
    const retried = await c.query(`SELECT count(*)::integer AS n FROM ${s()}.retry_jobs($1::bigint[])`, [dead]);
    expect(retried.rows[0]?.n).toBe(300);
    expect(await advisoryLocks(c)).toBe(0);
    await c.query('ROLLBACK');
  });

  /** Starts `sql` on `c` and resolves once it waits for a lock, with its result to come. */
  async function blocked<T extends pg.QueryResultRow>(
    c: Awaited<ReturnType<typeof session>>,
    sql: string,
    values: unknown[],
  ) {
    const pid = (await c.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]?.pid;
    const running = c.query<T>(sql, values);
    for (;;) {
      const { rows } = await db.pool.query(
        `SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'`,
        [pid],
      );
      // wrapped: an async function returning the promise itself would wait for it
      if (rows.length > 0) return { running };
      await new Promise((r) => setTimeout(r, 20));
    }
  }

  it.each([
    ['a call of 100 keys is open: a call of one of them', 100, 1],
    ['a call of one key is open: a call of 100 keys with it', 1, 100],
  ])('%s waits for its commit and gets its job', async (_what, first, second) => {
    const tag = `${first}-${second}`;
    const list = (n: number) => [`shared-${tag}`, ...Array.from({ length: n - 1 }, (_, k) => `own-${tag}-${n}-${k}`)];
    const a = await session();
    const b = await session();
    await a.query('BEGIN');
    const held = await a.query<{ id: string }>(`SELECT id FROM ${s()}.enqueue_dedup($1::jsonb) ORDER BY ord LIMIT 1`, [
      keyed(list(first)),
    ]);
    const waiting = await blocked<{ id: string; deduplicated: boolean }>(
      b,
      `SELECT id, deduplicated FROM ${s()}.enqueue_dedup($1::jsonb) ORDER BY ord LIMIT 1`,
      [keyed(list(second))],
    );
    await a.query('COMMIT');
    const got = (await waiting.running).rows[0];
    expect(got).toEqual({ id: held.rows[0]?.id, deduplicated: true });
  });

  it("a call's jobs get ids in its order, whatever the order its keys are written in", async () => {
    const keys = Array.from({ length: 50 }, (_, k) => `order-${49 - k}`);
    const { rows } = await db.pool.query<{ id: string }>(
      `SELECT id FROM ${s()}.enqueue_dedup($1::jsonb) ORDER BY ord`,
      [keyed(keys)],
    );
    const ids = rows.map((r) => BigInt(r.id));
    expect(ids.every((id, k) => k === 0 || id > (ids[k - 1] ?? id))).toBe(true);
  });

  // a transaction's calls of keys of its own hold back no one else's, whatever their sizes
  it('two open transactions, each a call of one key then one of 100 keys, all of their own: none waits, none fails', async () => {
    const [a, b] = [await session(), await session()];
    for (const c of [a, b]) await c.query('BEGIN');
    for (const size of [1, 100])
      for (const [c, who] of [
        [a, 'a'],
        [b, 'b'],
      ] as const) {
        const keys = Array.from({ length: size }, (_, k) => `own-txn-${who}-${size}-${k}`);
        const { rows } = await c.query(`SELECT id FROM ${s()}.enqueue_dedup($1::jsonb)`, [keyed(keys)]);
        expect(rows).toHaveLength(size);
      }
    for (const c of [a, b]) await c.query('COMMIT');
  });

  // the retry of a failed job holds its key from its row's update on: before, it updated
  // every failed job first, then waited on a revived job's key an enqueue held, which
  // waited on the failed job's key (a deadlock, 40P01)
  it('a retry of a failed and a dead keyed job, between enqueues holding their keys: no deadlock, the enqueue gets the failed job', async () => {
    const hashed = await db.pool.query<{ k: string }>(
      `SELECT k FROM unnest($1::text[]) k ORDER BY hashtext('acme' || E'\x1f' || k), k`,
      [Array.from({ length: 3 }, (_, k) => `mixed-${k}`)],
    );
    const [low, mid, high] = hashed.rows.map((r) => r.k);
    const failed = await db.pool.query<{ id: string }>(
      `INSERT INTO ${s()}.jobs (tenant, task, payload, state, run_at, attempts, dedup_key)
       VALUES ('acme', 'locks', 'null', 'failed', now() + interval '1 hour', 1, $1) RETURNING id`,
      [high],
    );
    const [dead] = await deadJobs([low ?? '']);
    const [c, a, r] = [await session(), await session(), await session()];
    await c.query('BEGIN');
    await c.query(`SELECT id FROM ${s()}.enqueue_dedup($1::jsonb)`, [keyed([mid ?? ''])]);
    await a.query('BEGIN');
    const enqueue = await blocked<{ id: string; deduplicated: boolean }>(
      a,
      `SELECT id, deduplicated FROM ${s()}.enqueue_dedup($1::jsonb) ORDER BY ord`,
      [keyed([high ?? '', low ?? '', mid ?? ''])],
    );
    const retry = await blocked<{ id: string }>(r, `SELECT id FROM ${s()}.retry_jobs($1::bigint[]) ORDER BY id`, [
      [failed.rows[0]?.id, dead],
    ]);
    await c.query('ROLLBACK');
    const enqueued = (await enqueue.running).rows;
    await a.query('COMMIT');
    // the failed job still held its key: the enqueue of it got the failed job
    expect(enqueued[0]).toEqual({ id: failed.rows[0]?.id, deduplicated: true });
    expect((await retry.running).rows.map((x) => x.id).sort()).toEqual([failed.rows[0]?.id, dead].sort());
  });

  it("an enqueue waiting on a retry that takes its key back gets a new job when the revived one is past the key's window", async () => {
    const [stale] = await deadJobs(['stale-key'], '2 days');
    const [r, e] = [await session(), await session()];
    await r.query('BEGIN');
    await r.query(`SELECT id FROM ${s()}.retry_jobs($1::bigint[])`, [[stale]]);
    const enqueue = await blocked<{ id: string; deduplicated: boolean }>(
      e,
      `SELECT id, deduplicated FROM ${s()}.enqueue_dedup($1::jsonb)`,
      [keyed(['stale-key'])],
    );
    await r.query('COMMIT');
    const got = (await enqueue.running).rows[0];
    expect(got?.deduplicated).toBe(false);
    expect(got?.id).not.toBe(stale);
    const holders = await db.pool.query(`SELECT id FROM ${s()}.jobs WHERE dedup_key = 'stale-key'`);
    expect(holders.rows.map((x) => x.id)).toEqual([got?.id]);
  });

  it('a retry of a keyed job while an enqueue of its key is open: it waits, then comes back without the key', async () => {
    const [revived] = await deadJobs(['revived-key']);
    const [a, b] = [await session(), await session()];
    await a.query('BEGIN');
    const fresh = await a.query<{ id: string }>(`SELECT id FROM ${s()}.enqueue_dedup($1::jsonb)`, [
      keyed(['revived-key']),
    ]);
    const retry = await blocked<{ id: string }>(b, `SELECT id FROM ${s()}.retry_jobs($1::bigint[])`, [[revived]]);
    await a.query('COMMIT');
    expect((await retry.running).rows.map((r) => r.id)).toEqual([revived]);
    const keys = await db.pool.query<{ id: string; dedup_key: string | null }>(
      `SELECT id, dedup_key FROM ${s()}.jobs WHERE id = ANY ($1::bigint[]) ORDER BY id`,
      [[revived, fresh.rows[0]?.id]],
    );
    expect(keys.rows).toEqual([
      { id: revived, dedup_key: null },
      { id: fresh.rows[0]?.id, dedup_key: 'revived-key' },
    ]);
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
