import type { Queryable } from '../db/queryable.js';
import { ident } from '../db/schema.js';

/** A row of the schedules table. */
export interface ScheduleRow {
  name: string;
  cron: string;
  tz: string;
  task: string;
  payload: unknown;
  tenant: string;
  queue: string;
  priority: number;
  max_attempts: number;
  concurrency_key: string;
  retry: unknown;
  backfill: number;
  /** `'api'`, or `'crontab'` for schedules kept in sync with a crontab file. */
  source: 'api' | 'crontab';
  next_run_at: Date | null;
  last_run_at: Date | null;
  last_job_id: string | null;
  /** When it was paused (null: running). */
  paused_at: Date | null;
}

/** A schedule to write: every column but the run times kept by the database. */
export type ScheduleInput = Omit<ScheduleRow, 'last_run_at' | 'last_job_id' | 'paused_at'>;

/** Creates or replaces schedules, in one transaction (see put_schedule in sql/). */
export async function putSchedules(db: Queryable, schema: string, schedules: ScheduleInput[]): Promise<void> {
  await db.query(`SELECT ${ident(schema)}.put_schedule(s) FROM jsonb_array_elements($1::jsonb) s`, [
    JSON.stringify(schedules),
  ]);
}

/**
 * The database's time: the upkeep fires ticks by this clock, so schedules start from it.
 * The clock's reading, not now(): a transaction open a while would give its start.
 */
export async function selectNow(db: Queryable): Promise<Date> {
  const { rows } = await db.query<{ now: Date }>('SELECT clock_timestamp() AS now');
  const [row] = rows;
  if (!row) throw new Error('SELECT clock_timestamp() returned no row');
  return row.now;
}

/** Removes a schedule and cancels its ticks enqueued and not started; false if there was none. */
export async function deleteSchedule(db: Queryable, schema: string, name: string): Promise<boolean> {
  const { rows } = await db.query<{ found: boolean }>(`SELECT ${ident(schema)}.remove_schedule($1) AS found`, [name]);
  return rows[0]?.found ?? false;
}

/**
 * Pauses or resumes a schedule (resumed, its next tick is `next`): null if there is no such
 * schedule, else whether that changed anything (see pause_schedule in sql/).
 */
export async function pauseSchedule(
  db: Queryable,
  schema: string,
  name: string,
  paused: boolean,
  next: Date | null,
): Promise<boolean | null> {
  const { rows } = await db.query<{ changed: boolean | null }>(
    `SELECT ${ident(schema)}.pause_schedule($1, $2, $3) AS changed`,
    [name, paused, next],
  );
  return rows[0]?.changed ?? null;
}

/** Schedules by name; one if `name` is given. */
export async function selectSchedules(db: Queryable, schema: string, name: string | null): Promise<ScheduleRow[]> {
  const { rows } = await db.query<ScheduleRow>(
    `SELECT name, cron, tz, task, payload, tenant, queue, priority, max_attempts, concurrency_key, retry,
            backfill, source, next_run_at, last_run_at, last_job_id, paused_at
     FROM ${ident(schema)}.schedules WHERE $1::text IS NULL OR name = $1 ORDER BY name`,
    [name],
  );
  return rows;
}

/** Names of the schedules that came from a crontab file. */
export async function selectCrontabNames(db: Queryable, schema: string): Promise<string[]> {
  const { rows } = await db.query<{ name: string }>(
    `SELECT name FROM ${ident(schema)}.schedules WHERE source = 'crontab'`,
  );
  return rows.map((r) => r.name);
}

/** A schedule whose next tick is within the horizon, and the database's time. */
export interface DueSchedule {
  name: string;
  cron: string;
  tz: string;
  backfill: number;
  next_run_at: Date;
  now: Date;
}

/**
 * In the caller's transaction: takes the schedules lock (false if another process holds
 * it), so that one process at a time enqueues ticks.
 */
export async function lockSchedules(db: Queryable, schema: string): Promise<boolean> {
  // a key space of its own: (hashtext(schema), n) are the workers' locks
  const { rows } = await db.query<{ ok: boolean }>(
    `SELECT pg_try_advisory_xact_lock(hashtext($1 || ':schedules'), 0) AS ok`,
    [schema],
  );
  return rows[0]?.ok ?? false;
}

/** Schedules with a tick due by `horizonMs` from now, locked for the caller's transaction. */
export async function selectDueSchedules(db: Queryable, schema: string, horizonMs: number): Promise<DueSchedule[]> {
  const { rows } = await db.query<DueSchedule>(
    `SELECT name, cron, tz, backfill, next_run_at, now() AS now FROM ${ident(schema)}.schedules
     WHERE next_run_at <= now() + $1 * interval '1 millisecond' AND paused_at IS NULL
     ORDER BY next_run_at FOR UPDATE SKIP LOCKED`,
    [horizonMs],
  );
  return rows;
}

/** Enqueues a schedule's ticks and moves its next tick on (see fire_schedule in sql/). */
export async function fireSchedule(
  db: Queryable,
  schema: string,
  name: string,
  expected: Date,
  ticks: Date[],
  next: Date | null,
): Promise<number> {
  const { rows } = await db.query<{ n: number }>(
    `SELECT ${ident(schema)}.fire_schedule($1, $2, $3::timestamptz[], $4) AS n`,
    [name, expected, ticks, next],
  );
  return rows[0]?.n ?? 0;
}
