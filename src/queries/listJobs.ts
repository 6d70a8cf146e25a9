import type { Queryable } from '../db/queryable.js';
import { ident } from '../db/schema.js';
import { FINISHED_STATES } from '../types.js';

/** A job in a list: what a table row shows, without payload, result or stats. */
export interface JobSummaryRow {
  id: string;
  task: string;
  tenant: string;
  queue: string;
  state: string;
  priority: number;
  attempts: number;
  max_attempts: number;
  created_at: Date;
  run_at: Date;
  started_at: Date | null;
  finished_at: Date | null;
  wait_ms: number | null;
  run_ms: number | null;
  /** The last failed attempt's message. */
  error: string | null;
}

export interface JobFilter {
  state: string | null;
  tenant: string | null;
  queue: string | null;
  task: string | null;
  /** Only jobs created at or after this time. */
  createdFrom: Date | null;
  /** Only jobs created before this time. */
  createdTo: Date | null;
  /** Only jobs with a smaller id (the last id of the previous page). */
  before: string | null;
  limit: number;
}

const UNFINISHED = `id, task, tenant, queue, state::text AS state, priority, attempts, max_attempts,
  created_at, run_at, started_at, NULL::timestamptz AS finished_at,
  CASE WHEN started_at IS NOT NULL
       THEN least(2147483647, greatest(0, extract(epoch FROM started_at - run_at) * 1000))::integer END AS wait_ms,
  NULL::integer AS run_ms, errors->-1->>'message' AS error`;
const FINISHED = `id, task, tenant, queue, state::text AS state, priority, attempts, max_attempts,
  created_at, run_at, started_at, finished_at, wait_ms, run_ms, errors->-1->>'message' AS error`;

/**
 * Jobs matching the filter, newest first, `limit` at most: unfinished and finished ones
 * merged by id. Keyset paging: pass the last id of a page as `before` for the next one,
 * which costs the same on page 1 and page 1 000 (an index scan backwards from that id).
 * A state filter reads only the table that can hold the state. A time range is checked on
 * the rows the backward scan meets: a range far back costs the scan down to it.
 */
export async function listJobs(db: Queryable, schema: string, f: JobFilter): Promise<JobSummaryRow[]> {
  const s = ident(schema);
  const where = `($1::text IS NULL OR state = $1::text::${s}.job_state) AND ($2::text IS NULL OR tenant = $2)
    AND ($3::text IS NULL OR queue = $3) AND ($4::text IS NULL OR task = $4) AND ($5::bigint IS NULL OR id < $5)
    AND ($7::timestamptz IS NULL OR created_at >= $7) AND ($8::timestamptz IS NULL OR created_at < $8)`;
  const finished = f.state !== null && (FINISHED_STATES as readonly string[]).includes(f.state);
  const branches: string[] = [];
  if (!finished) branches.push(`(SELECT ${UNFINISHED} FROM ${s}.jobs WHERE ${where} ORDER BY id DESC LIMIT $6)`);
  if (f.state === null || finished) {
    branches.push(`(SELECT ${FINISHED} FROM ${s}.job_history WHERE ${where} ORDER BY id DESC LIMIT $6)`);
  }
  const { rows } = await db.query<JobSummaryRow>(
    `SELECT * FROM (${branches.join(' UNION ALL ')}) j ORDER BY id DESC LIMIT $6`,
    [f.state, f.tenant, f.queue, f.task, f.before, f.limit, f.createdFrom, f.createdTo],
  );
  return rows;
}
