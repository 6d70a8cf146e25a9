import type { Queryable } from '../db/queryable.js';
import type { StagedRow } from '../queries/staged.js';

/** The options a job was staged with (a delay is already turned into `runAt`). */
export interface StagedOptions {
  tenant?: string;
  queue?: string;
  priority?: number;
  runAt?: Date;
  maxAttempts?: number;
  concurrencyKey?: string;
  expiresAt?: Date;
  retry?: { backoff?: 'exponential' | number; queue?: string };
  dedupKey?: string;
  dedupWindowMs?: number;
  /** Debounce (see EnqueueOptions.debounce): the key, and how long after the first enqueue it runs at the latest. */
  debounceKey?: string;
  debounceMaxWaitMs?: number;
  /** The record the job is about (see `tusk.async`). */
  source?: { type: string; id: string; method?: string };
}

/**
 * A staged job as a sink receives it. `payload` is parsed on first use; `payloadJson` is
 * the stored JSON text, for sinks that pass it on as it is.
 */
export class StagedJob {
  /** The staged row's id: increasing in staging order, unique per schema. */
  readonly id: string;
  /**
   * Unique across schemas and installs: the schema's random key space and the id. What
   * an idempotent sink keys its jobs on (ids alone start again at 1 in a schema made again).
   */
  readonly key: string;
  readonly task: string;
  readonly payloadJson: string;
  readonly options: StagedOptions;
  readonly stagedAt: Date;
  #payload: unknown;
  #parsed = false;

  constructor(row: StagedRow) {
    this.id = row.id;
    this.key = `${row.key_space}-${row.id}`;
    this.task = row.task;
    this.payloadJson = row.payload;
    this.stagedAt = row.staged_at;
    this.options = stagedOptions(row.options);
  }

  get payload(): unknown {
    if (!this.#parsed) {
      this.#payload = JSON.parse(this.payloadJson);
      this.#parsed = true;
    }
    return this.#payload;
  }
}

/** The stored options (enqueue's JSON entry keys) as StagedOptions. */
function stagedOptions(o: Record<string, unknown>): StagedOptions {
  const date = (v: unknown) => (typeof v === 'string' ? new Date(v) : undefined);
  const options: StagedOptions = {
    tenant: o.tenant as string | undefined,
    queue: o.queue as string | undefined,
    priority: o.priority as number | undefined,
    runAt: date(o.run_at),
    maxAttempts: o.max_attempts as number | undefined,
    concurrencyKey: o.concurrency_key as string | undefined,
    expiresAt: date(o.expires_at),
    retry: o.retry as StagedOptions['retry'],
    dedupKey: o.dedup_key as string | undefined,
    dedupWindowMs: o.dedup_window_ms as number | undefined,
    debounceKey: o.debounce_key as string | undefined,
    debounceMaxWaitMs: o.debounce_max_wait_ms as number | undefined,
    source:
      typeof o.source_type === 'string'
        ? {
            type: o.source_type,
            id: o.source_id as string,
            ...(typeof o.source_method === 'string' ? { method: o.source_method } : {}),
          }
        : undefined,
  };
  for (const key of Object.keys(options) as Array<keyof StagedOptions>) {
    if (options[key] === undefined) delete options[key];
  }
  return options;
}

/** What the drainer hands a sink besides the jobs. */
export interface SinkContext {
  /**
   * The drainer's connection. For a `transactional` sink it is inside the transaction
   * that deletes the batch from the staging table.
   */
  client: Queryable;
  /** Tusk's schema. */
  schema: string;
  /**
   * Aborted when the drainer gives the send up: its time (the drainer's `sendTimeoutMs`)
   * is over, or the drainer lost its lock. A sink that stops then (or always finishes in
   * time) is never sending while another drainer sends.
   */
  signal: AbortSignal;
}

/**
 * Where a drainer forwards staged jobs. `send` receives a batch in staging order and
 * resolves only once the destination holds every job durably; the drainer deletes the
 * batch after that. If `send` throws, the batch stays staged and is sent again (after a
 * backoff), so a sink sees a batch more than once when it fails or the drainer dies
 * mid-batch: delivery is at least once, unless the sink is `transactional`. A send must
 * stop when `context.signal` aborts (or end within the drainer's `sendTimeoutMs`): a
 * drainer that takes over waits out that time, not longer, before it sends.
 *
 * @example
 * const webhookSink: Sink = {
 *   name: 'webhook',
 *   async send(jobs, { signal }) {
 *     const body = JSON.stringify(jobs.map((j) => ({ id: j.id, task: j.task, payload: j.payload })));
 *     const res = await fetch(url, { method: 'POST', body, signal });
 *     if (!res.ok) throw new Error(`webhook answered ${res.status}`);
 *   },
 * };
 * await tusk.drainer({ sink: webhookSink }).start();
 */
export interface Sink {
  /** For log lines. */
  readonly name: string;
  /**
   * True when `send` writes through `context.client` into the same database: the batch is
   * then moved inside one transaction, exactly once.
   */
  readonly transactional?: boolean;
  send(jobs: readonly StagedJob[], context: SinkContext): Promise<void>;
  /**
   * Connects and loads what the sink needs, once, before the drainer first takes the lock:
   * then a send's time (the drainer's `sendTimeoutMs`) is the send's alone, and a slow
   * start does not give up a first batch that then arrives twice. A destination that is
   * down is for `send` to report (it is retried); a throw here is logged and the drainer
   * starts anyway.
   */
  open?(): Promise<void>;
  /** Releases the sink's connections; called when the drainer stops. */
  close?(): Promise<void>;
}
