import type { Queryable } from '../db/queryable.js';
import { ident } from '../db/schema.js';
import { type OutcomeEntry, outcomesJson } from './outcomes.js';

/**
 * Returns running jobs to the queue, one statement for the batch (a job whose cancel was
 * asked for is finished as cancelled instead). Returns how many were requeued or
 * cancelled (the others were fenced out by their lease token).
 */
export async function requeueJobs(
  db: Queryable,
  schema: string,
  entries: readonly OutcomeEntry[],
  asyncCommit = false,
): Promise<number> {
  const { rows } = await db.query<{ n: number }>(
    `SELECT count(*)::integer AS n FROM ${ident(schema)}.requeue_jobs($1::jsonb, $2)`,
    [outcomesJson(entries), asyncCommit],
  );
  return rows[0]?.n ?? 0;
}
