/** A job row as the queries return it (jobs and job_history share this shape). */
export interface JobRow {
  id: string;
  tenant: string;
  queue: string;
  task: string;
  payload: unknown;
  priority: number;
  state: string;
  attempts: number;
  max_attempts: number;
  concurrency_key: string;
  created_at: Date;
  run_at: Date;
  started_at: Date | null;
  finished_at: Date | null;
  expires_at: Date | null;
  wait_ms: number | null;
  run_ms: number | null;
  stats: Record<string, unknown> | null;
  result: unknown;
  errors: unknown[] | null;
  cancel_requested: boolean;
  source_type: string | null;
  source_id: string | null;
  source_method: string | null;
  progress: unknown;
  /** The jobs it depends on (null: none). */
  depends_on: string[] | null;
  waiting_on: number;
}

/** The select list giving a JobRow from `jobs` (unfinished jobs). */
export const UNFINISHED_COLUMNS = `id, tenant, queue, task, payload, priority, state::text AS state,
  attempts, max_attempts, concurrency_key, created_at, run_at, started_at,
  NULL::timestamptz AS finished_at, expires_at,
  CASE WHEN started_at IS NOT NULL
       THEN least(2147483647, greatest(0, extract(epoch FROM started_at - run_at) * 1000))::integer END AS wait_ms,
  NULL::integer AS run_ms, stats, NULL::jsonb AS result, errors, cancel_requested,
  source_type, source_id, source_method, progress, depends_on, waiting_on`;

/** The select list giving a JobRow from `job_history` (finished jobs). */
export const FINISHED_COLUMNS = `id, tenant, queue, task, payload, priority, state::text AS state,
  attempts, max_attempts, concurrency_key, created_at, run_at, started_at, finished_at, expires_at,
  wait_ms, run_ms, stats, result, errors, false AS cancel_requested, source_type, source_id, source_method,
  progress, depends_on, 0 AS waiting_on`;
