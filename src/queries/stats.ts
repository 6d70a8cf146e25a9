import type { Queryable } from '../db/queryable.js';
import { ident } from '../db/schema.js';

/** Jobs per (tenant, queue, state), unfinished and finished. */
export interface StateCount {
  tenant: string;
  queue: string;
  state: string;
  n: number;
}

export async function countByState(db: Queryable, schema: string): Promise<StateCount[]> {
  const s = ident(schema);
  const { rows } = await db.query<StateCount>(
    `SELECT tenant, queue, state::text AS state, count(*)::integer AS n FROM ${s}.jobs GROUP BY 1, 2, 3
     UNION ALL
     SELECT tenant, queue, state::text, count(*)::integer FROM ${s}.job_history GROUP BY 1, 2, 3`,
  );
  return rows;
}

/** Outcome and timing percentiles of finished jobs per (tenant, queue). */
export interface HistorySummary {
  tenant: string;
  queue: string;
  succeeded: number;
  /** Succeeded after at least one failed attempt. */
  retried: number;
  dead: number;
  wait_p50: number | null;
  wait_p95: number | null;
  run_p50: number | null;
  run_p95: number | null;
}

export async function summarizeHistory(db: Queryable, schema: string): Promise<HistorySummary[]> {
  const { rows } = await db.query<HistorySummary>(
    `SELECT tenant, queue,
            count(*) FILTER (WHERE state = 'succeeded')::integer AS succeeded,
            count(*) FILTER (WHERE state = 'succeeded' AND errors IS NOT NULL)::integer AS retried,
            count(*) FILTER (WHERE state = 'dead')::integer AS dead,
            percentile_disc(0.5) WITHIN GROUP (ORDER BY wait_ms) AS wait_p50,
            percentile_disc(0.95) WITHIN GROUP (ORDER BY wait_ms) AS wait_p95,
            percentile_disc(0.5) WITHIN GROUP (ORDER BY run_ms) AS run_p50,
            percentile_disc(0.95) WITHIN GROUP (ORDER BY run_ms) AS run_p95
     FROM ${ident(schema)}.job_history GROUP BY 1, 2 ORDER BY 1, 2`,
  );
  return rows;
}

/** The id of the oldest finished job in `state`, if any (for examples). */
export async function firstJobId(db: Queryable, schema: string, state: string): Promise<string | null> {
  const { rows } = await db.query<{ id: string }>(
    `SELECT id FROM ${ident(schema)}.job_history WHERE state = $1::text::${ident(schema)}.job_state ORDER BY id LIMIT 1`,
    [state],
  );
  return rows[0]?.id ?? null;
}

/**
 * Jobs per (tenant, queue, state) and per (task, state): unfinished ones now, finished
 * ones since `since`. A row of the second kind has `by_task` set and no tenant or queue.
 */
export interface GroupCount {
  tenant: string | null;
  queue: string | null;
  task: string | null;
  by_task: boolean;
  state: string;
  n: number;
  /** For `available`: how long the oldest one has waited, in ms. */
  oldest_ms: number | null;
}

export async function countJobs(db: Queryable, schema: string, since: Date): Promise<GroupCount[]> {
  const s = ident(schema);
  // grouping sets: both breakdowns from one scan of each table
  const { rows } = await db.query<GroupCount>(
    `SELECT tenant, queue, task, GROUPING(task) = 0 AS by_task, state::text AS state, count(*)::integer AS n,
            CASE WHEN state = 'available'
                 THEN greatest(0, extract(epoch FROM now() - min(run_at)) * 1000)::float8 END AS oldest_ms
     FROM ${s}.jobs GROUP BY GROUPING SETS ((tenant, queue, state), (task, state))
     UNION ALL
     SELECT tenant, queue, task, GROUPING(task) = 0, state::text, count(*)::integer, NULL
     FROM ${s}.job_history WHERE finished_at >= $1 GROUP BY GROUPING SETS ((tenant, queue, state), (task, state))`,
    [since],
  );
  return rows;
}
