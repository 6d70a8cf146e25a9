import { TuskValidationError } from '../errors.js';
import type { JobRow } from '../queries/jobColumns.js';
import type { Job, JobError, JobSource, JobState } from '../types.js';

/** A job id as the database wants it: decimal digits. Accepts string, number or bigint. */
export function jobId(id: unknown, field = 'id'): string {
  const text = typeof id === 'number' || typeof id === 'bigint' ? String(id) : id;
  if (typeof text !== 'string' || !/^[1-9]\d{0,18}$/.test(text) || BigInt(text) > 9223372036854775807n) {
    throw new TuskValidationError(field, `must be a job id: a positive integer (got ${JSON.stringify(String(id))})`);
  }
  return text;
}

/** The public shape of a job row. */
export function toJob(row: JobRow): Job {
  const errors = (row.errors ?? []) as JobError[];
  return {
    id: row.id,
    task: row.task,
    tenant: row.tenant,
    queue: row.queue,
    state: row.state as JobState,
    payload: row.payload,
    priority: row.priority,
    attempts: row.attempts,
    maxAttempts: row.max_attempts,
    concurrencyKey: row.concurrency_key === '' ? null : row.concurrency_key,
    createdAt: row.created_at,
    runAt: row.run_at,
    startedAt: row.started_at,
    finishedAt: row.finished_at,
    expiresAt: row.expires_at,
    waitMs: row.wait_ms,
    runMs: row.run_ms,
    stats: row.stats,
    result: row.result ?? null,
    error: errors.at(-1) ?? null,
    errors,
    cancelRequested: row.cancel_requested,
    source: sourceOf(row),
    progress: row.progress ?? null,
    dependsOn: row.depends_on ?? [],
    waitingOn: row.waiting_on,
  };
}

/** The source columns of a row as a JobSource (null when the job has none). */
export function sourceOf(row: {
  source_type: string | null;
  source_id: string | null;
  source_method: string | null;
}): JobSource | null {
  if (row.source_type === null || row.source_id === null) return null;
  return { type: row.source_type, id: row.source_id, method: row.source_method };
}
