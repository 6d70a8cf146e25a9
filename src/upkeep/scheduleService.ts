import type { Database } from '../db/connection.js';
import { type FireResult, fireDueSchedules } from '../schedules/fire.js';
import type { ServiceContext, UpkeepService } from './service.js';

/** Enqueues due schedule ticks, a little ahead (twice its period, 1 s at least) so that their jobs start on time. */
export class ScheduleService implements UpkeepService<FireResult> {
  readonly name = 'schedules';

  constructor(
    private readonly ctx: ServiceContext,
    readonly everyMs: number,
  ) {}

  async runOnce(db: Database): Promise<FireResult | null> {
    const done = await fireDueSchedules(db.pool, this.ctx.schema, Math.max(1000, 2 * this.everyMs));
    for (const { name, error } of done?.errors ?? []) {
      this.ctx.log.warn({ err: error, schedule: name }, 'schedule skipped: its expression cannot be read');
    }
    if (done?.jobs) this.ctx.log.debug(done, 'schedule ticks enqueued');
    return done;
  }
}
