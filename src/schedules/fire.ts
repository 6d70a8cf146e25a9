import type pg from 'pg';
import { fireSchedule, lockSchedules, selectDueSchedules } from '../queries/schedules.js';
import { cronOf, planTicks } from './cron.js';

/** What one pass over the schedules did. */
export interface FireResult {
  schedules: number;
  jobs: number;
  /** Schedules whose expression could not be read (they are left as they are). */
  errors: Array<{ name: string; error: unknown }>;
}

/**
 * Enqueues the due ticks of every schedule (up to `lookaheadMs` ahead), if no other
 * process is doing it now (null then). Exactly once per tick, whatever the number of
 * processes: one at a time holds the lock, and the database refuses a second job for a
 * (schedule, tick) and a tick moved on by someone else (see fire_schedule in sql/).
 */
export async function fireDueSchedules(pool: pg.Pool, schema: string, lookaheadMs: number): Promise<FireResult | null> {
  const client = await pool.connect();
  // a connection lost between two statements must fail this pass, not crash the process
  let broken: Error | undefined;
  const lost = (error: Error) => {
    broken = error;
  };
  client.on('error', lost);
  try {
    await client.query('BEGIN');
    if (!(await lockSchedules(client, schema))) {
      await client.query('COMMIT');
      return null;
    }
    const due = await selectDueSchedules(client, schema, lookaheadMs);
    const result: FireResult = { schedules: due.length, jobs: 0, errors: [] };
    for (const s of due) {
      let plan: ReturnType<typeof planTicks>;
      try {
        plan = planTicks(cronOf(s.cron, s.tz), s.next_run_at, s.now, lookaheadMs, s.backfill);
      } catch (error) {
        result.errors.push({ name: s.name, error });
        continue;
      }
      result.jobs += await fireSchedule(client, schema, s.name, s.next_run_at, plan.ticks, plan.next);
    }
    await client.query('COMMIT');
    return result;
  } catch (error) {
    broken ??= error as Error;
    await client.query('ROLLBACK').catch(() => {});
    throw error;
  } finally {
    client.off('error', lost);
    client.release(broken); // a failed connection is closed, not reused
  }
}
