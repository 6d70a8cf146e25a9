import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { useTestDb } from './helpers.js';

// The upkeep's search for lost jobs after a pinned horizon. While a transaction holds the
// horizon, the jobs that ran leave dead row versions and their entries in jobs_running,
// which every search must read. Once it ends, the first search marks those entries dead
// and the next ones skip them (a bitmap scan never marks them: every search read them all
// again until a vacuum removed them). Measured as the heap blocks a search read, in a
// schema of its own: no other test's jobs are running in it.

const db = useTestDb(import.meta.url);
const s = `"${db.schema}"`;

describe('the search for lost jobs after a pinned horizon', () => {
  it("the first search marks the pin's dead entries and the next ones skip them", async () => {
    // the blocks of jobs' heap one search read, as the statistics count them (its index is
    // read whole either way): a session's counts are flushed at its end at the latest
    const blocks = async () =>
      Number(
        (
          await db.pool.query<{ n: string }>(
            `SELECT coalesce(heap_blks_hit + heap_blks_read, 0) AS n FROM pg_statio_user_tables
             WHERE relid = '${s}.jobs'::regclass`,
          )
        ).rows[0]?.n,
      );
    /** Ends a session and waits until it is gone: its counts are in. */
    const close = async (c: pg.Client) => {
      const [{ pid } = { pid: 0 }] = (await c.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows;
      await c.end();
      await expect
        .poll(async () => (await db.rows('SELECT 1 FROM pg_stat_activity WHERE pid = $1', [pid])).length, {
          timeout: 10_000,
          interval: 20,
        })
        .toBe(0);
    };
    const searchReads = async () => {
      const c = new pg.Client({ connectionString: db.url });
      await c.connect();
      // due whatever the last search cost (the upkeep's pace is not what this tests)
      await db.rows('UPDATE $schema.lane_prune SET reap_searched_at = NULL, reap_search_ms = 0');
      const before = await blocks();
      await c.query(`SELECT released FROM ${s}.reap(0)`);
      await close(c);
      return (await blocks()) - before;
    };

    // 20 000 jobs claimed and finished while a session holds an XID; on a session of their
    // own, closed after (a pool's counts would come in later, mid-measure)
    const pin = new pg.Client({ connectionString: db.url });
    const w = new pg.Client({ connectionString: db.url });
    await pin.connect();
    await w.connect();
    try {
      await pin.query('BEGIN');
      await pin.query('SELECT txid_current()');
      await w.query(
        `INSERT INTO ${s}.jobs (task, payload, queue, tenant) SELECT 'work', 'null', 'pinned-search', 'a' FROM generate_series(1, 20000)`,
      );
      for (;;) {
        const { rows } = await w.query<{ id: string; lease_token: string }>(
          `SELECT id, lease_token FROM ${s}.claim_jobs(NULL, 2000, 3600000, '{pinned-search}')`,
        );
        if (rows.length === 0) break;
        await w.query(`SELECT count(*) FROM ${s}.finish_jobs('succeeded', $1::jsonb)`, [
          JSON.stringify(rows.map((r) => ({ id: r.id, token: r.lease_token }))),
        ]);
      }
      await pin.query('COMMIT');
    } finally {
      await pin.end();
      await close(w);
    }
    // the pin is gone; wait for any other session's snapshot or transaction id from before
    // the last job's end (other test files share the database), so that the dead rows are
    // dead to all: a transaction idle between statements holds its id without a snapshot
    const [{ x } = { x: '0' }] = await db.rows<{ x: string }>(`SELECT (txid_current() % 4294967296)::text AS x`);
    await expect
      .poll(
        async () =>
          (
            await db.rows<{ n: number }>(
              `SELECT count(*)::int AS n FROM pg_stat_activity
               WHERE datname = current_database() AND pid <> pg_backend_pid()
                 AND (age(backend_xmin) >= age($1::text::xid) OR age(backend_xid) >= age($1::text::xid))`,
              [x],
            )
          )[0]?.n,
        { timeout: 60_000, interval: 100 },
      )
      .toBe(0);

    const first = await searchReads();
    const second = await searchReads();
    expect(first).toBeGreaterThan(100); // the heap pages the pin left: some 800 here
    expect(second).toBeLessThan(first / 10);
  });
});
