// Ceilings of the peer comparison: what the same PostgreSQL does with bare SQL, no queue
// system around it. A drain ceiling deletes all jobs of a scratch table from a few
// connections, `SKIP LOCKED` batches at a time, with or without keeping each job in a
// history table; the enqueue ceiling inserts jobs server-side (`INSERT … SELECT …
// generate_series`) into the table Tusk's bulk enqueue writes, in a schema migrated for it.
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { openPeer, redisUrl, TASK } from '../peers/index.js';
import { cpuOf, cpuTotal } from './cpu.js';

export const CEILING_CONNECTIONS = 4;
export const CEILING_BATCH = 500;

export interface CeilingDrain {
  done: number;
  ms: number;
  remaining: number;
  /** Rows in the history table at the end (null for the bare DELETE). */
  history: number | null;
  /** CPU seconds of the drain's PostgreSQL backends (null when the server is not on this machine). */
  backendCpu: number | null;
  /** CPU seconds of this process during the drain (the ceiling's client). */
  clientCpu: number;
}

/** The statements of the drain ceilings, on the jobs table `t` and the history table `h`. */
export const ceilingSql = (t: string, h: string) => ({
  /**
   * The bare drain's one statement. The batch's ids come as an array (`= ANY (ARRAY(…))`),
   * not as `IN (SELECT …)`: PostgreSQL plans the latter as a hash semi-join over a
   * sequential scan of the whole table, every batch — a ceiling that falls as the table
   * grows, and under the drains it bounds.
   */
  bare: `DELETE FROM ${t} WHERE id = ANY (ARRAY(SELECT id FROM ${t} ORDER BY id LIMIT ${CEILING_BATCH} FOR UPDATE SKIP LOCKED))`,
  lock: `SELECT id FROM ${t} ORDER BY id LIMIT ${CEILING_BATCH} FOR UPDATE SKIP LOCKED`,
  keep: `WITH d AS (DELETE FROM ${t} WHERE id = ANY($1::bigint[]) RETURNING id, payload, created_at)
         INSERT INTO ${h} (id, payload, created_at) SELECT id, payload, created_at FROM d`,
});

/**
 * Drains `jobs` jobs from CEILING_CONNECTIONS connections, CEILING_BATCH at a time, in a
 * scratch schema (`schema`, dropped before and after).
 * Bare: `DELETE … WHERE id = ANY (ARRAY(SELECT … FOR UPDATE SKIP LOCKED))`, one statement.
 * Keeping history: in one transaction, lock a batch with `SELECT … FOR UPDATE SKIP
 * LOCKED`, then `WITH d AS (DELETE … RETURNING …) INSERT INTO job_history SELECT … FROM d`.
 */
export async function drainCeiling(
  url: string,
  jobs: number,
  keepHistory: boolean,
  say: (s: string) => void,
  schema = 'bench_ceiling',
): Promise<CeilingDrain> {
  const pool = new pg.Pool({ connectionString: url, max: CEILING_CONNECTIONS });
  const t = `${schema}.jobs`;
  const h = `${schema}.job_history`;
  const sql = ceilingSql(t, h);
  try {
    say('setting up');
    await pool.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await pool.query(`CREATE SCHEMA ${schema}`);
    await pool.query(
      `CREATE TABLE ${t} (id bigserial PRIMARY KEY, payload jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT now())`,
    );
    if (keepHistory) {
      await pool.query(
        `CREATE TABLE ${h} (id bigint PRIMARY KEY, payload jsonb NOT NULL, created_at timestamptz NOT NULL,
                           finished_at timestamptz NOT NULL DEFAULT now())`,
      );
    }
    await pool.query(`INSERT INTO ${t} (payload) SELECT jsonb_build_object('n', g) FROM generate_series(1, $1) g`, [
      jobs,
    ]);
    await pool.query(`VACUUM ANALYZE ${t}`);
    if (keepHistory) await pool.query(`VACUUM ANALYZE ${h}`);

    const bare = async (client: pg.PoolClient) => (await client.query(sql.bare)).rowCount ?? 0;
    const withHistory = async (client: pg.PoolClient) => {
      await client.query('BEGIN');
      try {
        const { rows } = await client.query<{ id: string }>(sql.lock);
        if (rows.length === 0) {
          await client.query('COMMIT');
          return 0;
        }
        const { rowCount } = await client.query(sql.keep, [rows.map((r) => r.id)]);
        await client.query('COMMIT');
        return rowCount ?? 0;
      } catch (error) {
        await client.query('ROLLBACK').catch(() => {});
        throw error;
      }
    };
    const step = keepHistory ? withHistory : bare;

    const clients = await Promise.all(Array.from({ length: CEILING_CONNECTIONS }, () => pool.connect()));
    const pids = await Promise.all(
      clients.map(async (c) => (await c.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]?.pid ?? 0),
    );
    let done = 0;
    const tick = setInterval(() => say(`drain ${done.toLocaleString('en')}/${jobs.toLocaleString('en')}`), 500);
    const backendCpu = cpuOf(pids);
    const clientCpu = process.cpuUsage();
    const t0 = performance.now();
    try {
      const loop = async (client: pg.PoolClient) => {
        for (;;) {
          const n = await step(client);
          if (!n) return;
          done += n;
        }
      };
      // a loop that finds nothing unlocked stops; go again until a round deletes nothing
      for (let before = -1; done !== before; ) {
        before = done;
        await Promise.all(clients.map(loop));
      }
    } finally {
      clearInterval(tick);
      for (const c of clients) c.release();
    }
    const ms = performance.now() - t0;
    const cpu = { backendCpu: backendCpu.stop(), clientCpu: cpuTotal(process.cpuUsage(clientCpu)) };
    const count = async (table: string) =>
      Number((await pool.query<{ n: string }>(`SELECT count(*) AS n FROM ${table}`)).rows[0]?.n);
    return { done, ms, remaining: await count(t), history: keepHistory ? await count(h) : null, ...cpu };
  } finally {
    await pool.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`).catch(() => {});
    await pool.end();
  }
}

export interface CeilingEnqueue {
  runs: Array<{ jobs: number; ms: number }>;
  /** Rows in the jobs table after each load. */
  rows: number[];
}

/**
 * Inserts `jobs` jobs, `chunk` per statement, into the `jobs` table of a Tusk schema
 * (created by Tusk's migrations, triggers included) with `INSERT … SELECT …
 * generate_series`: the columns and values Tusk's bulk enqueue (COPY) writes, the rest
 * their defaults. Timed at the client per statement; `loads` loads, each into a new schema,
 * as the peers' bulk enqueue.
 */
export async function enqueueCeiling(
  url: string,
  jobs: number,
  chunk: number,
  loads: number,
  say: (s: string) => void,
): Promise<CeilingEnqueue> {
  const pool = new pg.Pool({ connectionString: url, max: 2 });
  const schema = 'bench_ceiling_enqueue';
  const tusk = await openPeer('tusk', { url, redisUrl: redisUrl(), pool, schema });
  const result: CeilingEnqueue = { runs: [], rows: [] };
  try {
    for (let load = 0; load < loads; load++) {
      say('setting up (Tusk migrations)');
      await tusk.setup();
      let ms = 0;
      for (let from = 1; from <= jobs; from += chunk) {
        const to = Math.min(jobs, from + chunk - 1);
        const t0 = performance.now();
        await pool.query(
          `INSERT INTO "${schema}".jobs (tenant, queue, task, payload, priority, max_attempts, concurrency_key)
           SELECT 'default', 'default', $3, jsonb_build_object('n', g), 0, 5, ''
           FROM generate_series($1::int, $2::int) g`,
          [from, to, TASK],
        );
        ms += performance.now() - t0;
        say(`INSERT … SELECT ${to.toLocaleString('en')}/${jobs.toLocaleString('en')}`);
      }
      result.runs.push({ jobs, ms });
      result.rows.push((await tusk.counts()).remaining);
    }
    return result;
  } finally {
    await tusk.teardown().catch(() => {});
    await tusk.close().catch(() => {});
    await pool.end();
  }
}
