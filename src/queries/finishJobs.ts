import type { Queryable } from '../db/queryable.js';
import { ident } from '../db/schema.js';
import { type OutcomeEntry, outcomesJson } from './outcomes.js';

/** Final states a job can be moved to history in. */
export type FinalState = 'succeeded' | 'dead' | 'cancelled' | 'expired';

/**
 * Moves jobs to history in `state`, one statement for the batch. A running job's entry
 * carries its lease token (an entry without one finishes only a job that is not running).
 * Returns how many were finished (the others were fenced out); a count, not the ids, keeps
 * the reply one row for a batch of hundreds.
 */
export async function finishJobs(
  db: Queryable,
  schema: string,
  state: FinalState,
  entries: readonly OutcomeEntry[],
  asyncCommit = false,
): Promise<number> {
  const { rows } = await db.query<{ n: number }>(
    `SELECT count(*)::integer AS n FROM ${ident(schema)}.finish_jobs($1, $2::jsonb, $3)`,
    [state, outcomesJson(entries), asyncCommit],
  );
  return rows[0]?.n ?? 0;
}
