import type { PreparedQueryable, Queryable } from '../db/queryable.js';
import { ident } from '../db/schema.js';
import { FINISHED_COLUMNS, type JobRow, UNFINISHED_COLUMNS } from './jobColumns.js';

/**
 * One job by id, from the unfinished jobs or the history; null if unknown. A prepared
 * statement: planning a query over every day partition of the history costs more than
 * running it (an index probe per partition).
 */
export async function selectJob(db: PreparedQueryable, schema: string, id: string): Promise<JobRow | null> {
  const s = ident(schema);
  const { rows } = await db.query<JobRow>({
    name: `tusk_get_job_${schema}`,
    text: `(SELECT ${UNFINISHED_COLUMNS} FROM ${s}.jobs WHERE id = $1)
           UNION ALL
           (SELECT ${FINISHED_COLUMNS} FROM ${s}.job_history WHERE id = $1)
           LIMIT 1`,
    values: [id],
  });
  return rows[0] ?? null;
}

/**
 * Jobs by id, unfinished or finished, in the order of `ids` (an id of no job is left
 * out): what `ctx.dependencies()` reads.
 */
export async function selectJobs(db: Queryable, schema: string, ids: readonly string[]): Promise<JobRow[]> {
  const s = ident(schema);
  const { rows } = await db.query<JobRow & { ord: string }>(
    `SELECT j.*, i.ord FROM unnest($1::bigint[]) WITH ORDINALITY AS i(id, ord)
     CROSS JOIN LATERAL (
       (SELECT ${UNFINISHED_COLUMNS} FROM ${s}.jobs WHERE id = i.id)
       UNION ALL
       (SELECT ${FINISHED_COLUMNS} FROM ${s}.job_history WHERE id = i.id)
       LIMIT 1) j
     ORDER BY i.ord`,
    [ids],
  );
  return rows.map(({ ord: _, ...row }) => row);
}
