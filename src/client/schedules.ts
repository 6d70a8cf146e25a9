import type { Queryable } from '../db/queryable.js';
import { TuskError, TuskValidationError } from '../errors.js';
import {
  deleteSchedule,
  pauseSchedule,
  putSchedules,
  type ScheduleInput,
  type ScheduleRow,
  selectCrontabNames,
  selectNow,
  selectSchedules,
} from '../queries/schedules.js';
import { cronOf, firstTickFrom } from '../schedules/cron.js';
import type { CrontabEntry } from '../schedules/crontab.js';
import { type ScheduleOptions, scheduleOptionsSchema } from '../schedules/options.js';
import type { TaskDefinition } from '../tasks/definition.js';
import { nameSchema, parse } from '../validation/validate.js';
import { jobRecord } from './entries.js';

/** A schedule as stored: its row, named in camelCase (no concurrency key: null). */
export interface ScheduleInfo
  extends Pick<
    ScheduleRow,
    'name' | 'cron' | 'tz' | 'task' | 'payload' | 'tenant' | 'queue' | 'priority' | 'backfill' | 'source'
  > {
  maxAttempts: number;
  concurrencyKey: string | null;
  /** The next tick not enqueued yet (ticks are enqueued a little ahead); null if none is left. */
  nextRunAt: Date | null;
  /** The last tick enqueued, and its job. */
  lastRunAt: Date | null;
  lastJobId: string | null;
  /** When it was paused; null while it runs. */
  pausedAt: Date | null;
}

/** What the schedules need from their Tusk instance. */
export interface SchedulesHost {
  db(): Promise<Queryable>;
  schema: string;
  tasks: Map<string, TaskDefinition>;
  maxPayloadBytes: number;
}

/**
 * Recurring jobs: a cron expression (croner: 5 fields, or 6 with seconds first) and the
 * job each tick enqueues. Workers enqueue the ticks, exactly one job per tick whatever
 * their number.
 *
 * @example
 * await tusk.schedules.set('nightly-report', '0 3 * * *', { task: 'report', tenant: 'acme', tz: 'Europe/Paris' });
 * await tusk.schedules.list();
 * await tusk.schedules.remove('nightly-report');
 */
export class Schedules {
  readonly #host: SchedulesHost;

  constructor(host: SchedulesHost) {
    this.#host = host;
  }

  /**
   * Creates or replaces a schedule. Re-setting an unchanged expression and time zone
   * keeps its next tick (safe at every start-up); a new one starts at the next tick. An
   * edit redoes the ticks enqueued and not started, in the same transaction: they are
   * cancelled, those whose time has come are enqueued again under the new definition,
   * and with the same expression the later ones too.
   */
  async set(name: string, cron: string, options: ScheduleOptions = {}): Promise<ScheduleInfo> {
    const input = this.#input(name, cron, options, 'api', '');
    const db = await this.#host.db();
    await putSchedules(db, this.#host.schema, startingFrom([input], await selectNow(db)));
    const info = await this.get(input.name);
    // written just now: only a concurrent remove takes it away
    if (!info) throw new TuskError(`schedule ${JSON.stringify(input.name)} was removed right after being set`);
    return info;
  }

  /** A schedule; null if there is none of that name. */
  async get(name: string): Promise<ScheduleInfo | null> {
    const key = parse(nameSchema(200), name, 'name');
    const [row] = await selectSchedules(await this.#host.db(), this.#host.schema, key);
    if (!row) return null;
    return toScheduleInfo(row);
  }

  /** Every schedule, by name. */
  async list(): Promise<ScheduleInfo[]> {
    return (await selectSchedules(await this.#host.db(), this.#host.schema, null)).map(toScheduleInfo);
  }

  /** Removes a schedule (its ticks enqueued and not started, due ones too, are cancelled). False if unknown. */
  async remove(name: string): Promise<boolean> {
    return deleteSchedule(await this.#host.db(), this.#host.schema, parse(nameSchema(200), name, 'name'));
  }

  /**
   * Pauses a schedule: it enqueues no tick, and the ticks it enqueued and not started (due
   * ones too) are cancelled (running jobs go on). Null if there is no such schedule.
   *
   * @example
   * await tusk.schedules.pause('nightly-report');
   */
  async pause(name: string): Promise<ScheduleInfo | null> {
    const key = parse(nameSchema(200), name, 'name');
    if ((await pauseSchedule(await this.#host.db(), this.#host.schema, key, true, null)) === null) return null;
    return this.get(key);
  }

  /**
   * Resumes a paused schedule at its next tick from now (the ticks of the pause are skipped).
   * Null if there is no such schedule.
   */
  async resume(name: string): Promise<ScheduleInfo | null> {
    const key = parse(nameSchema(200), name, 'name');
    const db = await this.#host.db();
    const [row] = await selectSchedules(db, this.#host.schema, key);
    if (!row) return null;
    // the database's clock, as for a new schedule (see startingFrom)
    const next = firstTickFrom(cronOf(row.cron, row.tz), await selectNow(db));
    if ((await pauseSchedule(db, this.#host.schema, key, false, next)) === null) return null;
    return this.get(key);
  }

  /**
   * Makes the schedules from a crontab file the ones in force: sets every entry, and
   * removes the schedules an earlier file defined that this one does not. Schedules set
   * through the API are left alone. Returns the names set and removed.
   */
  async syncCrontab(entries: CrontabEntry[]): Promise<{ set: string[]; removed: string[] }> {
    const inputs = entries.map((e) => this.#input(e.name, e.cron, e.options, 'crontab', `schedule ${e.name}: `));
    const db = await this.#host.db();
    await putSchedules(db, this.#host.schema, startingFrom(inputs, await selectNow(db)));
    const keep = new Set(inputs.map((i) => i.name));
    const removed: string[] = [];
    for (const name of await selectCrontabNames(db, this.#host.schema)) {
      if (!keep.has(name) && (await deleteSchedule(db, this.#host.schema, name))) removed.push(name);
    }
    return { set: [...keep], removed };
  }

  /**
   * Checks a crontab's entries as `syncCrontab` would take them (cron expressions, time
   * zones, options, payloads against their tasks' schemas), writing nothing: a mistake
   * throws, naming the schedule. `tusk worker --crontab` does so before the worker starts.
   *
   * @example
   * tusk.schedules.checkCrontab(parseCrontab(text, 'tusk.crontab'));
   */
  checkCrontab(entries: CrontabEntry[]): void {
    for (const e of entries) this.#input(e.name, e.cron, e.options, 'crontab', `schedule ${e.name}: `);
  }

  /**
   * A schedule to write, validated, but for its first tick (see startingFrom); error fields
   * start with `prefix` (which schedule of a file).
   */
  #input(
    name: string,
    cron: string,
    options: ScheduleOptions,
    source: 'api' | 'crontab',
    prefix: string,
  ): Omit<ScheduleInput, 'next_run_at'> {
    const key = parse(nameSchema(200), name, `${prefix}name`);
    const field = `${prefix}options`;
    const o = parse(scheduleOptionsSchema, options, field) as ScheduleOptions;
    const tz = o.tz ?? 'UTC';
    if (typeof cron !== 'string') throw new TuskValidationError(`${prefix}cron`, 'must be a cron expression string');
    try {
      cronOf(cron, tz);
    } catch (error) {
      // croner names the time zone in its message when that is what it could not read
      const badZone = /timezone/i.test((error as Error).message);
      throw new TuskValidationError(badZone ? `${field}.tz` : `${prefix}cron`, (error as Error).message);
    }
    const task = o.task ?? key;
    const record = jobRecord(
      task,
      o.payload ?? null,
      o,
      `${field}.payload`,
      this.#host.maxPayloadBytes,
      this.#host.tasks.get(task),
    );
    return {
      name: key,
      cron: cron.trim(),
      tz,
      task,
      payload: JSON.parse(record.payload),
      tenant: record.tenant ?? 'default',
      queue: record.queue ?? 'default',
      priority: record.priority ?? 0,
      max_attempts: record.maxAttempts ?? 5,
      concurrency_key: record.concurrencyKey ?? '',
      retry: record.retry === undefined ? null : JSON.parse(record.retry),
      backfill: o.backfill ?? 0,
      source,
    };
  }
}

/**
 * The schedules with their first tick at or after `now`, the database's time: the upkeep
 * fires ticks by that clock, and a first tick taken from a process clock minutes behind
 * it would be more than a minute old at once (fired late, or counted missed and
 * backfilled: ticks from before the schedule existed).
 */
function startingFrom(inputs: Omit<ScheduleInput, 'next_run_at'>[], now: Date): ScheduleInput[] {
  return inputs.map((i) => ({ ...i, next_run_at: firstTickFrom(cronOf(i.cron, i.tz), now) }));
}

function toScheduleInfo(row: ScheduleRow): ScheduleInfo {
  const { max_attempts, concurrency_key, retry: _, next_run_at, last_run_at, last_job_id, paused_at, ...same } = row;
  return {
    ...same,
    maxAttempts: max_attempts,
    concurrencyKey: concurrency_key === '' ? null : concurrency_key,
    nextRunAt: next_run_at,
    lastRunAt: last_run_at,
    lastJobId: last_job_id,
    pausedAt: paused_at,
  };
}
