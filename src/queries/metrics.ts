import type pg from 'pg';
import type { Queryable } from '../db/queryable.js';
import { ident } from '../db/schema.js';

/** Unfinished jobs of one (queue, tenant, state) now. */
export interface JobGaugeRow {
  queue: string;
  tenant: string;
  state: string;
  n: number;
  /** For `available`: seconds the oldest one has waited. */
  oldest_s: number | null;
}

/** What happened in one (queue, tenant) during the window (one row per table it was read from). */
export interface EventCountRow {
  queue: string;
  tenant: string;
  /** Attempts started (claims), by the start time of each job's latest attempt. */
  started: number;
  /** Failed attempts, by the time in their error record. */
  failed_attempts: number;
  /** Jobs that reached a final state, by that state. */
  succeeded: number;
  dead: number;
  cancelled: number;
  expired: number;
}

/** Jobs finished in the window per (kind, queue, bucket): counts for the time histograms. */
export interface TimingRow {
  kind: 'wait' | 'run';
  queue: string;
  /** Index of the first bound the time is under or equal to; bounds.length for none. */
  bucket: number;
  n: number;
  sum_ms: number;
}

export interface MetricsScrape {
  /** The window's end: now minus the lag. The next window starts here. */
  upper: Date;
  gauges: JobGaugeRow[];
  events: EventCountRow[];
  timings: TimingRow[];
}

/**
 * Reads, in one snapshot (so each job is seen in exactly one table), the unfinished jobs
 * by state, and what happened from `since` to now minus `lagMs`: attempts started,
 * failed attempts, jobs finished and their wait and run times (none if that end is not
 * after `since`). Tusk writes these timestamps at the start of their transaction; the
 * lag leaves those transactions time to commit before their window is read.
 * `boundsMs`: histogram bounds, ascending.
 *
 * Cost: a scan of the unfinished jobs, and of the history finished since `since` (the
 * BRIN index on finished_at skips older rows).
 */
export async function scrapeMetrics(
  pool: pg.Pool,
  schema: string,
  since: Date,
  lagMs: number,
  boundsMs: number[],
): Promise<MetricsScrape> {
  const s = ident(schema);
  const client = await pool.connect();
  try {
    await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
    const { rows: w } = await client.query<{ upper: Date }>(
      `SELECT now() - make_interval(secs => $1 / 1000.0) AS upper`,
      [lagMs],
    );
    const upper = w[0]?.upper as Date;
    const inWindow = (column: string) => `${column} >= $1 AND ${column} < $2`;
    const errorsInWindow = `coalesce(sum((SELECT count(*) FROM jsonb_array_elements(errors) e
      WHERE ${inWindow(`(e->>'at')::timestamptz`)})) FILTER (WHERE errors IS NOT NULL), 0)::integer`;
    const gauges = await client.query<JobGaugeRow & EventCountRow>(
      `SELECT queue, tenant, state::text AS state, count(*)::integer AS n,
              extract(epoch FROM now() - min(run_at) FILTER (WHERE state = 'available'))::float8 AS oldest_s,
              count(*) FILTER (WHERE ${inWindow('started_at')})::integer AS started,
              ${errorsInWindow} AS failed_attempts, 0 AS succeeded, 0 AS dead, 0 AS cancelled, 0 AS expired
       FROM ${s}.jobs GROUP BY 1, 2, 3`,
      [since, upper],
    );
    const events: EventCountRow[] = [...gauges.rows];
    let timings: TimingRow[] = [];
    if (upper > since) {
      // from `since` on without an upper bound: a job that started in the window may have
      // finished since; its finish is counted in the next window
      const recent = `${s}.job_history WHERE finished_at >= $1`;
      const finished = await client.query<EventCountRow>(
        `SELECT queue, tenant, count(*) FILTER (WHERE ${inWindow('started_at')})::integer AS started,
                ${errorsInWindow} AS failed_attempts,
                count(*) FILTER (WHERE state = 'succeeded' AND finished_at < $2)::integer AS succeeded,
                count(*) FILTER (WHERE state = 'dead' AND finished_at < $2)::integer AS dead,
                count(*) FILTER (WHERE state = 'cancelled' AND finished_at < $2)::integer AS cancelled,
                count(*) FILTER (WHERE state = 'expired' AND finished_at < $2)::integer AS expired
         FROM ${recent} GROUP BY 1, 2`,
        [since, upper],
      );
      events.push(...finished.rows);
      // width_bucket counts the thresholds <= ms; with thresholds of bound + 1 it counts
      // the bounds < ms, so bucket i holds the times over bound i-1 and up to bound i
      timings = (
        await client.query<TimingRow>(
          `SELECT t.kind, h.queue, width_bucket(t.ms, $3::integer[]) AS bucket, count(*)::integer AS n,
                  sum(t.ms)::float8 AS sum_ms
           FROM (SELECT queue, wait_ms, run_ms FROM ${recent} AND finished_at < $2) h,
                LATERAL (VALUES ('wait', h.wait_ms), ('run', h.run_ms)) t(kind, ms)
           WHERE t.ms IS NOT NULL GROUP BY 1, 2, 3`,
          [since, upper, boundsMs.map((b) => b + 1)],
        )
      ).rows;
    }
    await client.query('COMMIT');
    return { upper, gauges: gauges.rows, events, timings };
  } catch (error) {
    await client.query('ROLLBACK').catch(() => {});
    throw error;
  } finally {
    client.release();
  }
}

/** Registered workers, and how many of them are alive (their session lock is held). */
export async function countWorkers(db: Queryable, schema: string): Promise<{ registered: number; alive: number }> {
  const s = ident(schema);
  const { rows } = await db.query<{ registered: number; alive: number }>(
    `SELECT count(*)::integer AS registered, count(*) FILTER (WHERE w.id = ANY (l.ids))::integer AS alive
     FROM ${s}.workers w CROSS JOIN (SELECT ${s}.live_worker_ids() AS ids) l`,
  );
  return rows[0] ?? { registered: 0, alive: 0 };
}
