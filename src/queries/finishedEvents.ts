import type { Queryable } from '../db/queryable.js';
import { ident } from '../db/schema.js';

export interface FinishedJob {
  id: string;
  tenant: string;
  queue: string;
  task: string;
  state: string;
  finishedAt: Date;
}

/** These finished jobs, as an event stream shows them (each stream keeps its tenant's). */
export async function selectFinished(db: Queryable, schema: string, ids: string[]): Promise<FinishedJob[]> {
  const { rows } = await db.query<{
    id: string;
    tenant: string;
    queue: string;
    task: string;
    state: string;
    finished_at: Date;
  }>(
    `SELECT id::text, tenant, queue, task, state::text, finished_at FROM ${ident(schema)}.job_history
     WHERE id = ANY ($1::bigint[]) ORDER BY finished_at, id`,
    [ids],
  );
  return rows.map((r) => ({
    id: r.id,
    tenant: r.tenant,
    queue: r.queue,
    task: r.task,
    state: r.state,
    finishedAt: r.finished_at,
  }));
}
