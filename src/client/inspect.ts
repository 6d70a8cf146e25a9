import type { Queryable } from '../db/queryable.js';
import { type JobFilter, listJobs } from '../queries/listJobs.js';
import { listWorkers, type WorkerRow } from '../queries/listWorkers.js';
import { activityBuckets } from '../queries/timeseries.js';
import type { JobSummary } from '../types.js';
import { toSummary } from './jobs.js';

// Read-only views for the dashboard and the HTTP API: job lists, workers, activity.

/** A page of jobs, newest first; `nextCursor` continues it (null: last page). */
export interface JobPage {
  jobs: JobSummary[];
  nextCursor: string | null;
}

export async function jobPage(db: Queryable, schema: string, filter: JobFilter): Promise<JobPage> {
  // one row more than asked tells whether there is a next page
  const rows = await listJobs(db, schema, { ...filter, limit: filter.limit + 1 });
  const more = rows.length > filter.limit;
  const jobs = rows.slice(0, filter.limit).map(toSummary);
  return { jobs, nextCursor: more ? (jobs.at(-1)?.id ?? null) : null };
}

/** A registered worker: its row, its times named in camelCase. */
export interface WorkerInfo extends Omit<WorkerRow, 'started_at' | 'heartbeat_at'> {
  startedAt: Date;
  heartbeatAt: Date;
}

export async function workers(db: Queryable, schema: string): Promise<WorkerInfo[]> {
  return (await listWorkers(db, schema)).map(({ started_at, heartbeat_at, ...worker }) => ({
    ...worker,
    startedAt: started_at,
    heartbeatAt: heartbeat_at,
  }));
}

/** Jobs enqueued and finished per time bucket, with wait and run time percentiles (ms). */
export interface ActivityBucket {
  t: Date;
  enqueued: number;
  succeeded: number;
  dead: number;
  /** Cancelled or expired. */
  other: number;
  waitP50: number | null;
  waitP95: number | null;
  runP50: number | null;
  runP95: number | null;
}

export async function activity(
  db: Queryable,
  schema: string,
  args: { windowSeconds: number; bucketSeconds: number; tenant: string | null; queue: string | null },
): Promise<ActivityBucket[]> {
  return (await activityBuckets(db, schema, args)).map((b) => ({
    t: b.t,
    enqueued: b.enqueued,
    succeeded: b.succeeded,
    dead: b.dead,
    other: b.other,
    waitP50: b.wait_p50,
    waitP95: b.wait_p95,
    runP50: b.run_p50,
    runP95: b.run_p95,
  }));
}
