import pg from 'pg';
import type { Queryable } from '../db/queryable.js';
import { copyJobs } from '../queries/copyJobs.js';
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
    if (db instanceof pg.Pool) {
      const client = await db.connect();
      try {
        return { ids: await copyJobs(client, schema, records) };
      } finally {
        client.release();
      }
    }
  }
  return { ids: await insertJobs(db, schema, jsonArray(records)) };
}

/** Records as the JSON array the insert statements read. */
export const jsonArray = (records: JobRecord[]): string => `[${records.map(jsonEntry).join(',')}]`;
