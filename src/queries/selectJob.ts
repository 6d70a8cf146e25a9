import type { PreparedQueryable } from '../db/queryable.js';
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
