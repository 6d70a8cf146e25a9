import type { Queryable } from '../db/queryable.js';
import { ident } from '../db/schema.js';

/** Makes due scheduled jobs and retries available; returns how many. */
export async function promoteDueJobs(db: Queryable, schema: string): Promise<number> {
  const { rows } = await db.query<{ n: number }>(`SELECT ${ident(schema)}.promote_due_jobs() AS n`);
  return rows[0]?.n ?? 0;
}

/**
 * When a worker should look again although nothing was announced: the next scheduled job
 * or retry, or the next rate window of a tenant that used up its own. Null if none.
 */
export async function nextDueAt(db: Queryable, schema: string): Promise<Date | null> {
  const { rows } = await db.query<{ at: Date | null }>(`SELECT ${ident(schema)}.next_due_at() AS at`);
  return rows[0]?.at ?? null;
}
