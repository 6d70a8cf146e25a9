import { toClaimed } from '../client/jobs.js';
import type { ClaimedRow } from '../queries/claimJobs.js';
import type { Handler, JobContext } from '../tasks/definition.js';
import type { Job } from '../types.js';
import { toJson } from '../validation/json.js';

/** Reads jobs by id, in the order given (an id of no job left out). */
export type JobLoader = (ids: readonly string[]) => Promise<Job[]>;

/** ctx.progress() values are small: they are written while the job runs. */
const PROGRESS_MAX_BYTES = 4096;

/**
 * A claimed job while its handler runs. Its AbortSignal is created only if the handler
 * asks for `ctx.signal` (an AbortController per job is measurable at tens of thousands of
 * jobs a second); aborting rejects the run at once either way.
 */
export class ActiveJob {
  readonly row: ClaimedRow;
  /** performance.now() when claimed, and when its attempt started (its payload's validation, then its handler). */
  readonly claimedAt: number;
  /**
   * performance.now() when its claim was sent: the claim's rows are as of a moment after
   * it, and before claimedAt (a connection lost meanwhile may have lost them already).
   */
  readonly claimSentAt: number;
  startedAt = 0;
  stats: Record<string, unknown> | null = null;
  /** The latest ctx.progress() as JSON, and whether it is not written yet. */
  progress: string | null = null;
  progressDirty = false;
  /** The lease was lost: whatever the handler returns is dropped. */
  lost = false;
  /**
   * performance.now() when a cancel of this job was announced (0: never), or when it was
   * held if announced before (its claim's answer on its way). Held ahead, it starts only
   * once a heartbeat sent after that has read the job's row and not cancelled it.
   */
  cancelHeardAt = 0;
  /**
   * performance.now() by which the attempt must have stopped: its lease's end as last
   * confirmed by the database, less a margin. Only a claim or a heartbeat moves it.
   */
  leaseUntil: number;
  #aborted = false;
  #reason: unknown;
  #controller: AbortController | null = null;
  #reject: ((reason: unknown) => void) | null = null;

  constructor(row: ClaimedRow, claimSentAt: number, claimedAt: number, leaseUntil: number) {
    this.row = row;
    this.claimSentAt = claimSentAt;
    this.claimedAt = claimedAt;
    this.leaseUntil = leaseUntil;
  }

  get aborted(): boolean {
    return this.#aborted;
  }

  /** Why the attempt was aborted (undefined if it was not). */
  get reason(): unknown {
    return this.#reason;
  }

  get signal(): AbortSignal {
    if (!this.#controller) {
      this.#controller = new AbortController();
      if (this.#aborted) this.#controller.abort(this.#reason);
    }
    return this.#controller.signal;
  }

  /** Ends the attempt now with `reason` (timeout, cancel, shutdown, lost lease). */
  abort(reason: unknown): void {
    if (this.#aborted) return;
    this.#aborted = true;
    this.#reason = reason;
    this.#controller?.abort(reason);
    this.#reject?.(reason);
  }

  /**
   * `work` (a step of the attempt before its handler, such as the payload's validation),
   * or the abort reason as soon as the attempt is aborted, whichever comes first: a step
   * that never settles does not keep a stopping worker, or a lost lease, waiting.
   */
  step<T>(work: () => Promise<T>): Promise<T> {
    return new Promise((resolve, reject) => {
      // aborted already: the work is not begun (nor left to reject unheard)
      if (this.#aborted) return reject(this.#reason);
      this.#follow(work(), resolve, reject);
    });
  }

  /** Settles as `work` does, unless an abort rejects first (`#reject`). */
  #follow<T>(work: PromiseLike<T>, resolve: (value: T) => void, reject: (reason: unknown) => void): void {
    this.#reject = reject;
    work.then(
      (value) => {
        this.#reject = null;
        resolve(value);
      },
      (error) => {
        this.#reject = null;
        reject(error);
      },
    );
  }

  /** performance.now() past which the attempt has overrun its time limit (Infinity: none). */
  deadline = Number.POSITIVE_INFINITY;

  /** The attempt starts: its time limit (`timeoutMs`, null: none) runs from now. */
  start(timeoutMs: number | null): void {
    this.startedAt = performance.now();
    if (timeoutMs !== null) this.deadline = this.startedAt + timeoutMs;
  }

  /**
   * Runs the handler on `payload` (the row's, or its schema's output); resolves with its
   * result, or rejects with its error or the abort reason (timeout, cancel, ...), whichever
   * comes first. The worker enforces `deadline` (see `start`).
   */
  run(handler: Handler, payload: unknown = this.row.payload, load: JobLoader = async () => []): Promise<unknown> {
    const ctx = new Context(this, load);
    return new Promise((resolve, reject) => {
      if (this.#aborted) return reject(this.#reason);
      this.#reject = reject;
      let result: unknown;
      try {
        result = handler(payload, ctx);
      } catch (error) {
        this.#reject = null;
        return reject(error);
      }
      if (typeof (result as PromiseLike<unknown> | null)?.then === 'function') {
        this.#follow(result as PromiseLike<unknown>, resolve, reject);
      } else {
        this.#reject = null;
        resolve(result);
      }
    });
  }
}

/**
 * The `ctx` a handler gets: a class (methods on the prototype) rather than an object of
 * closures, and `job` built only if read: one allocation per job instead of several.
 */
class Context implements JobContext {
  readonly #active: ActiveJob;
  readonly #load: JobLoader;
  #job: JobContext['job'] | undefined;
  #dependencies: Promise<Job[]> | undefined;

  constructor(active: ActiveJob, load: JobLoader) {
    this.#active = active;
    this.#load = load;
  }

  get job(): JobContext['job'] {
    this.#job ??= toClaimed(this.#active.row);
    return this.#job;
  }

  get signal(): AbortSignal {
    return this.#active.signal;
  }

  stats(values: Record<string, unknown>): void {
    const active = this.#active;
    active.stats = active.stats ? Object.assign(active.stats, values) : { ...values };
  }

  progress(value: unknown): void {
    this.#active.progress = toJson(value === undefined ? null : value, 'progress', PROGRESS_MAX_BYTES);
    this.#active.progressDirty = true;
  }

  dependencies(): Promise<Job[]> {
    const ids = this.#active.row.depends_on;
    if (!ids || ids.length === 0) return Promise.resolve([]);
    // once per attempt; a failed read may be tried again
    this.#dependencies ??= this.#load(ids).catch((error) => {
      this.#dependencies = undefined;
      throw error;
    });
    return this.#dependencies;
  }
}
