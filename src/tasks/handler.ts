import type { Job, JobSource } from '../types.js';

// The handler's types on their own, so that what runs handlers (the worker, an isolated
// thread) and what defines tasks both import them without importing each other.

/** What a handler gets besides its payload. */
export interface JobContext {
  /** The job being run. `attempt` counts from 1. */
  job: {
    id: string;
    task: string;
    tenant: string;
    queue: string;
    priority: number;
    attempt: number;
    maxAttempts: number;
    createdAt: Date;
    /** The record the job is about (see `tusk.async`), or null. */
    source: JobSource | null;
    /** The jobs it depends on (`dependsOn`, or its children in a flow), in order; empty for none. */
    dependsOn: string[];
  };
  /**
   * Aborted when the attempt must stop: its timeout passed, the job was cancelled, the
   * worker is shutting down past its grace period, or the lease was lost.
   * `signal.reason` says which.
   */
  signal: AbortSignal;
  /** Merges numbers, counts, anything JSON into the job's stats (kept in its record). */
  stats(values: Record<string, unknown>): void;
  /**
   * Reports how far the job got: a number or a small JSON value (at most 4 KiB), seen in
   * `getJob`, over HTTP and on the dashboard. Call it as often as you like: the worker
   * writes the latest value at most once a heartbeat (and with the job's outcome).
   *
   * @example
   * for (const [i, row] of rows.entries()) { await load(row); ctx.progress({ done: i + 1, of: rows.length }); }
   */
  progress(value: unknown): void;
  /**
   * The jobs this one depends on (`ctx.job.dependsOn`, in that order), as `getJob` returns
   * them: their `state` (`succeeded`, unless the job was enqueued with
   * `onDependencyFailure: 'continue'` or retried by hand) and `result`. Read from the
   * database on the first call; an empty array for a job with no dependencies. A
   * dependency whose history was deleted since (retention) is left out.
   *
   * @example
   * const totals = (await ctx.dependencies()).map((job) => (job.result as { total: number }).total);
   */
  dependencies(): Promise<Job[]>;
}

/** A task handler: its return value (JSON) is stored as the job's result. */
// biome-ignore lint/suspicious/noExplicitAny: payload types come from the task registry
export type Handler<Payload = any, Result = unknown> = (payload: Payload, ctx: JobContext) => Result | Promise<Result>;
