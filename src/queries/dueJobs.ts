import type { Queryable } from '../db/queryable.js';
import { ident } from '../db/schema.js';

/** Makes due scheduled jobs and retries available; returns how many. */
export async function promoteDueJobs(db: Queryable, schema: string): Promise<number> {
  const { rows } = await db.query<{ n: number }>(`SELECT ${ident(schema)}.promote_due_jobs() AS n`);
  return rows[0]?.n ?? 0;
}

/**
 * In how many milliseconds (by the database's clock) a worker should look again although
 * nothing was announced: the next scheduled job or retry, or the next rate window of a
 * tenant that used up its own. Null if none. A delay, not a time: the worker's clock may
 * differ from the database's.
 */
export async function nextDueInMs(db: Queryable, schema: string): Promise<number | null> {
  const { rows } = await db.query<{ ms: string | null }>(`SELECT ${ident(schema)}.next_due_in_ms() AS ms`);
  const ms = rows[0]?.ms;
  return ms === null || ms === undefined ? null : Number(ms);
}
