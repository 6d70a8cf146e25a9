import type { Queryable } from '../db/queryable.js';
import { ident } from '../db/schema.js';

/** Writes the progress (JSON texts) of running jobs held by these leases; returns how many were set. */
export async function setProgress(
  db: Queryable,
  schema: string,
  jobs: Array<{ id: string; token: string; progress: string }>,
): Promise<number> {
  const { rows } = await db.query<{ n: number }>(
    `SELECT ${ident(schema)}.set_progress($1::bigint[], $2::bigint[], $3::jsonb[]) AS n`,
    [jobs.map((j) => j.id), jobs.map((j) => j.token), jobs.map((j) => j.progress)],
  );
  return rows[0]?.n ?? 0;
}
