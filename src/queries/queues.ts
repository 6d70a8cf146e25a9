import type { Queryable } from '../db/queryable.js';
import { ident } from '../db/schema.js';

/** Pauses or resumes a queue; true if that changed anything. */
export async function pauseQueue(db: Queryable, schema: string, queue: string, paused: boolean): Promise<boolean> {
  const { rows } = await db.query<{ changed: boolean }>(`SELECT ${ident(schema)}.pause_queue($1, $2) AS changed`, [
    queue,
    paused,
  ]);
  return rows[0]?.changed ?? false;
}

/** The paused queues, with when each was paused. */
export async function pausedQueues(db: Queryable, schema: string): Promise<Array<{ queue: string; pausedAt: Date }>> {
  const { rows } = await db.query<{ queue: string; paused_at: Date }>(
    `SELECT queue, paused_at FROM ${ident(schema)}.paused_queues ORDER BY queue`,
  );
  return rows.map((r) => ({ queue: r.queue, pausedAt: r.paused_at }));
}
