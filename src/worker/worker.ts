import { performance } from 'node:perf_hooks';
import type pg from 'pg';
import { toJob } from '../client/jobs.js';
import type { Database } from '../db/connection.js';
import { Listener } from '../db/listener.js';
import { channels } from '../db/schema.js';
import { JobCancelledError, TuskError, WorkerStoppingError } from '../errors.js';
import type { Logger } from '../log.js';
import { checkSchema } from '../migrate/migrate.js';
import { decideRetry, type RetryPolicy } from '../policies/backoff.js';
import { equalWeights, sampleOrder, splitByWeight } from '../policies/weights.js';
import { type ClaimedRow, claimJobs } from '../queries/claimJobs.js';
import { nextDueInMs, promoteDueJobs } from '../queries/dueJobs.js';
import { type FinalState, finishJobs } from '../queries/finishJobs.js';
import type { JsonText, OutcomeEntry } from '../queries/outcomes.js';
import { setProgress } from '../queries/progress.js';
import { requeueJobs } from '../queries/requeueJobs.js';
import { selectJobs } from '../queries/selectJob.js';
import { heartbeat } from '../queries/workers.js';
import type { SourceRegistry } from '../tasks/sources.js';
import { Upkeep } from '../upkeep/upkeep.js';
import { toJson } from '../validation/json.js';
import { ActiveJob, type JobLoader } from './activeJob.js';
import { Batcher } from './batcher.js';
import type { WorkerCounters } from './counters.js';
import { wakeableDelay } from './delay.js';
import { errorRecord } from './errorRecord.js';
import { HeldJobs } from './heldJobs.js';
import {
  queueNames,
  type ResolvedWorkerOptions,
  resolveWorkerOptions,
  type TaskDefinition,
  type WorkerOptions,
} from './options.js';
import { Registration } from './registration.js';
import { type AttemptContext, type Outcome, runAttempt, taskOf } from './runAttempt.js';
import { TimeLimits } from './timeLimits.js';
import { Wakeups } from './wakeups.js';

export type { WorkerCounters } from './counters.js';

/** What a worker needs from its Tusk instance. */
export interface WorkerHost {
  schema: string;
  /** Tasks given to `new Tusk()`: used when the worker is given none. */
  tasks: Map<string, TaskDefinition>;
  /** Classes registered with `tusk.register`: their jobs run in every worker. */
  sources: SourceRegistry;
  log: Logger;
  maxPayloadBytes: number;
  database(): Promise<Database>;
  forget(worker: Worker): void;
}

/** 'auto' prefetch buffers about this much work (ms of handler time per slot). */
const PREFETCH_WINDOW_MS = 25;
const MAX_AUTO_PREFETCH = 2000;
/**
 * Failed claims are retried at most this far apart, as often as an idle worker polls by
 * default: waiting longer spares the database nothing and left the worker idle for up to
 * 5 s after its claims worked again (claims can fail while the listening connection stays
 * up, so no reconnect wakes the loop).
 */
const CLAIM_RETRY_MAX_MS = 1000;

/**
 * Runs jobs: claims them in batches (fairly across tenants), runs their handlers with
 * bounded concurrency, writes outcomes back in batches, keeps their leases alive, and
 * takes part in crash recovery. Create it with `tusk.worker(...)`.
 *
 * @example
 * const worker = tusk.worker({
 *   tasks: { send_email: async ({ to }, ctx) => { ctx.stats({ sent: 1 }); return { ok: true }; } },
 *   concurrency: 16,
 * });
 * await worker.start();
 * // ...
 * await worker.stop(); // lets running jobs finish (shutdownTimeoutMs), releases the rest
 */
export class Worker {
  readonly counters: WorkerCounters = { claimed: 0, succeeded: 0, retried: 0, dead: 0, cancelled: 0, lost: 0 };
  readonly #host: WorkerHost;
  readonly #opts: ResolvedWorkerOptions;
  #db: Database | null = null;
  #listener: Listener | null = null;
  readonly #registration: Registration;
  #state: 'new' | 'starting' | 'running' | 'stopping' | 'stopped' = 'new';
  #stopped: Promise<void> | null = null;
  #loops: Promise<void>[] = [];
  /** Jobs asked for by claims in flight. */
  #claiming = 0;
  readonly #held: HeldJobs;
  #avgRunMs: number | null = null;
  /** performance.now() when something scheduled is due (by the database's clock). */
  #dueAt: number | null = null;
  #timers: NodeJS.Timeout[] = [];
  readonly #wakeups = new Wakeups(() => this.#state === 'running');
  #busy = new Set<string>();
  /** When the last heartbeat that confirmed the held jobs' leases was sent (performance.now()). */
  #leasesCheckedAt = 0;
  /** Outcome writes waiting to retry: the connection's return cuts their wait short. */
  readonly #retryWaiters = new Set<() => void>();
  readonly #finishers: Record<Exclude<FinalState, 'expired'>, Batcher<OutcomeEntry>>;
  readonly #requeuer: Batcher<OutcomeEntry>;
  readonly #timeLimits: TimeLimits;
  readonly #attempts: AttemptContext;
  /** Every worker takes part in the queue's upkeep (one process at a time does each part). */
  #upkeep: Upkeep | null = null;

  constructor(host: WorkerHost, options: WorkerOptions) {
    this.#host = host;
    this.#opts = resolveWorkerOptions(options, host.tasks, host.sources.size > 0);
    const finisher = (state: FinalState) =>
      new Batcher<OutcomeEntry>((entries) => this.#writeFinished(state, entries), this.#opts.batchSize);
    this.#finishers = { succeeded: finisher('succeeded'), dead: finisher('dead'), cancelled: finisher('cancelled') };
    this.#requeuer = new Batcher<OutcomeEntry>((entries) => this.#writeRequeued(entries), this.#opts.batchSize);
    this.#registration = new Registration(host.schema, host.log, this.#opts);
    this.#attempts = {
      tasks: this.#opts.tasks,
      sources: host.sources,
      maxPayloadBytes: host.maxPayloadBytes,
      load: this.#loadJobs,
      watch: (timeoutMs) => this.#timeLimits.watch(timeoutMs),
    };
    this.#held = new HeldJobs(this.counters, (job) => this.#finishers.cancelled.add(leaseEntry(job)));
    this.#timeLimits = new TimeLimits(() => this.#held.runningJobs());
  }

  /** The database, set by start(): every loop and write runs after it. */
  get #database(): Database {
    if (!this.#db) throw new TuskError('the worker is not started');
    return this.#db;
  }

  get #pool(): pg.Pool {
    return this.#database.pool;
  }

  /** The worker's id in the workers table (null before start). */
  get id(): number | null {
    return this.#registration.id;
  }

  /** Where the worker is in its life. */
  get state(): 'new' | 'starting' | 'running' | 'stopping' | 'stopped' {
    return this.#state;
  }

  /** Jobs whose handlers are running now. */
  get running(): number {
    return this.#held.running;
  }

  /** Registers the worker and starts claiming. Throws if the schema is not migrated. */
  async start(): Promise<void> {
    if (this.#state !== 'new') throw new TuskError(`worker cannot start: it is ${this.#state}`);
    this.#state = 'starting';
    try {
      const db = await this.#host.database();
      this.#db = db;
      await checkSchema(db.pool, this.#host.schema);
      await this.#registration.recordDefinitions(db.pool, this.#opts.tasks);
      const names = channels(this.#host.schema);
      this.#listener = new Listener({
        label: 'worker',
        clientConfig: db.clientConfig,
        channels: [names.jobs, names.cancel],
        log: this.#host.log,
        onNotification: (channel, payload) =>
          channel === names.cancel ? this.#held.cancel(payload) : this.#wakeups.notified(),
        onConnect: (client) => this.#registration.register(client),
        onReady: () => this.#reconnected(),
        // the worker may look dead meanwhile and its jobs be handed to others: buffered
        // jobs wait for a heartbeat on the new connection before they start
        onDisconnect: () => this.#registration.disconnected(),
      });
      await this.#listener.start();
    } catch (error) {
      this.#state = 'stopped';
      await this.#listener?.stop();
      this.#host.forget(this);
      throw error;
    }
    this.#state = 'running';
    this.#every(this.#opts.heartbeatMs, 'heartbeat', () => this.#heartbeat());
    const expiryEvery = Math.max(10, Math.min(250, Math.floor(this.#opts.leaseMarginMs / 4)));
    this.#timers.push(setInterval(() => this.#expireLeases(), expiryEvery));
    this.#upkeep = new Upkeep(
      {
        schema: this.#host.schema,
        log: this.#host.log,
        database: this.#host.database,
        forget: () => {},
        // while its listening connection is down the worker looks dead (its lock is free):
        // its own upkeep must not hand back its jobs before it has registered again
        paused: () => this.#listener?.connected !== true,
      },
      { everyMs: this.#opts.maintenanceMs },
    );
    this.#upkeep.start();
    // two claims in flight: one is executing in the database while the worker takes in
    // the other's jobs (claims of unlimited tenants run in parallel)
    this.#loops = [this.#fetchLoop(), this.#fetchLoop()];
    this.#host.log.info(
      { worker: this.id, concurrency: this.#opts.concurrency, queues: queueNames(this.#opts.queues) ?? 'all' },
      'worker started',
    );
  }

  /**
   * Stops claiming, gives back the jobs claimed ahead but not started, lets running jobs
   * finish for up to `shutdownTimeoutMs`, then aborts the rest (`ctx.signal`) and returns
   * them to the queue (the attempt counts). Safe to call twice.
   */
  stop(): Promise<void> {
    if (this.#state === 'new') {
      this.#state = 'stopped';
      this.#host.forget(this);
    }
    if (this.#state === 'stopped') return this.#stopped ?? Promise.resolve();
    this.#stopped ??= this.#shutdown();
    return this.#stopped;
  }

  async #shutdown(): Promise<void> {
    this.#state = 'stopping';
    for (const timer of this.#timers) clearInterval(timer);
    const upkeepStopped = this.#upkeep?.stop();
    this.#wakeups.wakeAll();
    await Promise.all(this.#loops);
    await upkeepStopped;
    // never started: given back without counting the attempt
    for (const job of this.#held.releaseAhead()) this.#requeuer.add({ ...leaseEntry(job), refund: true });
    await this.#held.stopRunning(this.#opts.shutdownTimeoutMs, new WorkerStoppingError());
    this.#timeLimits.stop();
    await this.#drainWrites();
    if (this.#db) await this.#registration.unregister(this.#listener?.client ?? this.#db.pool);
    await this.#listener?.stop();
    this.#state = 'stopped';
    this.#host.forget(this);
    this.#host.log.info({ worker: this.id, ...this.counters }, 'worker stopped');
  }

  #drainWrites(): Promise<unknown> {
    return Promise.all([...Object.values(this.#finishers), this.#requeuer].map((b) => b.drain()));
  }

  // ---- fetching ----------------------------------------------------------------------

  async #fetchLoop(): Promise<void> {
    const db = this.#database;
    let emptyBackoffMs = 0;
    let failures = 0;
    let notificationsBefore = 0;
    let claimSentAt = 0;
    let failedAt = 0;
    while (this.#state === 'running') {
      const want = this.#want();
      const registered = this.#registration.id;
      if (want === 0 || registered === null || !this.#listener?.connected) {
        await this.#wakeups.sleep(this.#opts.pollMs);
        continue;
      }
      let rows: ClaimedRow[];
      try {
        if (this.#dueAt !== null && performance.now() >= this.#dueAt) {
          this.#dueAt = null;
          await promoteDueJobs(db.pool, this.#host.schema);
        }
        notificationsBefore = this.#wakeups.notifications;
        this.#claiming += want;
        try {
          claimSentAt = performance.now();
          // the id now: a re-registration during the promotion may have changed it
          rows = await this.#claim(db, this.#registration.id ?? registered, want);
        } finally {
          this.#claiming -= want;
        }
        failures = 0;
      } catch (error) {
        // the failures before a reconnect say nothing of the new connection
        if (failedAt !== this.#registration.reconnects) failures = 0;
        failedAt = this.#registration.reconnects;
        failures++;
        if (failures === 1 || failures % 20 === 0) {
          this.#host.log.warn({ err: error, failures }, 'claiming jobs failed; retrying');
        }
        await this.#wakeups.sleep(Math.min(CLAIM_RETRY_MAX_MS, 50 * 2 ** failures));
        continue;
      }
      this.counters.claimed += rows.length;
      const claimedAt = performance.now();
      // the lease runs from the claim's start on the server, so after claimSentAt here
      const leaseUntil = claimSentAt + this.#opts.leaseMs - this.#opts.leaseMarginMs;
      this.#held.supersede(rows);
      for (const row of rows) this.#held.add(new ActiveJob(row, claimSentAt, claimedAt, leaseUntil));
      this.#pump();
      if (rows.length > 0) {
        // jobs were there: an empty claim next is probably a tenant row locked by another
        // claim for a moment, so look again soon before falling back to notifications
        emptyBackoffMs = 2;
        continue;
      }
      // a notification came in while this claim ran: its snapshot, or a tenant row another
      // claim held for a moment, may have hidden the new jobs, so look again soon
      if (emptyBackoffMs === 0 && this.#wakeups.notifications !== notificationsBefore) emptyBackoffMs = 2;
      let waitMs = this.#opts.pollMs;
      if (emptyBackoffMs > 0 && emptyBackoffMs <= 256) {
        waitMs = emptyBackoffMs;
        emptyBackoffMs *= 2;
      } else {
        emptyBackoffMs = 0;
      }
      await this.#refreshDue();
      if (this.#dueAt !== null) waitMs = Math.min(waitMs, this.#dueAt - performance.now());
      await this.#wakeups.sleep(Math.max(0, waitMs));
    }
  }

  /**
   * Claims up to `want` jobs. Queues of equal weight (or all queues) are claimed together;
   * with different weights the slots are split by weighted sampling and claimed queue by
   * queue, a queue that comes up short passing its remainder on to the next.
   */
  async #claim(db: Database, worker: number, want: number): Promise<ClaimedRow[]> {
    const claim = (queues: string[] | null, limit: number) =>
      claimJobs(db.pool, this.#host.schema, { worker, limit, leaseMs: this.#opts.leaseMs, queues, asyncCommit: true });
    const queues = this.#opts.queues;
    if (!queues || equalWeights(queues)) return claim(queueNames(queues), want);
    const split = splitByWeight(queues, want);
    const asked = new Set(split.map(([q]) => q));
    const rest = sampleOrder(queues.filter(([q]) => !asked.has(q))).map((q): [string, number] => [q, 0]);
    const batches: ClaimedRow[][] = [];
    let carry = 0;
    for (const [queue, share] of [...split, ...rest]) {
      const limit = share + carry;
      if (limit === 0) continue;
      const got = await claim([queue], limit);
      batches.push(got);
      carry = limit - got.length;
    }
    return interleave(batches);
  }

  /** How many jobs to claim now (0: not worth a round trip yet). */
  #want(): number {
    const ahead = this.#prefetchTarget();
    const held = this.#held.running + this.#held.ahead;
    const room = this.#opts.concurrency + ahead - held - this.#claiming;
    const unwritten = this.#requeuer.size + Object.values(this.#finishers).reduce((n, b) => n + b.size, 0);
    if (unwritten > 2 * this.#opts.batchSize) return 0;
    // with work in hand, wait until half the window is free: fewer, bigger claims (per-claim
    // overhead dominated at ~170 jobs a claim; ~500+ doubled the drain rate)
    const least = held > 0 ? Math.max(1, Math.floor((this.#opts.concurrency + ahead) / 2)) : 1;
    return room >= least ? Math.min(room, this.#opts.batchSize) : 0;
  }

  #prefetchTarget(): number {
    const { prefetch, concurrency } = this.#opts;
    if (prefetch !== 'auto') return prefetch;
    if (this.#avgRunMs === null) return 0;
    const target = Math.round((concurrency * PREFETCH_WINDOW_MS) / Math.max(this.#avgRunMs, 0.01));
    return Math.min(MAX_AUTO_PREFETCH, target);
  }

  async #refreshDue(): Promise<void> {
    try {
      const asked = performance.now();
      const ms = await nextDueInMs(this.#pool, this.#host.schema);
      this.#dueAt = ms === null ? null : asked + ms;
    } catch {
      this.#dueAt = null;
    }
  }

  // ---- running -----------------------------------------------------------------------

  #pump(): void {
    while (this.#state === 'running' && this.#held.running < this.#opts.concurrency) {
      // a job ahead whose lease may have run out on the server is not ours to start any more
      this.#held.dropExpiredAhead(performance.now());
      const next = this.#held.next();
      if (!next) return;
      // from when the claim was sent: a claim answered after the listening connection was
      // lost may hold jobs already reaped as that dead worker's, so they wait for a heartbeat
      const checkedAt = Math.max(next.claimSentAt, this.#leasesCheckedAt);
      if (performance.now() - checkedAt > this.#opts.leaseMs / 2 || checkedAt < this.#registration.disconnectedAt) {
        void this.#once('heartbeat', () => this.#heartbeat());
        return;
      }
      this.#held.startNext();
      void this.#execute(next);
    }
  }

  async #execute(job: ActiveJob): Promise<void> {
    const task = taskOf(job, this.#attempts);
    this.#settle(job, task, await runAttempt(job, task, this.#attempts));
  }

  #settle(job: ActiveJob, task: TaskDefinition | undefined, outcome: Outcome): void {
    const { row } = job;
    this.#held.end(job);
    const runMs = job.startedAt ? performance.now() - job.startedAt : 0;
    this.#avgRunMs = this.#avgRunMs === null ? runMs : this.#avgRunMs * 0.9 + runMs * 0.1;
    let stats: JsonText | undefined;
    if (job.stats) {
      try {
        stats = toJson(job.stats, 'stats', this.#host.maxPayloadBytes);
      } catch (error) {
        if (outcome.ok) outcome = { ok: false, error };
      }
    }
    const entry = leaseEntry(job);
    entry.runMs = Math.round(runMs);
    entry.queuedMs = Math.round((job.startedAt || job.claimedAt) - job.claimedAt);
    if (stats !== undefined) entry.stats = stats;
    if (job.progress !== null) entry.progress = job.progress;
    const reason = job.reason;

    if (job.lost) {
      this.counters.lost++;
    } else if (outcome.ok) {
      this.counters.succeeded++;
      entry.result = outcome.result;
      this.#finishers.succeeded.add(entry);
    } else {
      entry.error = errorRecord(outcome.error, row.attempts);
      if (reason instanceof WorkerStoppingError) {
        this.#requeuer.add(entry);
      } else if (reason instanceof JobCancelledError) {
        this.counters.cancelled++;
        this.#finishers.cancelled.add(entry);
      } else {
        // the job's own retry settings (from its enqueue) over its task's
        const policy = row.retry ? { ...task?.retry, ...(row.retry as RetryPolicy) } : task?.retry;
        const decision = outcome.final
          ? ({ retry: false } as const)
          : decideRetry(policy, outcome.error, row.attempts, row.max_attempts);
        if (decision.retry) {
          this.counters.retried++;
          entry.delayMs = decision.delayMs;
          if (decision.queue) entry.queue = decision.queue;
          this.#requeuer.add(entry);
        } else {
          this.counters.dead++;
          this.#finishers.dead.add(entry);
        }
      }
    }
    this.#pump();
    if (this.#want() > 0) this.#wakeups.wakeAll();
  }

  // ---- writing outcomes ---------------------------------------------------------------

  /** What ctx.dependencies() reads. */
  readonly #loadJobs: JobLoader = async (ids) => (await selectJobs(this.#pool, this.#host.schema, ids)).map(toJob);

  async #writeFinished(state: FinalState, entries: OutcomeEntry[]): Promise<void> {
    const done = await this.#retrying(`finishing jobs as ${state}`, () =>
      finishJobs(this.#pool, this.#host.schema, state, entries, this.#opts.asyncCommit),
    );
    this.#reportFenced(entries.length, done ?? 0, state);
    this.#wakeups.wakeAll();
  }

  async #writeRequeued(entries: OutcomeEntry[]): Promise<void> {
    const done = await this.#retrying('requeueing jobs', () =>
      requeueJobs(this.#pool, this.#host.schema, entries, this.#opts.asyncCommit),
    );
    this.#reportFenced(entries.length, done ?? 0, 'requeued');
    this.#wakeups.wakeAll();
  }

  #reportFenced(sent: number, written: number, what: string): void {
    if (written < sent) {
      this.#host.log.warn(
        { jobs: sent - written, outcome: what },
        'outcomes dropped: those jobs were no longer held by this worker (lease lost and re-claimed, or cancelled)',
      );
    }
  }

  /** Runs a write until it succeeds or the leases it protects have run out. */
  async #retrying<T>(what: string, write: () => Promise<T>): Promise<T | null> {
    const deadline = Date.now() + this.#opts.leaseMs;
    for (let attempt = 1; ; attempt++) {
      try {
        return await write();
      } catch (error) {
        if (Date.now() > deadline) {
          this.#host.log.error({ err: error }, `${what} failed for good; crash recovery will re-run those jobs`);
          return null;
        }
        if (attempt === 1) this.#host.log.warn({ err: error }, `${what} failed; retrying`);
        // the listening connection's return cuts the wait short (#reconnected)
        await wakeableDelay(Math.min(2000, 25 * 2 ** attempt), this.#retryWaiters);
      }
    }
  }

  // ---- liveness ----------------------------------------------------------------------

  /**
   * The listening connection is up again and the worker registered on it: what waited
   * for the database goes on at once. The claim loops wake (jobs enqueued meanwhile were
   * announced to nobody), outcome writes retry, and a heartbeat confirms the leases of the
   * jobs held through the break (buffered ones start only after it).
   */
  #reconnected(): void {
    if (this.#state !== 'running') return;
    this.#registration.reconnected();
    for (const wake of [...this.#retryWaiters]) wake();
    void this.#once('heartbeat', () => this.#heartbeat());
    this.#wakeups.wakeAll();
  }

  #every(ms: number, what: string, fn: () => Promise<void>): void {
    this.#timers.push(setInterval(() => void this.#once(what, fn), ms));
  }

  /** Runs `fn` unless it is already running (or the worker is not). */
  async #once(what: string, fn: () => Promise<void>): Promise<void> {
    if (this.#busy.has(what) || this.#state !== 'running') return;
    this.#busy.add(what);
    try {
      await fn();
    } catch (error) {
      this.#host.log.debug({ err: error }, `${what} failed`);
    } finally {
      this.#busy.delete(what);
    }
  }

  async #heartbeat(): Promise<void> {
    const db = this.#database;
    const worker = this.#registration.id;
    if (worker === null || !this.#listener?.connected) return;
    const sentAt = performance.now();
    const held = this.#held.all();
    const result = await heartbeat(
      db.pool,
      this.#host.schema,
      worker,
      { ids: held.map((j) => j.row.id), tokens: held.map((j) => j.row.lease_token) },
      this.#opts.leaseMs,
    );
    if (!result.alive && this.#listener.client) {
      // our row was reaped while the connection lived on (e.g. after a long stall)
      await this.#registration.register(this.#listener.client);
    }
    const lost = new Set(result.lost);
    if (result.lease_left_ms !== null) {
      // every lease still held runs at least this long from the server's now(), which
      // came after sentAt: a deadline counted from sentAt is on the safe side
      const until = sentAt + result.lease_left_ms - this.#opts.leaseMarginMs;
      for (const job of held) {
        if (!lost.has(job.row.lease_token)) job.leaseUntil = Math.max(job.leaseUntil, until);
      }
    }
    const cancelled = new Set(result.cancelled);
    const ahead = this.#held.ahead;
    for (const job of held) {
      if (lost.has(job.row.lease_token)) this.#held.lose(job);
      else if (cancelled.has(job.row.lease_token)) this.#held.cancelAttempt(job);
    }
    const dropped = this.#held.ahead < ahead;
    await this.#writeProgress();
    // the leases of the jobs still held run at least half a lease from sentAt
    this.#leasesCheckedAt = sentAt;
    this.#pump();
    // jobs held ahead and dropped (after a break: claims lost in a crash, jobs handed back)
    // leave room no handler's end announces: the claim loops may be asleep for a poll
    if (dropped && this.#want() > 0) this.#wakeups.wakeAll();
  }

  /** The latest ctx.progress() of running jobs, once a heartbeat at most. */
  async #writeProgress(): Promise<void> {
    const dirty = [...this.#held.runningJobs()].filter((j) => j.progressDirty && !j.lost);
    if (dirty.length === 0) return;
    for (const job of dirty) job.progressDirty = false;
    await setProgress(
      this.#pool,
      this.#host.schema,
      dirty.map((j) => ({ id: j.row.id, token: j.row.lease_token, progress: j.progress as string })),
    );
  }

  /** Stops the attempts whose lease could not be renewed in time; room made wakes the claim loops. */
  #expireLeases(): void {
    if (this.#held.expire(performance.now()) && this.#want() > 0) this.#wakeups.wakeAll();
  }
}

/** The outcome of `job` that says nothing but whose it is: the job and its attempt's lease token. */
function leaseEntry(job: ActiveJob): OutcomeEntry {
  return { id: job.row.id, token: job.row.lease_token };
}

/**
 * Merges per-queue batches so that each queue's jobs are spread over the whole run in
 * proportion (800 critical and 100 default: a default job after every 8 critical ones),
 * each batch keeping its own order.
 */
function interleave(batches: ClaimedRow[][]): ClaimedRow[] {
  if (batches.length < 2) return batches[0] ?? [];
  return batches
    .flatMap((batch) => batch.map((row, i) => ({ row, at: (i + 0.5) / batch.length })))
    .sort((a, b) => a.at - b.at)
    .map((x) => x.row);
}
