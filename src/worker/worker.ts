import { toJob } from '../client/jobs.js';
import type { Database } from '../db/connection.js';
import { Listener } from '../db/listener.js';
import { channels } from '../db/schema.js';
import { TuskError, WorkerStoppingError } from '../errors.js';
import type { Logger } from '../log.js';
import { checkSchema } from '../migrate/migrate.js';
import { selectJobs } from '../queries/selectJob.js';
import type { SourceRegistry } from '../tasks/sources.js';
import { Upkeep } from '../upkeep/upkeep.js';
import type { ActiveJob } from './activeJob.js';
import { ClaimLoop } from './claimLoop.js';
import type { WorkerCounters } from './counters.js';
import { Heartbeats } from './heartbeats.js';
import { HeldJobs } from './heldJobs.js';
import {
  queueNames,
  type ResolvedWorkerOptions,
  resolveWorkerOptions,
  type TaskDefinition,
  type WorkerOptions,
} from './options.js';
import { OutcomeWriter } from './outcomeWriter.js';
import { Registration } from './registration.js';
import { type AttemptContext, type Outcome, runAttempt, taskOf } from './runAttempt.js';
import { leaseEntry, type Settling, settleAttempt } from './settle.js';
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

/** What start() sets up once the database is open: the parts that talk to it. */
interface Run {
  db: Database;
  /** The listening connection: NOTIFYs in, and the worker's registration (its lock) held. */
  listener: Listener;
  outcomes: OutcomeWriter;
  claims: ClaimLoop;
  heartbeats: Heartbeats;
  attempts: AttemptContext;
  settling: Settling;
}

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
  readonly #registration: Registration;
  readonly #held: HeldJobs;
  readonly #wakeups = new Wakeups(() => this.#state === 'running');
  readonly #timeLimits: TimeLimits;
  #state: 'new' | 'starting' | 'running' | 'stopping' | 'stopped' = 'new';
  #starting: Promise<void> | null = null;
  #run: Run | null = null;
  #stopped: Promise<void> | null = null;
  #loops: Promise<void>[] = [];
  /** Timer stopping the attempts whose lease could not be renewed in time. */
  #expiry: NodeJS.Timeout | null = null;
  /** Every worker takes part in the queue's upkeep (one process at a time does each part). */
  #upkeep: Upkeep | null = null;

  constructor(host: WorkerHost, options: WorkerOptions) {
    this.#host = host;
    this.#opts = resolveWorkerOptions(options, host.tasks, host.sources.size > 0);
    this.#registration = new Registration(host.schema, host.log, this.#opts);
    this.#held = new HeldJobs(this.counters, (job) => this.#live.outcomes.finish('cancelled', leaseEntry(job)));
    this.#timeLimits = new TimeLimits(() => this.#held.runningJobs());
  }

  /** The parts set up by start(): every loop and write runs after it. */
  get #live(): Run {
    if (!this.#run) throw new TuskError('the worker is not started');
    return this.#run;
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
    this.#starting = this.#begin();
    return this.#starting;
  }

  async #begin(): Promise<void> {
    let run: Run;
    try {
      const db = await this.#host.database();
      await checkSchema(db.pool, this.#host.schema);
      await this.#registration.recordDefinitions(db.pool, this.#opts.tasks);
      run = this.#setUp(db);
      this.#run = run;
      await run.listener.start();
    } catch (error) {
      this.#state = 'stopped';
      await this.#run?.listener.stop();
      this.#host.forget(this);
      throw error;
    }
    this.#state = 'running';
    run.heartbeats.start();
    const expiryEvery = Math.max(10, Math.min(250, Math.floor(this.#opts.leaseMarginMs / 4)));
    this.#expiry = setInterval(() => this.#expireLeases(), expiryEvery);
    this.#upkeep = new Upkeep(
      {
        schema: this.#host.schema,
        log: this.#host.log,
        database: this.#host.database,
        forget: () => {},
        // while its listening connection is down the worker looks dead (its lock is free):
        // its own upkeep must not hand back its jobs before it has registered again
        paused: () => !run.listener.connected,
      },
      { everyMs: this.#opts.maintenanceMs },
    );
    this.#upkeep.start();
    // two claims in flight: one is executing in the database while the worker takes in
    // the other's jobs (claims of unlimited tenants run in parallel)
    this.#loops = [run.claims.run(), run.claims.run()];
    this.#host.log.info(
      { worker: this.id, concurrency: this.#opts.concurrency, queues: queueNames(this.#opts.queues) ?? 'all' },
      'worker started',
    );
  }

  /** The parts that talk to the database, around the listening connection. */
  #setUp(db: Database): Run {
    const { schema, log } = this.#host;
    const opts = this.#opts;
    const running = () => this.#state === 'running';
    const names = channels(schema);
    const listener = new Listener({
      label: 'worker',
      clientConfig: db.clientConfig,
      channels: [names.jobs, names.cancel],
      log,
      // a cancel notification is a hint, which anyone may send (NOTIFY needs no privilege):
      // the heartbeat it asks for reads whether the job's row says so
      onNotification: (channel, payload) => {
        if (channel !== names.cancel) this.#wakeups.notified();
        else if (this.#held.cancelHeard(payload, performance.now())) void heartbeats.beat();
      },
      onConnect: (client) => this.#registration.register(client),
      onReady: () => this.#reconnected(),
      // the worker's lock is gone: it beats over the pool meanwhile, and buffered jobs
      // wait until it is back and a heartbeat after the loss confirms them (a claim
      // answered after it may hold jobs an upkeep took for a dead worker's)
      onDisconnect: () => {
        this.#registration.disconnected();
        heartbeats.listenerLost();
      },
    });
    const outcomes = new OutcomeWriter(
      db.pool,
      { schema, log, batchSize: opts.batchSize, asyncCommit: opts.asyncCommit, leaseMs: opts.leaseMs },
      () => this.#wakeups.slotsFreed(),
    );
    const { counters } = this;
    const held = this.#held;
    const registration = this.#registration;
    const wakeups = this.#wakeups;
    const claims = new ClaimLoop(db.pool, {
      schema,
      log,
      options: opts,
      counters,
      held,
      registration,
      listener,
      outcomes,
      wakeups,
      running,
      claimed: () => this.#pump(),
    });
    const heartbeats = new Heartbeats(db.pool, {
      schema,
      log,
      options: opts,
      held,
      registration,
      listener,
      // while stopping too: the running jobs' leases must outlast their grace period
      holding: () => this.#state === 'running' || this.#state === 'stopping',
      beaten: (dropped) => {
        this.#pump();
        // jobs held ahead and dropped (after a break: claims lost in a crash, jobs handed back)
        // leave room no handler's end announces: the claim loops may be asleep for a poll
        if (dropped && this.#want() > 0) this.#wakeups.wakeAll();
      },
    });
    const attempts: AttemptContext = {
      tasks: opts.tasks,
      sources: this.#host.sources,
      maxPayloadBytes: this.#host.maxPayloadBytes,
      load: async (ids) => (await selectJobs(db.pool, schema, ids)).map(toJob),
      watch: (timeoutMs) => this.#timeLimits.watch(timeoutMs),
    };
    const settling = { counters, outcomes, maxPayloadBytes: this.#host.maxPayloadBytes };
    return { db, listener, outcomes, claims, heartbeats, attempts, settling };
  }

  /**
   * Stops claiming, gives back the jobs claimed ahead but not started, lets running jobs
   * finish for up to `shutdownTimeoutMs` (their leases renewed meanwhile), then aborts the
   * rest (`ctx.signal`) and returns them to the queue (the attempt counts). Safe to call
   * twice.
   */
  stop(): Promise<void> {
    if (this.#state === 'new') {
      this.#state = 'stopped';
      this.#host.forget(this);
    }
    if (this.#state === 'stopped') return this.#stopped ?? Promise.resolve();
    // asked while starting: the start is let finish (or fail), then stopped; shut down at
    // once, the start went on afterwards and left a worker claiming after its stop
    this.#stopped ??=
      this.#state === 'starting' && this.#starting
        ? this.#starting.then(
            () => this.#shutdown(),
            () => {},
          )
        : this.#shutdown();
    return this.#stopped;
  }

  async #shutdown(): Promise<void> {
    this.#state = 'stopping';
    const run = this.#run;
    const upkeepStopped = this.#upkeep?.stop();
    this.#wakeups.wakeAll();
    await Promise.all(this.#loops);
    await upkeepStopped;
    // never started: given back without counting the attempt
    for (const job of this.#held.releaseAhead()) this.#live.outcomes.requeue({ ...leaseEntry(job), refund: true });
    // the heartbeats renew the running jobs' leases through the grace period (a lease that
    // cannot be renewed still stops its handler in time); an aborted attempt ends at once
    // (its handler, or its payload's validation, is raced against the abort)
    await this.#held.stopRunning(this.#opts.shutdownTimeoutMs, new WorkerStoppingError());
    await run?.heartbeats.stop();
    if (this.#expiry) clearInterval(this.#expiry);
    this.#timeLimits.stop();
    if (run) {
      await run.outcomes.drain();
      await this.#registration.unregister(run.listener.client ?? run.db.pool);
      await run.listener.stop();
    }
    this.#state = 'stopped';
    this.#host.forget(this);
    this.#host.log.info({ worker: this.id, ...this.counters }, 'worker stopped');
  }

  /** How many jobs to claim now (0: not worth a round trip yet). */
  #want(): number {
    return this.#live.claims.want();
  }

  /** Starts jobs held ahead while there is room, those whose lease is confirmed. */
  #pump(): void {
    while (this.#state === 'running' && this.#held.running < this.#opts.concurrency) {
      // a job ahead whose lease may have run out on the server is not ours to start any more
      this.#held.dropExpiredAhead(performance.now());
      const next = this.#held.next();
      if (!next) return;
      // from when the claim was sent, or the last heartbeat: otherwise the heartbeat tells
      // first (the process may have stood still, or lost its listening connection)
      const { heartbeats } = this.#live;
      if (!heartbeats.confirms(next)) {
        void heartbeats.beat();
        return;
      }
      this.#held.startNext();
      void this.#execute(next);
    }
  }

  async #execute(job: ActiveJob): Promise<void> {
    const run = this.#live;
    const task = taskOf(job, run.attempts);
    this.#settle(job, task, await runAttempt(job, task, run.attempts));
  }

  #settle(job: ActiveJob, task: TaskDefinition | undefined, outcome: Outcome): void {
    const run = this.#live;
    this.#held.end(job);
    const runMs = job.startedAt ? performance.now() - job.startedAt : 0;
    run.claims.ran(runMs);
    settleAttempt(job, task, outcome, runMs, run.settling);
    this.#pump();
    if (this.#want() > 0) this.#wakeups.wakeAll();
  }

  /**
   * The listening connection is up again and the worker registered on it: what waited
   * for the database goes on at once. The claim loops wake (jobs enqueued meanwhile were
   * announced to nobody), outcome writes retry, and a heartbeat confirms the leases of the
   * jobs held through the break (buffered ones start only after it).
   */
  #reconnected(): void {
    const run = this.#run;
    if (this.#state !== 'running' || !run) return;
    this.#registration.reconnected();
    run.outcomes.retryNow();
    run.heartbeats.listenerBack();
    void run.heartbeats.beat();
    this.#wakeups.wakeAll();
  }

  /** Stops the attempts whose lease could not be renewed in time; room made wakes the claim loops. */
  #expireLeases(): void {
    if (this.#held.expire(performance.now()) && this.#want() > 0) this.#wakeups.wakeAll();
  }
}
