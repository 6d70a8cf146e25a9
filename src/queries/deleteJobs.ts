import type { Queryable } from '../db/queryable.js';
import { ident } from '../db/schema.js';

/** What deleting a job did: deleted, or why not (see delete_jobs in sql/). */
export type DeleteOutcome = 'deleted' | 'running' | 'has_dependents' | 'not_found';

/** Deletes these jobs, waiting or finished; each id's outcome, in input order. */
export async function deleteJobs(db: Queryable, schema: string, ids: string[]): Promise<DeleteOutcome[]> {
  const { rows } = await db.query<{ outcome: DeleteOutcome }>(
    `SELECT d.outcome FROM ${ident(schema)}.delete_jobs($1::bigint[]) WITH ORDINALITY AS d(id, outcome, n) ORDER BY d.n`,
    [ids],
  );
  return rows.map((r) => r.outcome);
}
