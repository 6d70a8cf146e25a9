import type pg from 'pg';
import type { Logger } from '../log.js';
import { setProgress } from '../queries/progress.js';
import { heartbeat } from '../queries/workers.js';
import type { ActiveJob } from './activeJob.js';
import type { HeldJobs } from './heldJobs.js';
import type { ResolvedWorkerOptions } from './options.js';
import type { Registration } from './registration.js';

/** What the heartbeats read and act on. */
export interface HeartbeatParts {
  schema: string;
  log: Logger;
  options: Pick<ResolvedWorkerOptions, 'heartbeatMs' | 'leaseMs' | 'leaseMarginMs'>;
  held: HeldJobs;
  registration: Registration;
  /** The listening connection, which holds the registration. */
  listener: { readonly connected: boolean; readonly client: pg.Client | null };
  /** The worker runs, or waits for its running jobs to end: their leases are kept. */
  holding(): boolean;
  /**
   * A heartbeat confirmed the leases: start what may start now. `dropped`: jobs held
   * ahead were dropped (lost or cancelled), which leaves room no handler's end announces.
   */
  beaten(dropped: boolean): void;
}

/**
 * The worker's heartbeat: says it is alive, renews the leases of the jobs it holds, and
 * learns which of them were cancelled or lost meanwhile; it also writes their latest
 * `ctx.progress()`. Jobs held ahead start only while a heartbeat has recently confirmed
 * their lease.
 */
export class Heartbeats {
  readonly #pool: pg.Pool;
  readonly #p: HeartbeatParts;
  #timer: NodeJS.Timeout | null = null;
  /** The beats while the listening connection is down (see listenerLost). */
  #outageTimer: NodeJS.Timeout | null = null;
  /** The beats under way, until they end (one at a time). */
  #beating: Promise<void> | null = null;
  /** A beat was asked for while one was under way. */
  #again = false;
  /** When the last heartbeat that confirmed the held jobs' leases was sent (performance.now()). */
  #checkedAt = 0;
  #stopped = false;

  constructor(pool: pg.Pool, parts: HeartbeatParts) {
    this.#pool = pool;
    this.#p = parts;
  }

  start(): void {
    this.#timer = setInterval(() => void this.beat(), this.#p.options.heartbeatMs);
  }

  /** Whether beats go on: not stopped, and the worker still holds its jobs. */
  #holding(): boolean {
    return !this.#stopped && this.#p.holding();
  }

  /**
   * No beat after this, whatever the listening connection does next (it is closed last);
   * returns once a beat under way has ended, so that the worker's row is removed after it
   * (a beat that found the row gone would otherwise register the worker again).
   */
  async stop(): Promise<void> {
    this.#stopped = true;
    if (this.#timer) clearInterval(this.#timer);
    this.listenerBack();
    await this.#beating;
  }

  /**
   * The listening connection is lost, and with it the session lock that shows the worker
   * alive: the upkeep takes a worker without its lock for dead once it has not beaten for
   * a second, and hands its jobs to others while its handlers run on. The beats go on
   * over the pool, at least four a second, so that the worker's jobs stay its own however
   * long it takes to reconnect (a full `max_connections`, a proxy that refuses the new
   * connection). A worker cut off from PostgreSQL altogether cannot beat, and is taken
   * for dead a second after its last beat, as a crashed one.
   */
  listenerLost(): void {
    if (this.#outageTimer || !this.#holding()) return;
    const everyMs = Math.min(250, Math.ceil(this.#p.options.heartbeatMs / 4));
    this.#outageTimer = setInterval(() => void this.beat(), everyMs);
    void this.beat();
  }

  /** The listening connection is back (its own beats go on at their pace). */
  listenerBack(): void {
    if (this.#outageTimer) clearInterval(this.#outageTimer);
    this.#outageTimer = null;
  }

  /**
   * Whether `job`, held ahead, may start: the listening connection is up, and the job's
   * lease was confirmed within half a lease and since that connection was last lost (a
   * claim answered after that loss may hold jobs already reaped as a dead worker's), and
   * since a cancel of it was announced (the heartbeat reads whether it was; announced
   * before the job was held, since it was held).
   * While the connection is down, nothing held ahead starts: the beats over the pool
   * keep the worker alive only as long as they go on, a second at a time.
   */
  confirms(job: ActiveJob): boolean {
    const checkedAt = Math.max(job.claimSentAt, this.#checkedAt);
    return (
      this.#p.listener.connected &&
      performance.now() - checkedAt <= this.#p.options.leaseMs / 2 &&
      checkedAt >= this.#p.registration.disconnectedAt &&
      this.#checkedAt >= job.cancelHeardAt
    );
  }

  /**
   * A heartbeat now, unless the worker holds no more jobs; a failure is logged. One asked for
   * while another is under way follows it (that one may have been sent under the id the
   * worker had before it registered again).
   */
  async beat(): Promise<void> {
    if (!this.#holding()) return;
    if (this.#beating) {
      this.#again = true;
      return;
    }
    this.#beating = this.#beats();
    await this.#beating;
  }

  async #beats(): Promise<void> {
    try {
      do {
        this.#again = false;
        await this.#beat();
      } while (this.#again && this.#holding());
    } catch (error) {
      this.#p.log.debug({ err: error }, 'heartbeat failed');
    } finally {
      this.#beating = null;
    }
  }

  async #beat(): Promise<void> {
    const { schema, options, held, registration, listener } = this.#p;
    const worker = registration.id;
    // while the listening connection is down too: see listenerLost()
    if (worker === null) return;
    const sentAt = performance.now();
    const jobs = held.all();
    const result = await heartbeat(
      this.#pool,
      schema,
      worker,
      { ids: jobs.map((j) => j.row.id), tokens: jobs.map((j) => j.row.lease_token) },
      options.leaseMs,
    );
    if (!result.alive) {
      // our row was reaped: while the listening connection is down nothing can register
      // the worker again, and the jobs it holds will be handed back as a dead worker's,
      // so this beat confirms no lease; the registration on its return says what is left.
      // If the connection lived on (e.g. after a long stall), register again on it, unless
      // the worker stops (it removes its row after this beat)
      if (!listener.client || this.#stopped) return;
      await registration.register(listener.client);
    }
    const lost = new Set(result.lost);
    if (result.lease_left_ms !== null) {
      // every lease still held runs at least this long from the server's now(), which
      // came after sentAt: a deadline counted from sentAt is on the safe side
      const until = sentAt + result.lease_left_ms - options.leaseMarginMs;
      for (const job of jobs) {
        if (!lost.has(job.row.lease_token)) job.leaseUntil = Math.max(job.leaseUntil, until);
      }
    }
    const cancelled = new Set(result.cancelled);
    const ahead = held.ahead;
    for (const job of jobs) {
      if (lost.has(job.row.lease_token)) held.lose(job);
      else if (cancelled.has(job.row.lease_token)) held.cancelAttempt(job);
    }
    const dropped = held.ahead < ahead;
    await this.#writeProgress();
    // the leases of the jobs still held run at least half a lease from sentAt
    this.#checkedAt = sentAt;
    this.#p.beaten(dropped);
  }

  /** The latest ctx.progress() of running jobs, once a heartbeat at most. */
  async #writeProgress(): Promise<void> {
    const dirty = [...this.#p.held.runningJobs()].filter((j) => j.progressDirty && !j.lost);
    if (dirty.length === 0) return;
    for (const job of dirty) job.progressDirty = false;
    await setProgress(
      this.#pool,
      this.#p.schema,
      dirty.map((j) => ({ id: j.row.id, token: j.row.lease_token, progress: j.progress as string })),
    );
  }
}
