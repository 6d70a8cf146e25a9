import { Cron } from 'croner';

/** Ticks older than this when their schedule is looked at were missed (Tusk was down). */
export const MISSED_AFTER_MS = 60_000;

/** A cron expression (5 fields, or 6 with seconds first) read in time zone `tz`; throws if invalid. */
export function cronOf(expression: string, tz: string): Cron {
  const cron = new Cron(expression, { timezone: tz, paused: true, mode: '5-or-6-parts' });
  cron.nextRun(); // an unknown time zone shows only when a date is computed
  return cron;
}

/** The first tick at or after `from`, or null if the expression has none left. */
export function firstTickFrom(cron: Cron, from: Date): Date | null {
  // nextRun gives the first tick strictly after its (whole second) argument
  return cron.nextRun(new Date(from.getTime() - 1));
}

/** The ticks a schedule enqueues now, and its next tick after them. */
export interface TickPlan {
  ticks: Date[];
  next: Date | null;
}

/**
 * Ticks to enqueue for a schedule whose first tick not enqueued yet is `nextRunAt`, at
 * database time `now`: every tick up to `now + lookaheadMs` (enqueued ahead with their
 * time as run_at, so they start on time), except missed ones — ticks more than
 * MISSED_AFTER_MS old, when no worker was running — of which only the `backfill` latest
 * are enqueued (to run at once).
 */
export function planTicks(cron: Cron, nextRunAt: Date, now: Date, lookaheadMs: number, backfill: number): TickPlan {
  const horizon = now.getTime() + lookaheadMs;
  const missedBefore = new Date(now.getTime() - MISSED_AFTER_MS);
  const ticks: Date[] = [];
  let from = nextRunAt;
  if (nextRunAt < missedBefore) {
    if (backfill > 0) {
      const missed = cron.previousRuns(backfill, missedBefore).filter((t) => t >= nextRunAt);
      ticks.push(...missed.reverse());
    }
    from = missedBefore;
  }
  let tick = firstTickFrom(cron, from);
  // a bounded walk: a per-second expression with a large lookahead stays small
  while (tick && tick.getTime() <= horizon && ticks.length < 10_000) {
    ticks.push(tick);
    tick = cron.nextRun(tick);
  }
  return { ticks, next: tick };
}
