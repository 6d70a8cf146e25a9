import type { Queryable } from '../db/queryable.js';
import { ident } from '../db/schema.js';
import type { WorkerRegistration } from './workers.js';

/** A registered worker: what it registered, when, whether it is alive, and the jobs it holds. */
export interface WorkerRow extends Omit<WorkerRegistration, 'id'> {
  id: number;
  started_at: Date;
  heartbeat_at: Date;
  /** Its session lock is held: the process and its connection are up. */
  alive: boolean;
  /** Jobs it has claimed and not finished (running or in its local buffer). */
  jobs: number;
}

/**
 * Every registered worker. A dead one stays listed until the next upkeep forgets it
 * (within a second or so while any worker runs).
 */
export async function listWorkers(db: Queryable, schema: string): Promise<WorkerRow[]> {
  const s = ident(schema);
  const { rows } = await db.query<WorkerRow>(
    `SELECT w.id, w.name, w.host, w.pid, w.queues, w.concurrency, w.version, w.started_at, w.heartbeat_at,
            w.id = ANY (l.ids) AS alive, coalesce(j.n, 0) AS jobs
     FROM ${s}.workers w
     CROSS JOIN (SELECT ${s}.live_worker_ids() AS ids) l
     LEFT JOIN (SELECT locked_by, count(*)::integer AS n FROM ${s}.jobs
                WHERE state = 'running' AND locked_by IS NOT NULL GROUP BY locked_by) j ON j.locked_by = w.id
     ORDER BY w.id`,
  );
  return rows;
}
