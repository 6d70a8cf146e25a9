import type { Queryable } from '../db/queryable.js';
import { ident } from '../db/schema.js';

/** Writes the progress (JSON texts) of running jobs held by these leases; returns how many were set. */
export async function setProgress(
  db: Queryable,
  schema: string,
  jobs: Array<{ id: string; token: string; progress: string }>,
): Promise<number> {
  const { rows } = await db.query<{ n: number }>(
    `SELECT ${ident(schema)}.set_progress($1::bigint[], $2::bigint[], $3::jsonb[]) AS n`,
    [jobs.map((j) => j.id), jobs.map((j) => j.token), jobs.map((j) => j.progress)],
  );
  return rows[0]?.n ?? 0;
}

/** A running job's progress, as the event stream shows it. */
export interface ProgressEvent {
  id: string;
  tenant: string;
  queue: string;
  task: string;
  progress: unknown;
}

/** The progress of these jobs still running (each event stream keeps its tenant's). */
export async function selectProgress(db: Queryable, schema: string, ids: string[]): Promise<ProgressEvent[]> {
  const { rows } = await db.query<ProgressEvent>(
    `SELECT id::text, tenant, queue, task, progress FROM ${ident(schema)}.jobs
     WHERE id = ANY ($1::bigint[]) AND state = 'running' ORDER BY id`,
    [ids],
  );
  return rows;
}
