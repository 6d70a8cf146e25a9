import type { PreparedQueryable } from '../db/queryable.js';
import { ident } from '../db/schema.js';
import { FINISHED_COLUMNS, type JobRow, UNFINISHED_COLUMNS } from './jobColumns.js';

/**
 * One job by id if it belongs to `tenant`, else null, whether it exists or not. The
 * tenant is a condition of the scan, not a check of the row read: another tenant's job
 * costs what a missing id does, so the time of a 404 does not tell them apart.
 */
export async function selectTenantJob(
  db: PreparedQueryable,
  schema: string,
  id: string,
  tenant: string,
): Promise<JobRow | null> {
  const s = ident(schema);
  const { rows } = await db.query<JobRow>({
    name: `tusk_get_tenant_job_${schema}`,
    text: `(SELECT ${UNFINISHED_COLUMNS} FROM ${s}.jobs WHERE id = $1 AND tenant = $2)
           UNION ALL
           (SELECT ${FINISHED_COLUMNS} FROM ${s}.job_history WHERE id = $1 AND tenant = $2)
           LIMIT 1`,
    values: [id, tenant],
  });
  return rows[0] ?? null;
}
