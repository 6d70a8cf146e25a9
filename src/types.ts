import type { TransactionLike } from './db/adapters.js';

/**
 * Where a job is in its life.
 * - `scheduled`: waiting for its `runAt`, or for the jobs it depends on (`waitingOn` > 0)
 * - `available`: can run now, waiting for a worker (and a free tenant slot)
 * - `running`: claimed by a worker (or leased by `fetch`)
 * - `failed`: an attempt failed; it will be retried at its `runAt`
 * - `succeeded`, `dead` (out of attempts), `cancelled`, `expired` (its `expiresAt`
 *   passed before it ran): finished, kept in history
 */
export type JobState =
  | 'scheduled'
  | 'available'
  | 'running'
  | 'failed'
  | 'succeeded'
  | 'dead'
  | 'cancelled'
  | 'expired';

/** The states of finished jobs. */
export const FINISHED_STATES: readonly JobState[] = ['succeeded', 'dead', 'cancelled', 'expired'];

/** One failed attempt, as recorded on the job. */
export interface JobError {
  attempt: number;
  message: string;
  name?: string;
  stack?: string;
  /** ISO time of the failure. */
  at: string;
}

/**
 * The record a job is about (source): the class, the id and the method of a
 * `tusk.async(instance).method()` call, or what an enqueue's `source` option gave.
 */
export interface JobSource {
  type: string;
  id: string;
  method: string | null;
}

/** A job record, the same shape whatever its state. */
export interface Job<Payload = unknown, Result = unknown> {
  id: string;
  task: string;
  tenant: string;
  queue: string;
  state: JobState;
  payload: Payload;
  priority: number;
  attempts: number;
  maxAttempts: number;
  concurrencyKey: string | null;
  createdAt: Date;
  runAt: Date;
  startedAt: Date | null;
  finishedAt: Date | null;
  expiresAt: Date | null;
  /**
   * From when it could run (runAt) to when its last attempt started. Capped at
   * 2147483647 (24.8 days): a longer wait reads as that.
   */
  waitMs: number | null;
  /** How long its last attempt ran (finished jobs); capped like waitMs. */
  runMs: number | null;
  stats: Record<string, unknown> | null;
  result: Result | null;
  /** The last attempt's error, or null. */
  error: JobError | null;
  /** Every failed attempt's error, oldest first (the last 50). */
  errors: JobError[];
  /** A cancel was asked while it ran; its worker was told to abort. */
  cancelRequested: boolean;
  /** The record the job is about, or null. */
  source: JobSource | null;
  /** What its handler last reported with `ctx.progress()` (a number or small JSON), or null. */
  progress: unknown;
  /**
   * The jobs it depends on (`dependsOn`, or its children in a flow), in the order given;
   * empty for none. Its handler reads them with `ctx.dependencies()`.
   */
  dependsOn: string[];
  /** How many of those have not ended yet: while above 0, the job waits (`scheduled`). */
  waitingOn: number;
}

/** Options of `enqueue` (and of each entry of `enqueueMany`). */
export interface EnqueueOptions {
  /** The tenant (customer) the job belongs to; default `'default'`. */
  tenant?: string;
  /** Queue name; default `'default'`. */
  queue?: string;
  /** Lower runs first; -32768..32767, default 0. */
  priority?: number;
  /** Do not start before this time. */
  runAt?: Date;
  /** Do not start before this many milliseconds from now. */
  delayMs?: number;
  /** Attempts before the job is `dead`; default 5. */
  maxAttempts?: number;
  /** If it has not started by then, it ends `expired` instead of running. */
  expiresAt?: Date;
  /** Limits running jobs per key inside the tenant (see `tenants.set(..., { perKey })`). */
  concurrencyKey?: string;
  /**
   * Deduplication: while an unfinished job of the same tenant with the same key
   * exists, enqueued within `dedupWindowMs` (default 10 minutes), enqueueing returns that
   * job's id (`deduplicated: true`) instead of adding one. `dedupe: true` derives the key
   * from the task and payload; `dedupKey` gives it.
   */
  dedupe?: boolean;
  dedupKey?: string;
  dedupWindowMs?: number;
  /**
   * Debounce: enqueues with the same `key` (per tenant) while its job is not due make
   * one job, with the last enqueue's payload and options, starting `delayMs` after the
   * last enqueue — and at most `maxWaitMs` after the first, so a steady stream still runs.
   * The second and later enqueues of a burst return the job's id with `deduplicated: true`.
   */
  debounce?: { key: string; delayMs: number; maxWaitMs?: number };
  /**
   * Retry settings of this job, over its task definition's: attempts, a backoff of
   * `'exponential'` or a fixed number of ms, a queue for the retries.
   */
  retry?: { maxAttempts?: number; backoff?: 'exponential' | number; queue?: string };
  /**
   * The record the job is about, shown on the job and indexed (`source_type`,
   * `source_id`, `source_method` in `jobs` and `job_history`). `tusk.async()` sets it.
   */
  source?: { type: string; id: string | number; method?: string };
  /**
   * Jobs this one depends on (ids of jobs enqueued before it, of any tenant or queue): it
   * waits, in state `scheduled`, until they have all ended, then starts (at its `runAt`
   * at the earliest) if they all succeeded; its handler reads their results with
   * `ctx.dependencies()`. A job that already succeeded counts as done; an unknown id is
   * refused (TuskValidationError naming it, nothing written). Not with deduplication or
   * debounce. For a tree of jobs enqueued together, see `tusk.flow`.
   *
   * @example
   * const { ids } = await tusk.enqueueMany(parts.map((p) => ({ task: 'render', payload: p })));
   * await tusk.enqueue('assemble', { doc }, { dependsOn: ids });
   */
  dependsOn?: ReadonlyArray<string | number | bigint>;
  /**
   * When a job it depends on ends `dead`, `cancelled` or `expired`: `'cancel'` (default)
   * cancels it at once (and the jobs that depend on it, and so on; its error says which
   * dependency failed), `'continue'` runs it all the same once they have all ended.
   */
  onDependencyFailure?: 'cancel' | 'continue';
  /**
   * A connection inside your transaction: the job commits or rolls back with it. A `pg`
   * Client/PoolClient, a Kysely or Drizzle transaction, or anything with
   * `query(text, values)` (see TransactionLike).
   */
  client?: TransactionLike;
}

/**
 * Options of `stage`: those of `enqueue` but `client` (the transaction is `stage`'s first
 * argument) and dependencies (a staged job has no id to depend on until it is drained).
 */
export type StageOptions = Omit<EnqueueOptions, 'client' | 'dependsOn' | 'onDependencyFailure'>;

/** One entry of `enqueueMany`. */
export interface JobSpec extends Omit<EnqueueOptions, 'client'> {
  task: string;
  payload?: unknown;
}

/** One entry of `stageMany`. */
export interface StageSpec extends StageOptions {
  task: string;
  payload?: unknown;
}

/**
 * A job of a flow (`tusk.flow`): its task, payload and enqueue options, and its
 * `children`, the jobs enqueued with it that it waits for (BullMQ's FlowProducer order:
 * the parent runs after its children). Deduplication and debounce do not apply.
 */
export interface FlowSpec extends Omit<JobSpec, 'dedupe' | 'dedupKey' | 'dedupWindowMs' | 'debounce'> {
  children?: readonly FlowSpec[];
}

/** What `tusk.flow` returns: the id of each job of the flow, in the same tree. */
export interface FlowIds {
  id: string;
  children: FlowIds[];
}

/** What `enqueue` returns. */
export interface Enqueued {
  id: string;
  /**
   * True when no job was added: an unfinished job with the same dedup key existed (see
   * `dedupe`, `dedupKey`), or this enqueue joined a debounce burst (`debounce`: its job now
   * has this enqueue's payload and options). `id` is that job's.
   */
  deduplicated: boolean;
}

/** A job leased by `fetch`: the lease is its `id` and `token` (see `ack`). */
export interface LeasedJob<Payload = unknown> {
  id: string;
  /**
   * The lease's fencing token: drawn at this claim and never handed out again (not after
   * `retry()`, nor after a claim that was rolled back). ack, nack and extendLease check it.
   */
  token: string;
  /** Which attempt this is, from 1 (`retry()` starts the count again). */
  attempt: number;
  task: string;
  tenant: string;
  queue: string;
  payload: Payload;
  priority: number;
  maxAttempts: number;
  createdAt: Date;
  leaseUntil: Date;
  source: JobSource | null;
  /** The jobs it depends on (see `Job.dependsOn`): read their results with `getJob`. */
  dependsOn: string[];
}

/** A lease: a job returned by `fetch`, or its id and token. */
export interface Lease {
  id: string;
  token: string;
}

/** A job as a list shows it: no payload, result or stats. */
export interface JobSummary {
  id: string;
  task: string;
  tenant: string;
  queue: string;
  state: JobState;
  priority: number;
  attempts: number;
  maxAttempts: number;
  createdAt: Date;
  runAt: Date;
  startedAt: Date | null;
  finishedAt: Date | null;
  waitMs: number | null;
  runMs: number | null;
  /** The last failed attempt's message. */
  error: string | null;
}
