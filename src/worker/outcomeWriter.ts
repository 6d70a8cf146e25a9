import type pg from 'pg';
import type { Logger } from '../log.js';
import { type FinalState, finishJobs } from '../queries/finishJobs.js';
import type { OutcomeEntry } from '../queries/outcomes.js';
import { requeueJobs } from '../queries/requeueJobs.js';
import { Batcher } from './batcher.js';
import { wakeableDelay } from './delay.js';

/** The states a worker finishes jobs in ('expired' is the upkeep's). */
export type WorkerFinalState = Exclude<FinalState, 'expired'>;

export interface OutcomeWriterOptions {
  schema: string;
  log: Logger;
  /** Most outcomes in one statement. */
  batchSize: number;
  asyncCommit: boolean;
  /** A failed write is retried for this long: the leases it protects run out by then. */
  leaseMs: number;
}

/**
 * Writes the outcomes of a worker's attempts in batches, one batch per final state and
 * one of requeues (each a single statement), retrying a failed write while the leases it
 * protects last. `written` runs after each write, once `unwritten` no longer counts it:
 * the claim loops may have held back for outcomes not yet written.
 */
export class OutcomeWriter {
  readonly #pool: pg.Pool;
  readonly #o: OutcomeWriterOptions;
  readonly #finishers: Record<WorkerFinalState, Batcher<OutcomeEntry>>;
  readonly #requeuer: Batcher<OutcomeEntry>;
  /** Writes waiting to retry: the connection's return cuts their wait short. */
  readonly #retryWaiters = new Set<() => void>();

  constructor(pool: pg.Pool, options: OutcomeWriterOptions, written: () => void) {
    this.#pool = pool;
    this.#o = options;
    const finisher = (state: WorkerFinalState) =>
      new Batcher<OutcomeEntry>((entries) => this.#writeFinished(state, entries), options.batchSize, written);
    this.#finishers = { succeeded: finisher('succeeded'), dead: finisher('dead'), cancelled: finisher('cancelled') };
    this.#requeuer = new Batcher<OutcomeEntry>((entries) => this.#writeRequeued(entries), options.batchSize, written);
  }

  /** Moves the job to history in `state`. */
  finish(state: WorkerFinalState, entry: OutcomeEntry): void {
    this.#finishers[state].add(entry);
  }

  /** Returns the job to the queue (a retry, or a job given back). */
  requeue(entry: OutcomeEntry): void {
    this.#requeuer.add(entry);
  }

  /** Outcomes not written yet (waiting or in flight). */
  get unwritten(): number {
    return this.#requeuer.size + Object.values(this.#finishers).reduce((n, b) => n + b.size, 0);
  }

  /** Resolves once every outcome given so far is written (or given up on). */
  drain(): Promise<unknown> {
    return Promise.all([...Object.values(this.#finishers), this.#requeuer].map((b) => b.drain()));
  }

  /** The listening connection is back: writes waiting to retry go now. */
  retryNow(): void {
    for (const wake of [...this.#retryWaiters]) wake();
  }

  async #writeFinished(state: WorkerFinalState, entries: OutcomeEntry[]): Promise<void> {
    const done = await this.#retrying(`finishing jobs as ${state}`, () =>
      finishJobs(this.#pool, this.#o.schema, state, entries, this.#o.asyncCommit),
    );
    this.#reportFenced(entries.length, done ?? 0, state);
  }

  async #writeRequeued(entries: OutcomeEntry[]): Promise<void> {
    const done = await this.#retrying('requeueing jobs', () =>
      requeueJobs(this.#pool, this.#o.schema, entries, this.#o.asyncCommit),
    );
    this.#reportFenced(entries.length, done ?? 0, 'requeued');
  }

  #reportFenced(sent: number, written: number, what: string): void {
    if (written < sent) {
      this.#o.log.warn(
        { jobs: sent - written, outcome: what },
        'outcomes dropped: those jobs were no longer held by this worker (lease lost and re-claimed, or cancelled)',
      );
    }
  }

  /** Runs a write until it succeeds or the leases it protects have run out. */
  async #retrying<T>(what: string, write: () => Promise<T>): Promise<T | null> {
    const deadline = Date.now() + this.#o.leaseMs;
    for (let attempt = 1; ; attempt++) {
      try {
        return await write();
      } catch (error) {
        if (Date.now() > deadline) {
          this.#o.log.error({ err: error }, `${what} failed for good; crash recovery will re-run those jobs`);
          return null;
        }
        if (attempt === 1) this.#o.log.warn({ err: error }, `${what} failed; retrying`);
        // the listening connection's return cuts the wait short (retryNow)
        await wakeableDelay(Math.min(2000, 25 * 2 ** attempt), this.#retryWaiters);
      }
    }
  }
}
