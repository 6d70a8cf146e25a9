import type { Queryable } from '../db/queryable.js';
import { ident } from '../db/schema.js';

/**
 * Returns running jobs to the queue, one statement for the batch. `jobsJson` is a JSON
 * array of `{id, attempt, delay_ms?, error?, queue?, stats?, refund?}`. Returns how many
 * were requeued (the others were fenced out by their attempt).
 */
export async function requeueJobs(
  db: Queryable,
  schema: string,
  jobsJson: string,
  asyncCommit = false,
): Promise<number> {
  const { rows } = await db.query<{ n: number }>(
    `SELECT count(*)::integer AS n FROM ${ident(schema)}.requeue_jobs($1::jsonb, $2)`,
    [jobsJson, asyncCommit],
  );
  return rows[0]?.n ?? 0;
}
