import { JobTimeoutError } from '../errors.js';
import type { ActiveJob } from './activeJob.js';

/**
 * Aborts running attempts past their time limit, with one timer for all of them: a timer
 * per job would allocate one per job, which is measurable at tens of thousands of jobs a
 * second.
 */
export class TimeLimits {
  readonly #running: () => Iterable<ActiveJob>;
  #sweeper: NodeJS.Timeout | null = null;
  #sweepEvery = Number.POSITIVE_INFINITY;

  constructor(running: () => Iterable<ActiveJob>) {
    this.#running = running;
  }

  /**
   * Starts (or tightens) the sweep for a limit of `timeoutMs`: every quarter of the
   * shortest limit seen, between 25 ms and 1 s.
   */
  watch(timeoutMs: number): void {
    const every = Math.min(1000, Math.max(25, Math.floor(timeoutMs / 4)));
    if (this.#sweepEvery <= every) return;
    if (this.#sweeper) clearInterval(this.#sweeper);
    this.#sweepEvery = every;
    this.#sweeper = setInterval(() => {
      const now = performance.now();
      for (const job of this.#running()) {
        if (job.deadline <= now && !job.aborted)
          job.abort(new JobTimeoutError(Math.round(job.deadline - job.startedAt)));
      }
    }, every);
    this.#sweeper.unref();
  }

  stop(): void {
    if (this.#sweeper) clearInterval(this.#sweeper);
  }
}
