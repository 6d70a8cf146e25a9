import { z } from 'zod';
import { integer, jobOptionShape, nameSchema } from '../validation/validate.js';

/** Options of `tusk.schedule()`: the jobs it enqueues, and how its ticks are read. */
export interface ScheduleOptions {
  /** Task of its jobs; default the schedule's name. */
  task?: string;
  payload?: unknown;
  /** Default the task definition's tenant, else `'default'`. */
  tenant?: string;
  /** Default the task definition's queue, else `'default'`. */
  queue?: string;
  priority?: number;
  maxAttempts?: number;
  concurrencyKey?: string;
  retry?: { maxAttempts?: number; backoff?: 'exponential' | number; queue?: string };
  /** IANA time zone the expression is read in; default `'UTC'`. */
  tz?: string;
  /**
   * Missed ticks to run after downtime: ticks more than a minute old when a worker next
   * looks (none was running) are skipped, but for the `backfill` latest, which run at
   * once. Default 0.
   */
  backfill?: number;
}

export const scheduleOptionsSchema = z.strictObject({
  task: nameSchema(200).optional(),
  payload: z.unknown().optional(),
  tenant: jobOptionShape.tenant,
  queue: jobOptionShape.queue,
  priority: jobOptionShape.priority,
  maxAttempts: jobOptionShape.maxAttempts,
  concurrencyKey: jobOptionShape.concurrencyKey,
  retry: jobOptionShape.retry,
  tz: z.string().min(1).max(100).optional(),
  backfill: integer(0, 1000).optional(),
});
