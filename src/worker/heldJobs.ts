import { JobCancelledError, LeaseLostError } from '../errors.js';
import type { ClaimedRow } from '../queries/claimJobs.js';
import { ID_DIGITS } from '../validation/validate.js';
import type { ActiveJob } from './activeJob.js';
import type { WorkerCounters } from './counters.js';
import { Fifo } from './fifo.js';

/** At most this many cancels of jobs not held are remembered (see HeldJobs.#heardUnheld). */
const HEARD_UNHELD_MAX = 10_000;

/**
 * The jobs whose lease a worker holds: those claimed ahead, not started yet (in claim
 * order), and those running. What ends an attempt early (a cancel, a lease lost, run
 * out or superseded by a newer claim) is decided here for both; a job ahead ends at once,
 * a running one through its AbortSignal, its handler's end settling it.
 */
export class HeldJobs {
  readonly #counters: WorkerCounters;
  /** Writes the outcome of a job ahead whose cancel was asked for. */
  readonly #cancelledAhead: (job: ActiveJob) => void;
  /** Claimed ahead, not started yet. */
  readonly #ahead = new Fifo<ActiveJob>();
  /** Running attempts by lease token: a stale attempt never stands for a newer one of its job. */
  readonly #running = new Map<string, ActiveJob>();
  /** A shutdown waiting for the running attempts to end. */
  #settledWaiters: Array<() => void> = [];
  /**
   * Cancels announced of jobs not held here: job id → performance.now() when heard, in
   * the order heard. A claim's answer may still be on its way with the job (the claim
   * committed, then the cancel, whose notification came first), and add() must hold it
   * back as cancelHeard would have. Bounded, the oldest dropped first: only those heard
   * since a claim still in flight was sent can match (add checks), older ones are dead weight.
   */
  readonly #heardUnheld = new Map<string, number>();

  constructor(counters: WorkerCounters, cancelledAhead: (job: ActiveJob) => void) {
    this.#counters = counters;
    this.#cancelledAhead = cancelledAhead;
  }

  /** Jobs whose handlers are running now. */
  get running(): number {
    return this.#running.size;
  }

  /** Jobs claimed ahead, not started yet. */
  get ahead(): number {
    return this.#ahead.length;
  }

  /** The running attempts (for the sweeps over them: time limits, progress). */
  runningJobs(): IterableIterator<ActiveJob> {
    return this.#running.values();
  }

  /** Every job held: the running ones, then those ahead. */
  all(): ActiveJob[] {
    const held = [...this.#running.values()];
    for (const job of this.#ahead) held.push(job);
    return held;
  }

  /**
   * Holds a job a claim returned, behind those already ahead. A cancel of it heard after
   * the claim was sent came ahead of the claim's answer: it waits for a heartbeat sent
   * from now, which reads its row (the heartbeats sent meanwhile did not hold it).
   */
  add(job: ActiveJob): void {
    const heard = this.#heardUnheld.get(job.row.id);
    if (heard !== undefined && heard >= job.claimSentAt) job.cancelHeardAt = performance.now();
    this.#ahead.push(job);
  }

  /** The job that starts next, left ahead. */
  next(): ActiveJob | undefined {
    return this.#ahead.peek();
  }

  /** Starts the next job ahead: it is running from now on. */
  startNext(): void {
    const job = this.#ahead.shift();
    if (job) this.#running.set(job.row.lease_token, job);
  }

  /** The attempt's handler has ended: it runs no more. */
  end(job: ActiveJob): void {
    if (this.#running.get(job.row.lease_token) === job) this.#running.delete(job.row.lease_token);
    if (this.#running.size === 0) for (const resolve of this.#settledWaiters.splice(0)) resolve();
  }

  /** Lets the running attempts end for up to `graceMs`, then aborts the rest with `reason` and waits for them. */
  async stopRunning(graceMs: number, reason: unknown): Promise<void> {
    if (this.#running.size === 0) return;
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      this.#settled(),
      new Promise<void>((resolve) => {
        timer = setTimeout(resolve, graceMs);
      }),
    ]);
    clearTimeout(timer);
    for (const job of this.#running.values()) job.abort(reason);
    await this.#settled();
  }

  #settled(): Promise<void> {
    if (this.#running.size === 0) return Promise.resolve();
    return new Promise((resolve) => this.#settledWaiters.push(resolve));
  }

  /** Gives up every job ahead (they are handed back): returns them. */
  releaseAhead(): ActiveJob[] {
    return this.#ahead.drain();
  }

  /**
   * A cancel of job `id` was announced: marks it, if held here (running or ahead), so that
   * it does not start before a heartbeat has read its row; returns whether it is held.
   * One not held is remembered for the claims in flight (see #heardUnheld).
   */
  cancelHeard(id: string, at: number): boolean {
    let held = false;
    for (const job of [...this.#running.values(), ...this.#ahead]) {
      if (job.row.id !== id) continue;
      job.cancelHeardAt = at;
      held = true;
    }
    // a job id only: anyone may NOTIFY, and other text would fill the memory with keys no job has
    if (!held && ID_DIGITS.test(id)) {
      // set anew, so last: the map stays in the order heard, the oldest first
      this.#heardUnheld.delete(id);
      this.#heardUnheld.set(id, at);
      if (this.#heardUnheld.size > HEARD_UNHELD_MAX) {
        for (const oldest of this.#heardUnheld.keys()) {
          this.#heardUnheld.delete(oldest);
          break;
        }
      }
    }
    return held;
  }

  /** Stops a running attempt whose cancel was asked for; a job ahead ends cancelled. */
  cancelAttempt(job: ActiveJob): void {
    if (this.#running.get(job.row.lease_token) === job) {
      job.abort(new JobCancelledError());
      return;
    }
    if (this.#ahead.remove((j) => j === job)) {
      this.#counters.cancelled++;
      this.#cancelledAhead(job);
    }
  }

  /** The lease of `job` is not held any more: its outcome will be dropped. */
  lose(job: ActiveJob, why = 'the lease of this job was lost; another worker may run it'): void {
    if (this.#running.get(job.row.lease_token) === job) {
      if (!job.lost) {
        job.lost = true;
        job.abort(new LeaseLostError(why));
      }
      return;
    }
    if (this.#ahead.remove((j) => j === job)) this.#counters.lost++;
  }

  /** A claim returned `rows`: an older attempt of one of their jobs still held here is stale. */
  supersede(rows: ClaimedRow[]): void {
    if (rows.length === 0 || (this.#running.size === 0 && this.#ahead.length === 0)) return;
    const fresh = new Map(rows.map((r) => [r.id, r.lease_token]));
    const stale = (job: ActiveJob) => {
      const token = fresh.get(job.row.id);
      return token !== undefined && token !== job.row.lease_token;
    };
    for (const job of this.#running.values()) {
      if (stale(job)) this.lose(job, 'the job was claimed again (its lease had run out)');
    }
    this.#counters.lost += this.#ahead.removeAll(stale).length;
  }

  /**
   * Stops the attempts whose lease the database has not confirmed in time (the worker cut
   * off from it, or frozen): they stop a margin before another worker could get the job.
   * Returns whether jobs ahead were dropped (room for a claim).
   */
  expire(now: number): boolean {
    for (const job of this.#running.values()) {
      if (job.leaseUntil <= now && !job.lost) {
        this.lose(job, 'the lease of this job could not be renewed in time; it was stopped before it ran out');
      }
    }
    return this.dropExpiredAhead(now) > 0;
  }

  /**
   * Drops the jobs at the head of those ahead whose lease may have run out by `now` (the
   * process stood still: frozen, a long pause): they may be another worker's by now.
   * Returns how many.
   */
  dropExpiredAhead(now: number): number {
    let dropped = 0;
    for (let next = this.#ahead.peek(); next !== undefined && next.leaseUntil <= now; next = this.#ahead.peek()) {
      this.#ahead.shift();
      dropped++;
    }
    this.#counters.lost += dropped;
    return dropped;
  }
}
