import type { Queryable } from '../db/queryable.js';
import { ident } from '../db/schema.js';

/** Runs finished (dead, cancelled, expired) or failed jobs again; returns the ids re-queued. */
export async function retryJobs(db: Queryable, schema: string, ids: string[]): Promise<string[]> {
  const { rows } = await db.query<{ id: string }>(`SELECT id FROM ${ident(schema)}.retry_jobs($1::bigint[])`, [ids]);
  return rows.map((r) => r.id);
}

/** Ids of the jobs in `state` matching the filter (finished ones from history). */
export async function selectRetryable(
  db: Queryable,
  schema: string,
  filter: { state: string; task: string | null; tenant: string | null; queue: string | null },
): Promise<string[]> {
  const s = ident(schema);
  const table = filter.state === 'failed' ? `${s}.jobs` : `${s}.job_history`;
  const { rows } = await db.query<{ id: string }>(
    `SELECT id FROM ${table}
     WHERE state = $1::text::${s}.job_state AND ($2::text IS NULL OR task = $2)
       AND ($3::text IS NULL OR tenant = $3) AND ($4::text IS NULL OR queue = $4)`,
    [filter.state, filter.task, filter.tenant, filter.queue],
  );
  return rows.map((r) => r.id);
}
