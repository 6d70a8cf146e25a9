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
 * name as dependencies. Another tenant's job is left out as a missing one is.
 */
export async function selectTenantJobIds(
  db: Queryable,
  schema: string,
  ids: readonly string[],
  tenant: string,
): Promise<Set<string>> {
  const s = ident(schema);
  const { rows } = await db.query<{ id: string }>(
    `SELECT id::text AS id FROM ${s}.jobs WHERE id = ANY ($1::bigint[]) AND tenant = $2
     UNION
     SELECT id::text FROM ${s}.job_history WHERE id = ANY ($1::bigint[]) AND tenant = $2`,
    [ids, tenant],
  );
  return new Set(rows.map((r) => r.id));
}
