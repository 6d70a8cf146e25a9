import type { Database } from '../db/connection.js';
import { maintain, type UpkeepResult } from '../queries/upkeep.js';
import type { ServiceContext, UpkeepService } from './service.js';

/** After a server restart, workers get this long to reconnect before their jobs are reaped. */
const RESTART_GRACE_MS = 10_000;

/**
 * Crash recovery (expired leases, dead workers), promotion of due jobs, expiry, history
 * partitions ahead: one call of `maintain` in SQL, each step isolated there.
 */
export class QueueService implements UpkeepService<UpkeepResult> {
  readonly name = 'queue';

  constructor(
    private readonly ctx: ServiceContext,
    readonly everyMs: number,
  ) {}

  async runOnce(db: Database): Promise<UpkeepResult | null> {
    const done = await maintain(db.pool, this.ctx.schema, RESTART_GRACE_MS);
    for (const failed of done?.errors ?? []) {
      this.ctx.log.error(failed, `upkeep step ${failed.step} failed (the other steps ran): ${failed.message}`);
    }
    if (done && (done.released || done.dead || done.expired)) this.ctx.log.debug(done, 'upkeep');
    return done;
  }
}
