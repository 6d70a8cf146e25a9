import pg from 'pg';
import type { Queryable } from '../db/queryable.js';
import { copyJobSlices, copyJobs } from '../queries/copyJobs.js';
import { insertJobs, insertJobsDedup, insertJobsFlow } from '../queries/insertJobs.js';
import { hasDedup, hasDependencies, isDelayed, type JobRecord, jsonEntry } from './entries.js';

/** From this many jobs on, COPY is used (below, INSERT's single round trip wins). */
export const COPY_MIN_JOBS = 500;

/** Ids in input order; with deduplication asked for, whether each entry matched a job. */
export interface Written {
  ids: string[];
  deduplicated?: boolean[];
}

/**
 * Writes validated records in one statement: through enqueue_flow when any entry has
 * dependencies (then none has a dedup key: the caller checks), through enqueue_dedup when
 * any entry has a dedup key, by COPY for big batches without delays on a `pg` connection
 * (about twice as fast), else by one INSERT of a JSON array.
 */
export async function writeRecords(db: Queryable, schema: string, records: JobRecord[]): Promise<Written> {
  if (records.some(hasDependencies)) return { ids: await insertJobsFlow(db, schema, jsonArray(records)) };
  if (records.some(hasDedup)) {
    const rows = await insertJobsDedup(db, schema, jsonArray(records));
    return { ids: rows.map((r) => r.id), deduplicated: rows.map((r) => r.deduplicated) };
  }
  if (records.length >= COPY_MIN_JOBS && !records.some(isDelayed)) {
    if (db instanceof pg.Client) return { ids: await copyJobs(db, schema, records) };
    if (db instanceof pg.Pool) return copyRecordSlices(db, schema, records.length, [records]);
  }
  return { ids: await insertJobs(db, schema, jsonArray(records)) };
}

/** Records as the JSON array the insert statements read. */
export const jsonArray = (records: JobRecord[]): string => `[${records.map(jsonEntry).join(',')}]`;

/**
 * Writes `count` records by COPY on a connection of the pool's, the records coming in
 * slices that are made (validated) while the ones before are being inserted. A slice
 * that throws ends the COPY with nothing inserted and that error; the connection, its
 * COPY failed halfway, is closed rather than given back.
 */
export async function copyRecordSlices(
  pool: pg.Pool,
  schema: string,
  count: number,
  slices: Iterable<JobRecord[]> | AsyncIterable<JobRecord[]>,
): Promise<Written> {
  const client = await pool.connect();
  try {
    const ids = await copyJobSlices(client, schema, count, slices);
    client.release();
    return { ids };
  } catch (error) {
    client.release(error instanceof Error ? error : true);
    throw error;
  }
}

/** Whether a raw entry of enqueueMany asks for nothing COPY cannot write (a delay, a dedup key, dependencies). */
export const plainEntry = (job: unknown): boolean => {
  if (job === null || typeof job !== 'object') return false;
  const o = job as Record<string, unknown>;
  return (
    o.runAt === undefined &&
    o.delayMs === undefined &&
    o.debounce === undefined &&
    o.dedupKey === undefined &&
    !o.dedupe &&
    o.dependsOn === undefined
  );
};
