import type { Database } from '../db/connection.js';
import { maintainHistory, summarizeHistoryIndex } from '../queries/history.js';
import type { ServiceContext, UpkeepService } from './service.js';

/** Rows deleted per retention transaction, and batches per pass before yielding. */
const HISTORY_BATCH = 10_000;
const HISTORY_BATCHES = 100;

/**
 * History partitions ahead and retention, a batch per transaction, until done or for a
 * while, then the summary of the history's BRIN index; returns the finished jobs deleted
 * (partitions dropped are logged).
 */
export class HistoryService implements UpkeepService<number> {
  readonly name = 'history';

  constructor(
    private readonly ctx: ServiceContext,
    readonly everyMs: number,
    /** True once the upkeep is stopping: a long pass ends between batches. */
    private readonly stopping: () => boolean = () => false,
  ) {}

  async runOnce(db: Database): Promise<number | null> {
    let deleted: number | null = null;
    for (let i = 0; i < HISTORY_BATCHES && !this.stopping(); i++) {
      const done = await maintainHistory(db.pool, this.ctx.schema, HISTORY_BATCH);
      if (!done) return deleted; // another process is at it, and summarizes after
      deleted = (deleted ?? 0) + done.deleted;
      if (done.dropped.length > 0 || done.deleted > 0) this.ctx.log.info(done, 'history retention applied');
      if (!done.more) break;
    }
    // after the retention's transactions: a partition made or dropped locks job_history
    // until its transaction ends, and summarizing may take a while
    if (!this.stopping()) {
      try {
        await summarizeHistoryIndex(db.pool, this.ctx.schema);
      } catch (err) {
        this.ctx.log.warn({ err }, 'summarizing the history index failed; the next pass tries again');
      }
    }
    return deleted;
  }
}
