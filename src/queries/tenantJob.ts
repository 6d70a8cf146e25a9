import type { PreparedQueryable, Queryable } from '../db/queryable.js';
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

/**
 * Of `ids`, those of jobs of `tenant` (unfinished or finished): what a tenant's token may
 * name as dependencies. Another tenant's job is left out as a missing one is. The history
 * (every day partition) is searched only for the ids that are no unfinished job.
 */
export async function selectTenantJobIds(
  db: Queryable,
  schema: string,
  ids: readonly string[],
  tenant: string,
): Promise<Set<string>> {
  const s = ident(schema);
  const { rows } = await db.query<{ id: string }>(
    `WITH asked AS (SELECT DISTINCT unnest($1::bigint[]) AS id),
     live AS MATERIALIZED (SELECT j.id, j.tenant FROM asked a JOIN ${s}.jobs j ON j.id = a.id)
     SELECT l.id::text AS id FROM live l WHERE l.tenant = $2
     UNION
     SELECT h.id::text FROM asked a JOIN ${s}.job_history h ON h.id = a.id
     WHERE h.tenant = $2 AND NOT EXISTS (SELECT 1 FROM live l WHERE l.id = a.id)`,
    [ids, tenant],
  );
  return new Set(rows.map((r) => r.id));
}
